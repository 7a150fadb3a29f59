"""One segment: `<base offset>.log` holding record batches byte for byte, plus its indexes (offset,
time, aborted transactions)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from exactly.log.errors import StorageError
from exactly.log.index import OffsetIndex, TimeIndex
from exactly.log.txn_index import TransactionIndex
from exactly.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    RecordBatchError,
    RecordBatchHeader,
)

HEADER_CHUNK = 16 * 1024  # header-only scans read this much at a time
RECOVERY_CHUNK = 4 * 1024 * 1024  # validating scans read whole batches, this much at a time
_IOV_MAX = 1000


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class TornBatch(Exception):
    """A batch that cannot be read whole: the log is valid only up to `position`."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"invalid batch at position {position}: {reason}")
        self.position = position
        self.reason = reason


def scan_batches(fd: int, start: int, end: int, *, whole: bool) -> Iterator[tuple[int, RecordBatchHeader]]:
    """Yield (file position, header) of each batch in [start, end).

    With `whole` the header's buffer holds the entire batch (for CRC checks and decoding);
    otherwise only the header is guaranteed. Raises TornBatch where the structure breaks.
    """
    chunk = RECOVERY_CHUNK if whole else HEADER_CHUNK
    pos = start
    while pos < end:
        buf = os.pread(fd, min(chunk, end - pos), pos)
        off = 0
        while pos + off < end:
            if len(buf) - off < HEADER_SIZE:
                if off == 0:
                    raise TornBatch(pos, "partial batch header at the end of the segment")
                break
            header = RecordBatchHeader(buf, off)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != MAGIC:
                raise TornBatch(pos + off, "not a record batch (bad length or magic)")
            if pos + off + header.size > end:
                raise TornBatch(pos + off, "batch runs past the end of the segment")
            if whole and off + header.size > len(buf):
                if off == 0:  # a batch bigger than the chunk: read it alone
                    buf = os.pread(fd, header.size, pos)
                    header = RecordBatchHeader(buf, 0)
                else:
                    break
            yield pos + off, header
            off += header.size
        pos += off


def _pwritev_all(fd: int, buffers: Sequence[bytes | bytearray | memoryview], offset: int) -> int:
    total = 0
    for i in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[i : i + _IOV_MAX]
        want = sum(len(b) for b in chunk)
        n = os.pwritev(fd, chunk, offset + total)
        if n < want:  # short write: finish byte by byte-range
            rest = memoryview(b"".join(chunk))[n:]
            pos = offset + total + n
            while rest:
                k = os.pwrite(fd, rest, pos)
                if k <= 0:
                    raise OSError("pwrite wrote nothing")
                rest = rest[k:]
                pos += k
        total += want
    return total


