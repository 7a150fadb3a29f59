"""Batch decoding without a broker: the C decoder (exactly.client._decode), the Python
uniform-batch path and the Python loop give the same records as the protocol layer's reference
decoder for every shape of batch, and the same records or errors as each other on any input."""

from __future__ import annotations

import os
import random
import struct
import zlib
from collections import namedtuple

import pytest

from exactly.client import decode as decoding
from exactly.client.decode import _decode_loop, decode_batch, decode_section
from exactly.client.fetcher import CompletedFetch, PartitionState
from exactly.client.types import ConsumerRecord, TopicPartition
from exactly.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    Record,
    RecordBatchError,
    RecordBatchHeader,
    _encode_record,
    _read_varint,
    build_batch,
    decode_records,
    iter_batches,
)

BASE_TS = 1_700_000_000_000


def _batches() -> dict[str, bytes]:
    rnd = random.Random(7)
    spread = [BASE_TS + rnd.randrange(0, 100_000) for _ in range(3000)]
    return {
        "uniform-null-key": build_batch([Record(None, os.urandom(100), timestamp=t)
                                         for t in spread[:3000]], timestamp=BASE_TS,
                                        base_offset=1000),
        "uniform-key": build_batch([Record(b"k%04d" % i, b"v" * 20, timestamp=spread[i])
                                    for i in range(200)], timestamp=BASE_TS),
        "uniform-null-value": build_batch([Record(b"key", None) for _ in range(50)],
                                          timestamp=BASE_TS),
        "empty-values": build_batch([Record(b"", b"") for _ in range(50)], timestamp=BASE_TS),
        "variable": build_batch([Record(None, b"x" * rnd.randrange(0, 300)) for _ in range(500)],
                                timestamp=BASE_TS),
        "headers": build_batch([Record(b"k", b"v", headers=(("h", b"1"), ("n", None)))
                                for _ in range(40)], timestamp=BASE_TS),
        "some-headers": build_batch([Record(b"k", b"v", headers=(("h", b"1"),) if i == 30 else ())
                                     for i in range(40)], timestamp=BASE_TS),
        "small": build_batch([Record(b"k", b"v") for _ in range(3)], timestamp=BASE_TS),
        "negative-ts": build_batch([Record(None, b"v" * 10, timestamp=BASE_TS - i * 7)
                                    for i in range(100)], timestamp=BASE_TS),
    }


def _compacted() -> bytes:
    """A batch whose offset deltas have gaps, as compaction leaves them."""
    data = bytearray()
    for i, delta in enumerate(range(0, 80, 2)):
        _encode_record(data, delta, i, Record(None, b"v" * 10))
    return bytes(data)


@pytest.fixture(params=["c", "python"])
def decoder(request, monkeypatch):
    """Each test below runs with the C decoder and with the Python one (uniform path + loop)."""
    if request.param == "python":
        monkeypatch.setattr(decoding, "_native", None)
    else:
        _native()
    return request.param


@pytest.mark.parametrize("name", list(_batches()))
def test_paths_agree_with_the_reference_decoder(name, decoder):
    batch = _batches()[name]
    h = RecordBatchHeader(batch)
    body = batch[HEADER_SIZE:]
    expected = [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in decode_records(h)]
    for decode in (decode_batch, _decode_loop):
        got = decode(body, h.records_count, h.base_offset, h.base_timestamp, -1, "t", 3, 0)
        assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == expected
        assert {(r.topic, r.partition, r.timestamp_type) for r in got} == {("t", 3, 0)}
        # a position inside the batch, and LogAppendTime
        start = h.base_offset + h.records_count // 2
        tail = decode(body, h.records_count, h.base_offset, h.base_timestamp, 42, "t", 3, start)
        assert [r.offset for r in tail] == [e[0] for e in expected if e[0] >= start]
        assert {(r.timestamp, r.timestamp_type) for r in tail} == {(42, 1)}


def test_gaps_in_offsets_take_the_loop(decoder):
    body = _compacted()
    got = decode_batch(body, 40, 500, BASE_TS, -1, "t", 0, 0)
    assert [r.offset for r in got] == list(range(500, 580, 2))
    assert [r.timestamp for r in got] == [BASE_TS + i for i in range(40)]


@pytest.mark.parametrize("cut", [1, 50, 101])
def test_truncated_or_padded_data_is_refused(cut, decoder):
    batch = _batches()["uniform-null-key"]
    h = RecordBatchHeader(batch)
    body = batch[HEADER_SIZE:]
    for data in (body[:-cut], body + b"\x00" * cut):
        with pytest.raises(RecordBatchError):
            decode_batch(data, h.records_count, h.base_offset, h.base_timestamp, -1, "t", 0, 0)


