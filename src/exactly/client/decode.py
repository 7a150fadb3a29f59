"""Record batch decoding: the records of a fetch response's batches as ConsumerRecords (the
consumer's Fetch, fetcher.py) or ShareRecords (a share consumer's ShareFetch, with the acquired
ranges), beside the C extension `_decode.c` that does the same faster.

Decoding is the hot path of a consumer. Records are tuples (a NamedTuple, as kafka-python's).
When the C extension `exactly.client._decode` is built (`pip install` builds it, given a C
compiler), it decodes a batch's records in one call, straight from the fetch response's bytes;
it takes only well-formed data and hands anything else back to the Python decoder below, so the
records and errors are the same either way (tested on a corpus). Without it, a batch whose
records all have the same key and value sizes and no headers (what a producer of fixed-size
records writes) is cut up by one regular expression and assembled with map/zip, all at C speed,
then checked to cover the batch exactly with dense offsets; any other batch goes through a
Python loop with the varint reading inlined for the common one-byte case.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from itertools import islice, repeat
from operator import add
from typing import Any

from exactly.client.types import ConsumerRecord, ShareRecord
from exactly.protocol.primitives import varint_bytes
from exactly.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatchError,
    RecordBatchHeader,
    decompress,
)

__all__ = ["decode_acquired", "decode_batch", "decode_lazily", "decode_section"]

_native: Any
try:
    import exactly.client._decode as _native
except ImportError:  # not built (no C compiler at install time): the Python decoder does it all
    _native = None

_new = tuple.__new__


def decode_batch(data: bytes, count: int, base_offset: int, base_ts: int, log_append_ts: int,
                 topic: str, partition: int, min_offset: int) -> list[ConsumerRecord]:
    """The records of one uncompressed records section; offsets below min_offset skipped.

    log_append_ts >= 0: the batch's LogAppendTime, which every record takes as its timestamp.
    """
    records, _ = decode_lazily(data, count, base_offset, base_ts, log_append_ts, topic,
                               partition, min_offset)
    return list(records)


def decode_lazily(data: bytes, count: int, base_offset: int, base_ts: int, log_append_ts: int,
                  topic: str, partition: int, min_offset: int
                  ) -> tuple[Iterator[ConsumerRecord], int]:
    """decode_batch's records as an iterator, and how many it yields."""
    return decode_section(data, 0, len(data), count, base_offset, base_ts, log_append_ts, topic,
                          partition, min_offset)


def decode_section(data: bytes, start: int, end: int, count: int, base_offset: int, base_ts: int,
                   log_append_ts: int, topic: str, partition: int, min_offset: int
                   ) -> tuple[Iterator[ConsumerRecord], int]:
    """The records of data[start:end] (a fetch response's bytes: no copy of the batch for the
    C decoder) as an iterator, and how many it yields."""
    if _native is not None:
        records = _native.decode_records(ConsumerRecord, data, start, end, count, base_offset,
                                         base_ts, log_append_ts, topic, partition, min_offset)
        if records is not None:
            return iter(records), len(records)
    if start or end != len(data):
        data = data[start:end]
    return _decode_python(data, count, base_offset, base_ts, log_append_ts, topic, partition,
                          min_offset)


def _decode_python(data: bytes, count: int, base_offset: int, base_ts: int, log_append_ts: int,
                   topic: str, partition: int, min_offset: int
                   ) -> tuple[Iterator[ConsumerRecord], int]:
    """The Python decoder. A uniform batch makes its records as they are taken: records that
    wait in a queue are a burden to the garbage collector (a tuple subclass is never untracked
    by it; the C decoder makes its records untracked), their bytes are not."""
    if count >= _UNIFORM_MIN:
        found = _decode_uniform(data, count, base_offset, base_ts, log_append_ts, topic,
                                partition)
        if found is not None:
            skip = min(max(min_offset - base_offset, 0), count)
            return (islice(found, skip, None) if skip else found), count - skip
    records = _decode_loop(data, count, base_offset, base_ts, log_append_ts, topic, partition,
                           min_offset)
    return iter(records), len(records)


# -- the uniform-batch path ------------------------------------------------------------------

_UNIFORM_MIN = 16  # below this, compiling and checking costs more than the loop
_VARINT = rb"[\x80-\xff]*[\x00-\x7f]"
_VARINT_GROUP = b"(" + _VARINT + b")"


