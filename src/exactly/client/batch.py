"""The producer's record batches: records are encoded as they are appended, the batch is sealed
(joined and compressed) once, and its 61-byte header is stamped with the producer id, epoch and
base sequence when it is sent, so a retry resends the same bytes.

Speed matters here (this is the per-record hot path): varints of small numbers come from a
precomputed table, each record is a handful of bytes objects added to one list, the list is
joined once per batch, and the CRC-32C is computed once over the whole batch. The output is
byte-for-byte what `exactly.protocol.records.build_batch` builds (tested).

A record's future is not an asyncio future each: the batch completes once and a record's
`FutureRecordMetadata` reads its offset as `base_offset + index` from the batch.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import crc32c

from exactly.client.types import RecordMetadata
from exactly.protocol.primitives import varint_bytes
from exactly.protocol.records import (
    ATTR_TRANSACTIONAL,
    COMPRESSION_NAMES,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    compress,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CALLBACKS = threading.Lock()  # add_done_callback may come from another thread than completion
NO_PARTITION_LEADER_EPOCH = -1  # what Kafka's clients send; the broker fills in its own
CODECS = {name: codec for codec, name in COMPRESSION_NAMES.items()}
RECORD_OVERHEAD_MAX = 21  # attributes, varints of ts/offset deltas and lengths, header count


_TABLE_SIZE = 1 << 15
_VARINTS: list[bytes] = [varint_bytes(n) for n in range(_TABLE_SIZE)]  # n >= 0 only
_ATTR_TS: list[bytes] = [b"\x00" + v for v in _VARINTS]  # record attributes byte + ts delta
_NULL = varint_bytes(-1)  # b"\x01": a null key or value
_NO_HEADERS = b"\x00"


def varint(value: int) -> bytes:
    """A zigzag varint, as record fields use: from the table when small."""
    return _VARINTS[value] if 0 <= value < _TABLE_SIZE else varint_bytes(value)


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    parts = [varint(len(headers))]
    for hkey, hval in headers:
        kb = hkey.encode() if isinstance(hkey, str) else bytes(hkey)
        parts.append(varint(len(kb)))
        parts.append(kb)
        if hval is None:
            parts.append(_NULL)
        else:
            parts.append(varint(len(hval)))
            parts.append(hval)
    return b"".join(parts)


class ProducerBatch:
    """Records for one partition, encoded on append; sealed once, then stamped per send."""

    __slots__ = (
        "_event", "_waiter", "attempts", "base_offset", "base_sequence", "base_ts", "callbacks",
        "codec", "count", "created", "done", "encoded", "error", "limit", "log_append_time",
        "max_ts", "partition", "parts", "payload", "reserved", "retry_at", "sent_sequence", "size", "topic",
        "transactional",
    )

    def __init__(self, topic: str, partition: int, limit: int, codec: int, created: float,
                 base_ts: int) -> None:
        self.topic, self.partition = topic, partition
        self.limit = limit  # bytes of encoded records before the batch counts as full
        self.codec = codec
        self.created = created
        self.parts: list[bytes] = []
        self.count = 0
        self.size = 0
        self.reserved = 0  # buffer memory counted for this batch
        self.base_ts = self.max_ts = base_ts
        self.payload: bytes | None = None  # set by seal()
        self.encoded: tuple[int, int, int, bytes] | None = None  # (pid, epoch, seq, bytes)
        self.base_sequence = -1
        self.sent_sequence = -1
        self.transactional = False
        self.attempts = 0
        self.retry_at = 0.0
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        # Called once the batch is done, on the client's loop (record futures' callbacks, flush).
        self.callbacks: list[Callable[[], object]] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._event: threading.Event | None = None  # made by the first wait() from a thread

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes | None]] | None) -> int:
        """Encode a record into the batch; its index, or -1 when it would overfill the batch."""
        count = self.count
        delta = timestamp - self.base_ts
        ts = _ATTR_TS[delta] if 0 <= delta < _TABLE_SIZE else b"\x00" + varint_bytes(delta)
        off = _VARINTS[count] if count < _TABLE_SIZE else varint_bytes(count)
        if key is None:
            klen, key, kn = _NULL, b"", 0
        else:
            kn = len(key)
            klen = _VARINTS[kn] if kn < _TABLE_SIZE else varint_bytes(kn)
        if value is None:
            vlen, value, vn = _NULL, b"", 0
        else:
            vn = len(value)
            vlen = _VARINTS[vn] if vn < _TABLE_SIZE else varint_bytes(vn)
        hdr = encode_headers(headers) if headers else _NO_HEADERS
        body = len(ts) + len(off) + len(klen) + kn + len(vlen) + vn + len(hdr)
        blen = _VARINTS[body] if body < _TABLE_SIZE else varint_bytes(body)
        total = body + len(blen)
        if count and self.size + total > self.limit:
            return -1
        self.parts += (blen, ts, off, klen, key, vlen, value, hdr)
        self.size += total
        self.count = count + 1
        if timestamp > self.max_ts:  # noqa: PLR1730 - faster than max() on the hot path
            self.max_ts = timestamp
        return count

    @property
    def full(self) -> bool:
        return self.payload is not None or self.size >= self.limit

    def seal(self) -> None:
        """No more records: join and compress them (once; retries reuse the result)."""
        if self.payload is None:
            data = b"".join(self.parts)
            self.parts = []
            self.payload = data if self.codec == 0 else compress(self.codec, data)

    def encode(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """The batch on the wire, under this identity and sequence (cached for retries)."""
        cached = self.encoded
        if cached is not None and cached[:3] == (producer_id, producer_epoch, base_sequence):
            return cached[3]
        self.seal()
        assert self.payload is not None
        data = encode_batch(self.payload, self.count, self.base_ts, self.max_ts, codec=self.codec,
                            producer_id=producer_id, producer_epoch=producer_epoch,
                            base_sequence=base_sequence, transactional=self.transactional)
        self.encoded = (producer_id, producer_epoch, base_sequence, data)
        return data

    @property
    def wire_size(self) -> int:
        """Bytes on the wire (an estimate before the batch is sealed)."""
        return HEADER_SIZE + (len(self.payload) if self.payload is not None else self.size)

    # -- completion -------------------------------------------------------------------------

    def complete(self, base_offset: int = -1, log_append_time: int = -1,
                 error: BaseException | None = None) -> None:
        """Resolve every record of the batch at once (on the client's loop)."""
        if self.done:
            return
        self.base_offset, self.log_append_time, self.error = base_offset, log_append_time, error
        with _CALLBACKS:
            self.done = True
            event = self._event
            callbacks, self.callbacks = self.callbacks, None
        self.parts = []
        if event is not None:
            event.set()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        for fn in callbacks or ():
            fn()

    def when_done(self, fn: Callable[[], object]) -> None:
        """Call fn() once the batch is done (at once if it is), on the client's loop."""
        with _CALLBACKS:
            if not self.done:
                if self.callbacks is None:
                    self.callbacks = []
                self.callbacks.append(fn)
                return
        fn()

    def waiter(self) -> asyncio.Future[None]:
        """An asyncio future done with the batch; made on first use, on the client's loop."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
            if self.done:
                self._waiter.set_result(None)
        return self._waiter

    def wait(self, timeout: float | None) -> bool:
        """Wait in a thread other than the loop's until the batch is done (False: timed out).
        The event is made on demand: most batches are never waited for this way."""
        with _CALLBACKS:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic}-{self.partition}, {self.count} records, "
                f"seq={self.base_sequence}, done={self.done})")


def encode_batch(payload: bytes, count: int, base_ts: int, max_ts: int, *, codec: int = 0,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False) -> bytes:
    """Header + (compressed) records, with one CRC-32C over attributes..end."""
    attributes = codec | (ATTR_TRANSACTIONAL if transactional else 0)
    header = bytearray(_HEADER.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(payload),
                                    NO_PARTITION_LEADER_EPOCH, MAGIC, 0, attributes, count - 1,
                                    base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                                    count))
    crc = crc32c.crc32c(payload, crc32c.crc32c(memoryview(header)[21:]))
    _CRC.pack_into(header, 17, crc)
    return bytes(header) + payload


class FutureRecordMetadata:
    """A record's pending RecordMetadata, with the interface of concurrent.futures.Future
    (`result(timeout)`, `exception()`, `done()`, `add_done_callback()`) and awaitable on the
    client's loop. One batch completes all its records' futures at once."""

    __slots__ = ("batch", "index", "timestamp")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int) -> None:
        self.batch, self.index, self.timestamp = batch, index, timestamp

    def done(self) -> bool:
        return self.batch.done

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.batch.done

    def cancel(self) -> bool:
        return False  # a record handed to the producer cannot be taken back

    def _metadata(self) -> RecordMetadata:
        b = self.batch
        if b.error is not None:
            raise b.error
        offset = b.base_offset + self.index if b.base_offset >= 0 else -1
        ts = b.log_append_time if b.log_append_time >= 0 else self.timestamp
        return RecordMetadata(b.topic, b.partition, offset, ts)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self.batch.done and not self.batch.wait(timeout):
            raise TimeoutError(f"record for {self.batch.topic}-{self.batch.partition} "
                               f"not acknowledged within {timeout}s")
        return self._metadata()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.batch.done and not self.batch.wait(timeout):
            raise TimeoutError(f"record for {self.batch.topic}-{self.batch.partition} "
                               f"not acknowledged within {timeout}s")
        return self.batch.error

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call fn(self) once the record is acknowledged or failed (on the client's loop)."""
        self.batch.when_done(functools.partial(fn, self))

    def __await__(self) -> Any:
        if not self.batch.done:
            yield from self.batch.waiter().__await__()
        return self._metadata()

    def __repr__(self) -> str:
        state = "pending" if not self.batch.done else ("error" if self.batch.error else "done")
        return f"<FutureRecordMetadata {self.batch.topic}-{self.batch.partition} {state}>"