# -- the C decoder (exactly.client._decode) against the Python one -------------------------------
#
# The C decoder takes only well-formed data and returns None for anything else, which the
# Python decoder then decodes (or refuses) as it always did: on every input both give the same
# records or the same error.

_NATIVE = decoding._native


def _native():
    """The C extension: `pip install -e .` builds it (setup.py), given gcc and Python's headers."""
    assert _NATIVE is not None, (
        "exactly.client._decode is not built: reinstall with `pip install -e '.[test]'` "
        "(needs a C compiler and Python's headers)")
    return _NATIVE


def _both(monkeypatch, data, count, base_offset=0, base_ts=BASE_TS, log_append_ts=-1,
          min_offset=0, topic="t", partition=3):
    """(C result, Python result): ("ok", records) or ("error", message)."""
    out = []
    for native in (_native(), None):
        monkeypatch.setattr(decoding, "_native", native)
        try:
            out.append(("ok", decode_batch(data, count, base_offset, base_ts, log_append_ts,
                                           topic, partition, min_offset)))
        except RecordBatchError as exc:
            out.append(("error", str(exc)))
    return out


def _records_of(batch: bytes) -> tuple[bytes, RecordBatchHeader]:
    h = RecordBatchHeader(batch)
    return batch[HEADER_SIZE:], h


def _body(records_and_deltas) -> bytes:
    data = bytearray()
    for offset_delta, ts_delta, rec in records_and_deltas:
        _encode_record(data, offset_delta, ts_delta, rec)
    return bytes(data)


def _mixed_batches() -> dict[str, bytes]:
    rnd = random.Random(11)
    payload = os.urandom(400)
    batches = {name: batch[HEADER_SIZE:] for name, batch in _batches().items()}
    batches["mixed-sizes"] = _body((i, rnd.randrange(0, 70_000), Record(
        None if i % 3 else payload[: rnd.randrange(0, 20)],
        None if i % 7 == 3 else payload[: rnd.randrange(0, 400)])) for i in range(700))
    batches["mixed-headers"] = _body((i, i, Record(b"k", b"v" * i, headers=tuple(
        (f"h{j}-é", None if j % 2 else payload[:j]) for j in range(i % 4)))) for i in range(60))
    batches["long-varints"] = _body((i * 1000, -(i * 10_000_000), Record(
        payload[:200], payload[: 150 + i])) for i in range(50))
    # a header key that is not UTF-8 (decoded with replacement characters)
    batches["bad-utf8-header"] = bytes([24, 0, 0, 0, 1, 2, ord("v"), 2, 4, 0xFF, 0xC3, 2, ord("x")])
    batches["empty"] = b""
    return batches


_CORRUPT = {
    # 0x81 0x00 is 1 (null) written in two bytes: the Python loop reads it as an empty key
    "null-key-in-two-bytes": bytes([16, 0, 0, 0, 0x81, 0x00, 2, ord("v"), 0]),
    # a key length of -2
    "negative-key-length": bytes([16, 0, 0, 0, 3, ord("k"), 2, ord("v"), 0]),
    # a header count of -1
    "negative-header-count": bytes([10, 0, 0, 0, 1, 2, ord("v"), 1]),
    # a header key length of -1
    "negative-header-key": bytes([10, 0, 0, 0, 1, 2, ord("v"), 2, 1, 1]),
    # a header value length of -3: read as null
    "negative-header-value": bytes([10, 0, 0, 0, 1, 2, ord("v"), 2, 2, ord("h"), 5]),
    # a timestamp delta of eleven bytes
    "overlong-varint": bytes([10, 0]) + b"\xff" * 10 + b"\x01" + bytes([0, 1, 1, 0]),
    # the attributes byte is the last one
    "cut-after-length": bytes([10, 0]),
    "value-runs-past-the-end": bytes([10, 0, 0, 0, 1, 40, ord("v")]),
    "header-runs-past-the-end": bytes([10, 0, 0, 0, 1, 1, 2, 2, ord("h"), 40, 1]),
}