class _VarintValues(dict[bytes, int]):
    """Encoded zigzag varint -> value, filled on first sight (timestamp deltas repeat a lot)."""

    def __missing__(self, raw: bytes) -> int:
        if len(self) > 65_536:
            self.clear()
        value, _ = _varint(raw, 0)
        self[raw] = value
        return value


_VARINT_VALUES = _VarintValues()
_DENSE: list[bytes] = [varint_bytes(i) for i in range(4096)]


def _dense(count: int) -> list[bytes]:
    """The offset deltas 0..count-1 as a producer writes them."""
    global _DENSE
    if count > len(_DENSE):
        _DENSE = [varint_bytes(i) for i in range(max(count, 2 * len(_DENSE)))]
    return _DENSE[:count]


@functools.lru_cache(maxsize=128)
def _uniform_pattern(key_len: int, value_len: int) -> tuple[re.Pattern[bytes], int]:
    """A record with these key and value lengths (-1: null) and no headers, and its number of
    groups: timestamp delta, offset delta, then the key and the value unless null."""
    parts = [_VARINT, b".", _VARINT_GROUP, _VARINT_GROUP]
    groups = 2
    for n in (key_len, value_len):
        if n < 0:
            parts.append(b"\x01")
        else:
            parts.append(re.escape(varint_bytes(n)) + b"(.{%d})" % n)
            groups += 1
    parts.append(b"\x00")
    return re.compile(b"".join(parts), re.DOTALL), groups