class LogSegment:
    """A segment file and its indexes; the partition log decides when to roll and what to append."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval: int, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / segment_name(base_offset, ".log")
        self.index = OffsetIndex(directory / segment_name(base_offset, ".index"), base_offset)
        self.time_index = TimeIndex(directory / segment_name(base_offset, ".timeindex"), base_offset)
        self.txn_index = TransactionIndex(directory / segment_name(base_offset, ".txnindex"), base_offset)
        self.index_interval = index_interval
        self.created_ms = created_ms
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1  # base offset of the first batch with max_timestamp
        self.first_timestamp = -1  # maxTimestamp of the first batch: the base of time-based rolls
        self._bytes_since_index: int | None = None
        self._fd: int | None = None

    # -- files -----------------------------------------------------------------------------

    @property
    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, index_interval: int, created_ms: int) -> LogSegment:
        seg = cls(directory, base_offset, index_interval=index_interval, created_ms=created_ms)
        for path in (seg.log_path, seg.index.path, seg.time_index.path, seg.txn_index.path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        return seg

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def write_indexes(self) -> None:
        self.index.write_pending()
        self.time_index.write_pending()

    def seal(self) -> None:
        """The segment stops being active: final time entry, everything durable, index files closed."""
        last = self.time_index.last()
        if self.offset_of_max_timestamp >= 0 and (last is None or self.max_timestamp > last[0]):
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
        self.sync()
        self.index.sync()
        self.time_index.sync()
        self.txn_index.sync()
        self.index.close()
        self.time_index.close()
        self.txn_index.close()

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.log_path.unlink(missing_ok=True)

    def largest_timestamp(self) -> int:
        """For retention: the largest record timestamp, or the file's mtime if there is none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    # -- append ----------------------------------------------------------------------------

    def append(self, buffers: Sequence[bytes | bytearray | memoryview],
               batches: Sequence[tuple[int, int, int, int]]) -> None:
        """Write `buffers` at the end; `batches` lists (base offset, next offset, max timestamp, size)."""
        position = self.size
        try:
            _pwritev_all(self.fd, buffers, position)
        except OSError as exc:
            try:  # nothing of a failed append may stay in the file
                os.ftruncate(self.fd, position)
            except OSError:
                pass
            raise StorageError(f"cannot write to {self.log_path}: {exc}") from exc
        for base, next_offset, max_ts, size in batches:
            self._track(position, base, next_offset, max_ts, size)
            position += size

    def _track(self, position: int, base: int, next_offset: int, max_ts: int, size: int) -> None:
        if position == 0:
            self.first_timestamp = max_ts
        if self.offset_of_max_timestamp < 0 or max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = base
        if self._bytes_since_index is None or self._bytes_since_index >= self.index_interval:
            self.index.append(base, position)
            last = self.time_index.last()
            if last is None or self.max_timestamp > last[0]:
                self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = next_offset
        self.size = position + size

    # -- lookups ---------------------------------------------------------------------------

    def headers_from(self, position: int) -> Iterator[tuple[int, RecordBatchHeader]]:
        return scan_batches(self.fd, position, self.size, whole=False)

    def find_batch(self, offset: int) -> tuple[int, RecordBatchHeader] | None:
        """The first batch whose last offset is >= `offset`."""
        _, position = self.index.lookup(offset)
        for pos, header in self.headers_from(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def position_of(self, offset: int) -> int:
        """Position of the first batch with base offset >= `offset` (the segment size if none)."""
        if offset >= self.next_offset:
            return self.size
        _, position = self.index.lookup(offset)
        for pos, header in self.headers_from(position):
            if header.base_offset >= offset:
                return pos
        return self.size

    def batch_boundary_within(self, start: int, limit: int) -> int:
        """The last batch boundary <= `limit`, at least the end of the batch at `start`."""
        pos = max(start, self.index.floor_position(limit))
        for p, header in self.headers_from(pos):
            if p + header.size > limit:
                if p == start:
                    return start + header.size
                return p
            pos = p + header.size
        return pos

    def read_batch(self, position: int, header: RecordBatchHeader) -> RecordBatchHeader:
        """The whole batch whose header was scanned at `position`, for decoding."""
        return RecordBatchHeader(self.read(position, header.size), 0)

    # -- loading and recovery --------------------------------------------------------------

    def load(self) -> bool:
        """Trust the files: load the indexes, check them, scan only after the last index entry.

        False when anything disagrees; the caller then runs recover().
        """
        self.size = os.fstat(self.fd).st_size
        if not self.index.load() or not self.time_index.load():
            return False
        if self.size == 0:
            return not self.index.keys and not self.time_index.keys
        if not self.time_index.keys:
            return False
        idx = self.index
        if not idx.keys or idx.values[0] != 0 or idx.keys[0] < self.base_offset or idx.values[-1] >= self.size:
            return False
        try:
            first = next(scan_batches(self.fd, 0, self.size, whole=False))[1]
            if first.base_offset != idx.keys[0]:
                return False
            self.first_timestamp = first.max_timestamp
            last = self.time_index.last()
            if last is not None:
                self.max_timestamp, self.offset_of_max_timestamp = last
            start = idx.values[-1]
            expected = idx.keys[-1]
            next_offset = self.base_offset
            for pos, header in scan_batches(self.fd, start, self.size, whole=False):
                if pos == start and header.base_offset != expected:
                    return False
                if header.base_offset < next_offset:
                    return False
                if self.offset_of_max_timestamp < 0 or header.max_timestamp > self.max_timestamp:
                    self.max_timestamp = header.max_timestamp
                    self.offset_of_max_timestamp = header.base_offset
                next_offset = header.next_offset
        except TornBatch:
            return False
        if self.time_index.keys and not (
            self.base_offset <= self.time_index.values[0] and self.time_index.values[-1] < next_offset
        ):
            return False
        self.next_offset = next_offset
        self._bytes_since_index = self.size - idx.values[-1]
        return True

    def recover(self) -> int:
        """Validate every batch (CRC included), rebuild the indexes, and cut the file at the first
        invalid batch. Returns the number of bytes truncated."""
        file_size = os.fstat(self.fd).st_size
        self.index.reset()
        self.time_index.reset()
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp = self.offset_of_max_timestamp = self.first_timestamp = -1
        self._bytes_since_index = None
        valid_end = 0
        try:
            for pos, header in scan_batches(self.fd, 0, file_size, whole=True):
                try:
                    header.validate()
                except RecordBatchError as exc:
                    raise TornBatch(pos, str(exc)) from None
                if header.base_offset < self.next_offset:
                    raise TornBatch(pos, f"offset {header.base_offset} goes backwards")
                self._track(pos, header.base_offset, header.next_offset, header.max_timestamp, header.size)
                valid_end = pos + header.size
        except TornBatch:
            pass
        if valid_end < file_size:
            os.ftruncate(self.fd, valid_end)
            os.fsync(self.fd)
        self.index.rewrite()
        self.time_index.rewrite()
        return file_size - valid_end