@pytest.mark.parametrize("name", [*_mixed_batches(), *_CORRUPT])
@pytest.mark.parametrize("log_append_ts", [-1, 1_800_000_000_000])
def test_c_and_python_decoders_agree(monkeypatch, name, log_append_ts):
    data = _CORRUPT[name] if name in _CORRUPT else _mixed_batches()[name]
    for count in {_count(data), _count(data) + 1, max(_count(data) - 1, 0)}:
        for min_offset in (0, 17, 10**6):
            c, py = _both(monkeypatch, data, count, base_offset=5, log_append_ts=log_append_ts,
                          min_offset=min_offset)
            assert c == py
            if name in _CORRUPT and name != "negative-header-value":
                # not well formed: handed back to the Python loop
                assert _native().decode_records(ConsumerRecord, data, 0, len(data), count, 5,
                                                BASE_TS, log_append_ts, "t", 3, min_offset) is None
            if c[0] == "ok":
                for a, b in zip(c[1], py[1], strict=True):
                    assert type(a) is ConsumerRecord
                    assert [type(x) for x in a] == [type(x) for x in b]


def _count(data: bytes) -> int:
    """How many records the data holds by their length prefixes (1 when they do not add up)."""
    pos = n = 0
    try:
        while pos < len(data):
            length, pos = _read_varint(data, pos)
            pos += length
            n += 1
    except (IndexError, RecordBatchError):
        return 1
    return n if pos == len(data) else 1


def test_c_decoder_refuses_nothing_the_python_one_takes():
    """Well-formed batches are decoded by the C decoder itself, never handed back."""
    native = _native()
    for name, data in _mixed_batches().items():
        if name == "empty":
            continue
        records = native.decode_records(ConsumerRecord, data, 0, len(data), _count(data), 0,
                                        BASE_TS, -1, "t", 0, 0)
        assert records is not None, name
        assert records == decoding._decode_loop(data, _count(data), 0, BASE_TS, -1, "t", 0, 0)


def test_c_decoder_reads_inside_a_larger_buffer():
    native = _native()
    batch = _batches()["variable"]
    h = RecordBatchHeader(batch)
    framed = b"\xee" * 9 + batch + b"\xee" * 5
    got = native.decode_records(ConsumerRecord, framed, 9 + HEADER_SIZE, 9 + len(batch),
                                h.records_count, h.base_offset, h.base_timestamp, -1, "t", 1, 0)
    assert got == decode_batch(batch[HEADER_SIZE:], h.records_count, h.base_offset,
                               h.base_timestamp, -1, "t", 1, 0)
    for start, end in ((-1, 10), (0, len(framed) + 1), (20, 10)):
        with pytest.raises(ValueError):
            native.decode_records(ConsumerRecord, framed, start, end, 1, 0, 0, -1, "t", 1, 0)


def test_c_records_are_ordinary_consumer_records():
    native = _native()
    data = _body([(0, 0, Record(b"k", b"v", headers=(("h", b"1"),)))])
    (record,) = native.decode_records(ConsumerRecord, data, 0, len(data), 1, 7, BASE_TS, -1,
                                      "t", 2, 0)
    assert record == ConsumerRecord("t", 2, 7, b"k", b"v", (("h", b"1"),), BASE_TS, 0)
    assert record._replace(offset=8).offset == 8
    assert record._asdict()["value"] == b"v"
    assert hash(record) == hash(tuple(record))
    with pytest.raises(TypeError):
        native.decode_records(list, data, 0, len(data), 1, 0, 0, -1, "t", 0, 0)


def test_decode_section_falls_back_to_python_without_the_extension(monkeypatch):
    batch = _batches()["uniform-null-key"]
    h = RecordBatchHeader(batch)
    expected = decode_batch(batch[HEADER_SIZE:], h.records_count, h.base_offset,
                            h.base_timestamp, -1, "t", 0, 0)
    monkeypatch.setattr(decoding, "_native", None)
    records, n = decode_section(batch, HEADER_SIZE, len(batch), h.records_count, h.base_offset,
                                h.base_timestamp, -1, "t", 0, 0)
    assert list(records) == expected and n == len(expected)


# -- whole fetch responses: control batches, aborted transactions, compression --------------------

_Aborted = namedtuple("_Aborted", "producer_id first_offset")
_COMMIT, _ABORT_MARKER = 1, 0


def _marker(kind: int, offset: int, pid: int) -> bytes:
    rec = Record(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0))
    return build_batch([rec], base_offset=offset, timestamp=BASE_TS, producer_id=pid,
                       producer_epoch=0, transactional=True, control=True)


