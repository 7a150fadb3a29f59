"""One segment: `<base offset>.log` holding record batches byte for byte, plus its indexes (offset,
time, aborted transactions)."""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from exactly.log.checked_reads import UncheckedBytes, batch_error
from exactly.log.errors import StorageError
from exactly.log.files import fsync_dir
from exactly.log.index import OffsetIndex, TimeIndex
from exactly.log.txn_index import TransactionIndex
from exactly.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
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
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
                raise TornBatch(pos + off, f"batch length {header.batch_length} is out of range "
                                           f"(below the header's {HEADER_SIZE - LOG_OVERHEAD})")
            if header.magic != MAGIC:
                raise TornBatch(pos + off, f"magic {header.magic}, not {MAGIC}: not a record batch")
            if pos + off + header.size > end:
                raise TornBatch(pos + off, f"batch of {header.size} bytes runs past the end of the "
                                           f"segment ({end - pos - off} bytes left): a torn tail, or "
                                           f"a length out of range")
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
    if len(buffers) <= _IOV_MAX:  # nearly every append: one call, whole
        want = sum(map(len, buffers))
        if os.pwritev(fd, buffers, offset) == want:
            return want
        # A short write: the loop below writes the same bytes at the same places again.
    total = 0
    for i in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[i : i + _IOV_MAX]
        want = sum(map(len, chunk))
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


class FileRecords:
    """Whole stored batches of a segment, bytes [position, position + size) of its file, for a
    fetch to send as they are (zero-copy fetch, issue 19). `len()` is their size, so kio's encoder
    writes the right length before them; `next_offset` is the offset after the last batch.

    The segment's descriptor is valid only while the event loop has not moved on (a retention or
    DeleteRecords pass may close it): whoever sends the bytes later takes a duplicate of it first
    (`open_duplicate`), which keeps the file, and so its bytes, even once the segment is deleted.
    Segments are append-only below their size, so the bytes sent are those read."""

    __slots__ = ("next_offset", "position", "segment", "size")

    def __init__(self, segment: LogSegment, position: int, size: int, next_offset: int) -> None:
        self.segment = segment
        self.position = position
        self.size = size
        self.next_offset = next_offset

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        """The bytes themselves (the copying path)."""
        return self.segment.read(self.position, self.size)

    def open_duplicate(self) -> int:
        """A descriptor of the segment's file of its own, for the caller to close."""
        return os.dup(self.segment.fd)