def _shape(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """Key length, value length (-1: null) and header count of the record at pos, and where
    the next record starts."""
    length, pos = _varint(data, pos)
    end = pos + length
    _, pos = _varint(data, pos + 1)
    _, pos = _varint(data, pos)
    key_len, pos = _varint(data, pos)
    value_len, pos = _varint(data, pos + max(key_len, 0))
    n_headers, _ = _varint(data, pos + max(value_len, 0))
    return key_len, value_len, n_headers, end


def _decode_uniform(data: bytes, count: int, base_offset: int, base_ts: int, log_append_ts: int,
                    topic: str, partition: int) -> Iterator[ConsumerRecord] | None:
    """The records, if every one has the first one's key and value sizes, no headers and the
    offset delta of its index; None otherwise (the loop decodes such a batch)."""
    try:
        key_len, value_len, n_headers, second = _shape(data, 0)
        same = _shape(data, second)[:3] == (key_len, value_len, n_headers)
    except IndexError:
        return None
    # Cheap signs of a batch of another kind, before the regular expression reads it all: the
    # second record differs, or the size is not about count times the first record's.
    if n_headers or not same or abs(len(data) - second * count) > 4 * count:
        return None
    pattern, groups = _uniform_pattern(key_len, value_len)
    # split() gives the text between matches and the groups of each match in one flat list of
    # bytes (no tuple per record); empty text between every two matches and at both ends means
    # the matches tile the data exactly: the same parse as the loop's, record by record.
    parts = pattern.split(data)
    step = groups + 1
    if len(parts) != count * step + 1 or any(parts[::step]):
        return None
    stamps, deltas = parts[1::step], parts[2::step]
    if deltas != _dense(count):
        return None
    keys: Iterable[bytes | None] = parts[3::step] if key_len >= 0 else repeat(None)
    values: Iterable[bytes | None] = (parts[4 if key_len >= 0 else 3 :: step] if value_len >= 0
                                      else repeat(None))
    if log_append_ts >= 0:
        timestamps: Iterable[int] = repeat(log_append_ts)
    else:
        timestamps = list(map(add, repeat(base_ts), map(_VARINT_VALUES.__getitem__, stamps)))
    return map(_new, repeat(ConsumerRecord), zip(
        repeat(topic), repeat(partition), range(base_offset, base_offset + count), keys, values,
        repeat(()), timestamps, repeat(1 if log_append_ts >= 0 else 0)))


# -- the general path ------------------------------------------------------------------------


def _decode_loop(data: bytes, count: int, base_offset: int, base_ts: int, log_append_ts: int,
                 topic: str, partition: int, min_offset: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    append = out.append
    ts_type = 1 if log_append_ts >= 0 else 0
    no_headers: tuple[tuple[str, bytes | None], ...] = ()
    pos = 0
    try:
        for _ in range(count):
            # length (skipped: the fields are read in order) and attributes (unused)
            b = data[pos]
            pos += 1
            while b >= 0x80:
                b = data[pos]
                pos += 1
            pos += 1
            # timestamp delta
            b = data[pos]
            pos += 1
            if b < 0x80:
                ts = (b >> 1) ^ -(b & 1)
            else:
                r, shift = b & 0x7F, 7
                while True:
                    b = data[pos]
                    pos += 1
                    r |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                ts = (r >> 1) ^ -(r & 1)
            # offset delta
            b = data[pos]
            pos += 1
            if b < 0x80:
                offset = base_offset + ((b >> 1) ^ -(b & 1))
            else:
                r, shift = b & 0x7F, 7
                while True:
                    b = data[pos]
                    pos += 1
                    r |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                offset = base_offset + ((r >> 1) ^ -(r & 1))
            # key
            b = data[pos]
            pos += 1
            if b == 1:
                key = None
            else:
                if b >= 0x80:
                    r, shift = b & 0x7F, 7
                    while True:
                        b = data[pos]
                        pos += 1
                        r |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                    b = r
                n = b >> 1
                key = data[pos : pos + n]
                pos += n
            # value
            b = data[pos]
            pos += 1
            if b == 1:
                value = None
            else:
                if b >= 0x80:
                    r, shift = b & 0x7F, 7
                    while True:
                        b = data[pos]
                        pos += 1
                        r |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                    b = r
                n = b >> 1
                value = data[pos : pos + n]
                pos += n
            # headers
            b = data[pos]
            pos += 1
            if b == 0:
                headers = no_headers
            else:
                n_headers, pos = _varint(data, pos - 1)
                hdrs: list[tuple[str, bytes | None]] = []
                for _ in range(n_headers):
                    n, pos = _varint(data, pos)
                    hkey = data[pos : pos + n].decode("utf-8", "replace")
                    pos += n
                    n, pos = _varint(data, pos)
                    if n < 0:
                        hdrs.append((hkey, None))
                    else:
                        hdrs.append((hkey, data[pos : pos + n]))
                        pos += n
                headers = tuple(hdrs)
            if offset >= min_offset:
                append(_new(ConsumerRecord, (topic, partition, offset, key, value, headers,
                                             log_append_ts if ts_type else base_ts + ts, ts_type)))
    except IndexError:
        raise RecordBatchError(f"{topic}-{partition}: a record runs past the end of its batch "
                               f"at offset {base_offset}") from None
    if pos != len(data):
        raise RecordBatchError(f"{topic}-{partition}: the batch at offset {base_offset} does not "
                               "end where its records do")
    return out


# Not primitives.read_varint: with it, 1000 records with headers decode ~60% slower (timeit).
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    r = shift = 0
    while True:
        b = data[pos]
        pos += 1
        r |= (b & 0x7F) << shift
        if b < 0x80:
            return (r >> 1) ^ -(r & 1), pos
        shift += 7


# -- share fetches (KIP-932) ------------------------------------------------------------------

def decode_acquired(topic: str, partition: int, data: bytes | None,
                    acquired: Iterable[Any]) -> tuple[list[ShareRecord], list[int]]:
    """The acquired records of a ShareFetch partition answer, and the acquired offsets that hold
    no record (gaps). Batches come whole; only offsets in an AcquiredRecords range count."""
    counts: dict[int, int] = {}
    for a in acquired:
        for offset in range(a.first_offset, a.last_offset + 1):
            counts[offset] = a.delivery_count
    records: list[ShareRecord] = []
    pos, size = 0, len(data or b"")
    while data and pos + LOG_OVERHEAD <= size:
        header = RecordBatchHeader(data, pos)
        if header.end > size:
            break
        pos = header.end
        attributes = header.attributes
        if attributes & ATTR_CONTROL:
            continue
        if attributes & 0x07:
            body = decompress(attributes & 0x07, data[header.position + HEADER_SIZE:header.end])
            start, stop = 0, len(body)
        else:
            body, start, stop = data, header.position + HEADER_SIZE, header.end
        decoded, _ = decode_section(
            body, start, stop, header.records_count, header.base_offset, header.base_timestamp,
            header.max_timestamp if attributes & ATTR_TIMESTAMP_TYPE else -1, topic, partition, 0)
        for r in decoded:
            count = counts.pop(r.offset, None)
            if count is not None:
                records.append(ShareRecord(*r, delivery_count=count))
    return records, sorted(counts)