def _fetch_response() -> tuple[bytes, list[_Aborted], int]:
    """A partition's records as a fetch returns them: plain, compressed and transactional
    batches (committed and aborted, interleaved), markers; returns data, aborted list, end."""
    rnd = random.Random(5)
    out = bytearray()
    aborted = []
    offset = 0
    codecs = [0, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]

    def records(n: int, uniform: bool) -> list[Record]:
        return [Record(None if i % 4 else b"key%d" % i,
                       b"u" * 100 if uniform else os.urandom(rnd.randrange(0, 300)),
                       headers=() if uniform or i % 5 else (("h", b"x"),),
                       timestamp=BASE_TS + rnd.randrange(0, 5000)) for i in range(n)]

    open_txns: dict[int, int] = {}
    for step in range(40):
        n = rnd.randrange(1, 120)
        kind = rnd.choice(["plain", "txn-a", "txn-b", "end"])
        codec = codecs[step % len(codecs)]
        if kind == "plain":
            out += build_batch(records(n, step % 2 == 0), base_offset=offset, timestamp=BASE_TS,
                               compression=codec)
        elif kind.startswith("txn"):
            pid = 100 if kind == "txn-a" else 200
            open_txns.setdefault(pid, offset)
            out += build_batch(records(n, step % 3 == 0), base_offset=offset, timestamp=BASE_TS,
                               producer_id=pid, producer_epoch=0, transactional=True,
                               compression=codec)
        else:
            if not open_txns:
                continue
            pid, first = open_txns.popitem()
            abort = rnd.random() < 0.5
            if abort:
                aborted.append(_Aborted(pid, first))
            out += _marker(_ABORT_MARKER if abort else _COMMIT, offset, pid)
            n = 1
        offset += n
    return bytes(out), aborted, offset


def _drain_all(data: bytes, aborted, end: int, read_committed: bool, start: int, step: int):
    tp = TopicPartition("t", 0)
    completed = CompletedFetch(tp, data, aborted, 0, end)
    state = PartitionState()
    state.position = start
    got = []
    while not completed.exhausted:
        got += completed.drain(state, step, read_committed)
    return got, state.position


@pytest.mark.parametrize("read_committed", [True, False])
@pytest.mark.parametrize("start", [0, 37])
def test_fetch_responses_drain_alike_with_and_without_the_extension(monkeypatch, read_committed,
                                                                    start):
    data, aborted, end = _fetch_response()
    results = []
    for native in (_native(), None):
        monkeypatch.setattr(decoding, "_native", native)
        results.append(_drain_all(data, aborted, end, read_committed, start, 500))
        assert _drain_all(data, aborted, end, read_committed, start, 7) == results[-1]
    assert results[0] == results[1]
    got, position = results[0]
    assert position == end
    offsets = [r.offset for r in got]
    assert offsets == sorted(offsets) and (not offsets or offsets[0] >= start)
    # control records are never returned; aborted transactions only with read_uncommitted
    expected = []
    for h in iter_batches(data):
        if h.is_control:
            continue
        if read_committed and h.is_transactional and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset
                and not _ended_before(data, a, h.base_offset) for a in aborted):
            continue
        expected += [r.offset for r in decode_records(h) if r.offset >= start]
    assert offsets == expected
    if read_committed:
        assert len(expected) < len([1 for h in iter_batches(data) if not h.is_control
                                    for _ in range(h.records_count)])


def _ended_before(data: bytes, aborted: _Aborted, offset: int) -> bool:
    """Whether the aborted transaction's marker comes before `offset`."""
    for h in iter_batches(data):
        if (h.is_control and h.producer_id == aborted.producer_id
                and aborted.first_offset <= h.base_offset < offset):
            return True
    return False


def test_gzip_batches_decode_through_the_c_decoder(monkeypatch):
    """A compressed batch is decompressed in Python, then decoded like any other."""
    recs = [Record(None, os.urandom(50)) for _ in range(30)]
    batch = build_batch(recs, timestamp=BASE_TS, compression=COMPRESSION_GZIP)
    h = RecordBatchHeader(batch)
    body = zlib.decompress(batch[HEADER_SIZE:], 16 + zlib.MAX_WBITS)
    calls = []
    native = _native()

    class Spy:
        @staticmethod
        def decode_records(*args):
            calls.append(args[1])
            return native.decode_records(*args)

    monkeypatch.setattr(decoding, "_native", Spy)
    got, _ = _drain_all(batch, [], h.next_offset, True, 0, 100)
    assert [r.value for r in got] == [r.value for r in recs]
    assert calls == [body]