class LogSegment:
    """A segment file and its indexes; the partition log decides when to roll and what to append."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval: int, created_ms: int,
                 file_suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        # "" for a segment of the log; the cleaner builds its output as ".cleaned" files and
        # renames them to ".swap", then to the plain names (rename_files).
        self.file_suffix = file_suffix
        self.log_path = directory / segment_name(base_offset, ".log" + file_suffix)
        self.index = OffsetIndex(directory / segment_name(base_offset, ".index" + file_suffix),
                                 base_offset)
        self.time_index = TimeIndex(directory / segment_name(base_offset, ".timeindex" + file_suffix),
                                    base_offset)
        self.txn_index = TransactionIndex(
            directory / segment_name(base_offset, ".txnindex" + file_suffix), base_offset)
        self.index_interval = index_interval
        self.created_ms = created_ms
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1  # base offset of the first batch with max_timestamp
        self.first_timestamp = -1  # maxTimestamp of the first batch: the base of time-based rolls
        self._bytes_since_index: int | None = None
        self._fd: int | None = None
        # Bytes loaded from disk without their CRCs checked (checked_reads.py): reads check them.
        self.unchecked = UncheckedBytes()

    # -- files -----------------------------------------------------------------------------

    @property
    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, index_interval: int, created_ms: int,
               file_suffix: str = "") -> LogSegment:
        seg = cls(directory, base_offset, index_interval=index_interval, created_ms=created_ms,
                  file_suffix=file_suffix)
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

    @property
    def paths(self) -> tuple[Path, Path, Path, Path]:
        """The files of the segment: the log, then its offset, time and transaction indexes."""
        return self.log_path, self.index.path, self.time_index.path, self.txn_index.path

    def rename_files(self, file_suffix: str) -> None:
        """Rename the index files, make that durable, then the log, and make that durable: a
        crash leaves the log under its old name (the renamed indexes are then left-overs) or
        everything renamed. Open descriptors stay valid."""
        old = len(self.file_suffix)
        indexes = (self.index, self.time_index, self.txn_index)
        for index in indexes:
            index.close()
        for index in indexes:
            target = index.path.with_name(index.path.name[: len(index.path.name) - old] + file_suffix)
            os.replace(index.path, target)
            index.path = target
        fsync_dir(self.directory)
        target = self.log_path.with_name(self.log_path.name[: len(self.log_path.name) - old]
                                         + file_suffix)
        os.replace(self.log_path, target)
        self.log_path = target
        self.file_suffix = file_suffix
        fsync_dir(self.directory)

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

    def next_offset_before(self, start: int, end: int) -> int:
        """The offset after the last batch of [start, end), a range of whole batches read from
        `start`: from the segment's state when it ends the segment, else from the headers after
        the last index entry before `end` (a few batches)."""
        if end == self.size:
            return self.next_offset
        next_offset = -1
        for _, header in scan_batches(self.fd, max(start, self.index.floor_position(end - 1)), end,
                                      whole=False):
            next_offset = header.next_offset
        return next_offset

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
        file_size = os.fstat(self.fd).st_size
        if file_size == 0:
            self.size = 0
            return (self.index.load() and self.time_index.load()
                    and not self.index.keys and not self.time_index.keys)
        return self._trust_below(None, file_size) is not None

    def recover(self) -> Recovery:
        """Validate every batch (CRC included), rebuild the indexes, and cut the file at the first
        invalid batch."""
        self.index.reset()
        self.time_index.reset()
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp = self.offset_of_max_timestamp = self.first_timestamp = -1
        self._bytes_since_index = None
        self.unchecked = UncheckedBytes()
        recovery = self._validate_from(0)
        self.index.rewrite()
        self.time_index.rewrite()
        self._sync_index_files()
        return recovery

    def recover_from(self, offset: int) -> Recovery | None:
        """Recover after a crash from the recovery point `offset`, a batch boundary below which
        this segment and the index entries that find it were fsynced (PartitionLog.recovery_point):
        the batches below it are trusted as load() trusts a sealed segment (headers checked, not
        CRCs), only those from it on are validated, and the file is cut at the first invalid one.

        None when the files disagree with the recovery point (an index is missing or wrong, the
        offset lies inside a batch or past the end of the file): the caller then runs recover().
        """
        position = self._trust_below(offset, os.fstat(self.fd).st_size)
        if position is None:
            return None
        for index in (self.index, self.time_index):
            # Entries at or past the recovery point may point at bytes that validation cuts:
            # drop them from the file; the ones below stay as they were fsynced.
            os.truncate(index.path, index.size_bytes)
        recovery = self._validate_from(position)
        self.write_indexes()
        self._sync_index_files()
        return recovery

    def _sync_index_files(self) -> None:
        """Make the offset and time index files durable as recovery left them. Later entries are
        fsynced through the descriptor that writes them (PartitionLog.recovery_point), but a file
        recovery rewrote or cut has no such descriptor: without this, a recovery point taken
        before the next entry could rely on entries a power cut brings back stale."""
        for index in (self.index, self.time_index):
            fd = os.open(index.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _trust_below(self, limit: int | None, file_size: int) -> int | None:
        """Load the indexes and the segment's state from its files, trusting every batch (or, with
        `limit`, those below that offset, which must be a batch boundary): the index entries
        below the limit, the first batch's header and those after the last kept index entry are
        checked, no CRC. Returns where the trusted batches end, or None when anything disagrees.
        """
        idx, times = self.index, self.time_index
        if not idx.load() or not times.load():
            return None
        if limit is not None:  # indexes are sorted by offset: keep the entries below the limit
            kept = bisect_left(idx.keys, limit)
            del idx.keys[kept:], idx.values[kept:]
            kept = bisect_left(times.values, limit)
            del times.keys[kept:], times.values[kept:]
        if (not times.keys or not idx.keys or idx.values[0] != 0 or idx.keys[0] < self.base_offset
                or idx.values[-1] >= file_size):
            return None
        start, expected = idx.values[-1], idx.keys[-1]
        next_offset, end = self.base_offset, start
        try:
            first = next(scan_batches(self.fd, 0, file_size, whole=False))[1]
            if first.base_offset != idx.keys[0]:
                return None
            self.first_timestamp = first.max_timestamp
            self.max_timestamp, self.offset_of_max_timestamp = times.keys[-1], times.values[-1]
            for pos, header in scan_batches(self.fd, start, file_size, whole=False):
                if pos == start and header.base_offset != expected:
                    return None
                if limit is not None and header.base_offset >= limit:
                    break
                if header.base_offset < next_offset:
                    return None
                if header.max_timestamp > self.max_timestamp:
                    self.max_timestamp = header.max_timestamp
                    self.offset_of_max_timestamp = header.base_offset
                next_offset = header.next_offset
                end = pos + header.size
        except TornBatch:
            if limit is None:
                return None
            # A batch torn past the recovery point is validation's to cut; one torn below it
            # leaves next_offset short of the limit, and the check below refuses the point.
        if limit is not None and next_offset != limit:
            return None
        if not self.base_offset <= times.values[0] <= times.values[-1] < next_offset:
            return None
        self.size = end
        self.next_offset = next_offset
        self._bytes_since_index = end - idx.values[-1]
        self.unchecked = UncheckedBytes(end)
        return end

    def _validate_from(self, position: int) -> Recovery:
        """Validate the batches from `position` to the end of the file (CRC included), index
        them, and cut the file at the first invalid one."""
        file_size = os.fstat(self.fd).st_size
        valid_end = position
        reason = ""
        try:
            for pos, header in scan_batches(self.fd, position, file_size, whole=True):
                problem = batch_error(header, self.next_offset)
                if problem is not None:
                    raise TornBatch(pos, problem)
                self._track(pos, header.base_offset, header.next_offset, header.max_timestamp, header.size)
                valid_end = pos + header.size
        except TornBatch as exc:
            reason = exc.reason
        if valid_end < file_size:
            os.ftruncate(self.fd, valid_end)
            os.fsync(self.fd)
        return Recovery(validated=file_size - position, truncated=file_size - valid_end,
                        offset=self.next_offset, position=valid_end, reason=reason)


class Recovery(NamedTuple):
    """What recovering a segment read: `validated` bytes, from where validation began (the
    segment's start, or the recovery point) to the end of the file, checked batch by batch with
    CRCs up to the first invalid batch; `truncated` bytes cut off there. When some were, the
    first invalid batch was at file `position`, where offset `offset` would have been, and
    `reason` says what was wrong with it."""

    validated: int
    truncated: int
    offset: int = -1
    position: int = -1
    reason: str = ""
