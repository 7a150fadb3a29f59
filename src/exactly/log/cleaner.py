"""The log cleaner: compaction of logs with `cleanup.policy=compact`, with Apache Kafka's semantics.

What a clean does (Kafka's LogCleaner, one partition at a time, the "filthiest" first):

- The log is split at the first dirty offset (the cleaner checkpoint: how far the last clean went)
  and at the first uncleanable offset: the base of the first segment that is the active one, or
  reaches the last stable offset (an undecided transaction), or is younger than
  `min.compaction.lag.ms`. A log is cleaned when its dirty share of bytes reaches
  `min.cleanable.dirty.ratio`, or when its oldest dirty record is older than
  `max.compaction.lag.ms`.
- An offset map of the dirty part gives each key's newest offset; records of aborted transactions
  (the aborted-transaction indexes say which) and control batches do not count.
- Every segment below the uncleanable offset is copied, in groups that fit one segment, keeping a
  record only if it is the newest of its key. Offsets never change: what is removed leaves a gap.
  A record without a key is dropped (a compacted log cannot hold one).
- Transactions (KIP-98): records of aborted transactions are removed. A COMMIT/ABORT marker stays
  while any batch of its transaction stays, and a tombstone (null value) stays, until their
  segment is older than `delete.retention.ms` (its newest timestamp, the clock retention uses):
  a consumer that reads the log from the start within that time sees every delete.
- The last batch of each producer stays, emptied of its records if need be, so that its epoch
  and sequence numbers survive in the log (a producer state rebuilt from the log after the
  snapshots were lost still knows it), as Kafka keeps it. The aborted-transaction index of a
  cleaned segment keeps the entries whose marker stays; no aborted record is left to filter.

Crash safety: each group is written beside the log as `.cleaned` files, then swapped in by
renames; log/swap.py says how, and how a start completes or drops a swap a crash interrupted.

Threads: `LogCleaner.grab_filthiest` and `LogCleaner.done` run on the log's owner thread (the
broker's event loop); `LogCleaner.clean` runs in a worker thread: it reads sealed segments through
descriptors of its own and writes new files, and hands the in-memory swap of each group to the
owner (`commit`). The owner never deletes or truncates a segment that is being cleaned (retention
waits: `PartitionLog.cleaning`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exactly import failpoints
from exactly.log.checkpoints import CLEANER_CHECKPOINT, read_checkpoint, write_checkpoint
from exactly.log.config import CleanerConfig
from exactly.log.partition import PartitionLog
from exactly.log.segment import LogSegment, TornBatch, scan_batches
from exactly.log.swap import remove_cleaned, swap_in
from exactly.log.txn_index import AbortedTxn
from exactly.protocol.records import (
    RecordBatchError,
    RecordBatchHeader,
    decode_records,
    rebuild_batch,
)

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 0x7FFFFFFF
_WRITE_CHUNK = 1024 * 1024  # cleaned batches are written this much at a time


class CleanAborted(Exception):
    """The partition was closed or deleted, or the broker is stopping: the clean is dropped."""


# -- what is cleanable ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """Kafka's LogToClean: the clean part [log start, first_dirty), the dirty part
    [first_dirty, end), and the rest (the active segment, undecided transactions, records younger
    than min.compaction.lag.ms)."""

    first_dirty: int
    end: int
    clean_bytes: int
    dirty_bytes: int
    overdue: bool  # a dirty record is older than max.compaction.lag.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(plog: PartitionLog, checkpoint: int | None, now_ms: int) -> CleanableRange:
    """Where the log of `plog` stands for the cleaner. Runs on the owner thread."""
    cfg = plog.config
    segments = plog.segments
    first_dirty = plog.log_start_offset if checkpoint is None else checkpoint
    if not plog.log_start_offset <= first_dirty <= plog.log_end_offset:
        first_dirty = plog.log_start_offset  # the log was truncated or deleted under it
    lso = plog.last_stable_offset
    end = segments[-1].base_offset
    for seg in segments[:-1]:
        if seg.base_offset < first_dirty or seg.is_empty:
            continue
        if seg.next_offset > lso or (cfg.min_compaction_lag_ms > 0
                                     and seg.largest_timestamp() > now_ms - cfg.min_compaction_lag_ms):
            end = seg.base_offset
            break
    end = max(end, first_dirty)
    clean_bytes = dirty_bytes = 0
    overdue = False
    for seg in segments:
        if seg.base_offset >= end:
            break
        if seg.base_offset < first_dirty:
            clean_bytes += seg.size
            continue
        dirty_bytes += seg.size
        if not overdue and not seg.is_empty and cfg.max_compaction_lag_ms < now_ms:
            first_ts = seg.first_timestamp if seg.first_timestamp >= 0 else seg.created_ms
            overdue = first_ts < now_ms - cfg.max_compaction_lag_ms
    return CleanableRange(first_dirty, end, clean_bytes, dirty_bytes, overdue)


def should_clean(plog: PartitionLog, cleanable: CleanableRange) -> bool:
    if cleanable.dirty_bytes == 0:
        return False
    return cleanable.overdue or cleanable.dirty_ratio >= plog.config.min_cleanable_dirty_ratio


# -- one clean -----------------------------------------------------------------------------------


@dataclass(slots=True)
class CleanTask:
    """Everything the worker needs, copied on the owner thread when the clean is planned."""

    plog: PartitionLog
    cleanable: CleanableRange
    sources: list[LogSegment]  # every segment below cleanable.end, oldest first
    txn_entries: list[list[AbortedTxn]]  # each source's aborted-transaction index
    aborted: dict[int, list[tuple[int, int]]]  # producer id -> (first offset, marker offset)
    last_batches: dict[int, int]  # producer id -> last offset of its last data batch
    now_ms: int
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def name(self) -> str:
        return f"{self.plog.topic}-{self.plog.partition}"


@dataclass(slots=True)
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    map_keys: int = 0
    groups: int = 0
    seconds: float = 0.0


class _Throttle:
    """log.cleaner.io.max.bytes.per.second: sleep whenever the cleaner ran ahead of the rate."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._start = clock()
        self._bytes = 0

    def account(self, nbytes: int) -> None:
        self._bytes += nbytes
        ahead = self._bytes / self.rate - (self._clock() - self._start)
        if ahead > 0.001:
            self._sleep(ahead)


class _Transactions:
    """What the copy needs to know of transactions: is a batch aborted, and has the transaction
    a marker closes kept any batch (then the marker stays)."""

    def __init__(self, aborted: dict[int, list[tuple[int, int]]]) -> None:
        self._aborted = aborted
        self._firsts = {pid: [first for first, _ in spans] for pid, spans in aborted.items()}
        self._kept: dict[int, bool] = {}

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        firsts = self._firsts.get(producer_id)
        if not firsts:
            return False
        i = bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= self._aborted[producer_id][i][1]

    def batch_kept(self, producer_id: int) -> None:
        self._kept[producer_id] = True

    def marker_read(self, producer_id: int) -> bool:
        """The marker of `producer_id`'s transaction: True if a batch of it was kept."""
        return self._kept.pop(producer_id, False)


def _batches(seg: LogSegment, stats: CleanStats, task: CleanTask,
             throttle: _Throttle | None) -> Iterator[RecordBatchHeader]:
    """Whole batches of a sealed segment, read through a descriptor of the worker's own."""
    fd = os.open(seg.log_path, os.O_RDONLY)
    try:
        for _pos, header in scan_batches(fd, 0, seg.size, whole=True):
            if task.stop.is_set() or task.plog.closed:
                raise CleanAborted(f"clean of {task.name} stopped")
            stats.bytes_read += header.size
            if throttle is not None:
                throttle.account(header.size)
            yield header
    except TornBatch as exc:  # a sealed segment was checked when the log opened
        raise RecordBatchError(f"{seg.log_path}: {exc}") from None
    finally:
        os.close(fd)


def build_offset_map(task: CleanTask, stats: CleanStats,
                     throttle: _Throttle | None = None) -> dict[bytes, int]:
    """Key -> offset of its newest record in the dirty part (committed or not transactional)."""
    txns = _Transactions(task.aborted)
    newest: dict[bytes, int] = {}
    first_dirty = task.cleanable.first_dirty
    for seg in task.sources:
        if seg.next_offset <= first_dirty:
            continue
        for h in _batches(seg, stats, task, throttle):
            if h.is_control or h.next_offset <= first_dirty:
                continue
            if h.is_transactional and txns.is_aborted(h.producer_id, h.base_offset):
                continue
            for rec in decode_records(h):
                if rec.key is not None and rec.offset >= first_dirty:
                    newest[rec.key] = rec.offset
    stats.map_keys = len(newest)
    return newest


def group_segments(segments: list[LogSegment], max_bytes: int, max_index_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments whose sum fits one segment (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    for seg in segments:
        if groups:
            group = groups[-1]
            size = sum(s.size for s in group) + seg.size
            index = sum(s.index.size_bytes for s in group) + seg.index.size_bytes
            time_index = sum(s.time_index.size_bytes for s in group) + seg.time_index.size_bytes
            span = seg.next_offset - 1 - group[0].base_offset
            if (size <= max_bytes and index <= max_index_bytes and time_index <= max_index_bytes
                    and span <= _MAX_RELATIVE_OFFSET):
                group.append(seg)
                continue
        groups.append([seg])
    return groups


class _Writer:
    """Batches of the cleaned segment, written a chunk at a time."""

    def __init__(self, seg: LogSegment) -> None:
        self.seg = seg
        self._buffers: list[bytes | memoryview] = []
        self._batches: list[tuple[int, int, int, int]] = []
        self._pending = 0
        self.written = 0

    def add(self, data: bytes | memoryview, h: RecordBatchHeader) -> None:
        self._buffers.append(data)
        self._batches.append((h.base_offset, h.next_offset, h.max_timestamp, len(data)))
        self._pending += len(data)
        if self._pending >= _WRITE_CHUNK:
            self.flush()

    def flush(self) -> None:
        if self._buffers:
            self.seg.append(self._buffers, self._batches)
            self.written += self._pending
        self._buffers, self._batches, self._pending = [], [], 0


def _clean_group(task: CleanTask, group: list[LogSegment], entries: list[AbortedTxn],
                 newest: dict[bytes, int], txns: _Transactions, stats: CleanStats,
                 throttle: _Throttle | None) -> LogSegment:
    plog = task.plog
    first = group[0]
    cleaned = LogSegment.create(plog.directory, first.base_offset,
                                index_interval=plog.config.index_interval_bytes,
                                created_ms=first.created_ms, file_suffix=".cleaned")
    out = _Writer(cleaned)
    kept_markers: set[int] = set()
    horizon = task.now_ms - plog.config.delete_retention_ms
    for seg in group:
        # Tombstones and markers without data go once their segment is older than the horizon.
        keep_deletes = seg.largest_timestamp() >= horizon
        for h in _batches(seg, stats, task, throttle):
            pid = h.producer_id
            if h.is_control:
                if txns.marker_read(pid) or keep_deletes:
                    out.add(bytes(h.raw()), h)
                    kept_markers.add(h.base_offset)
                continue
            if h.is_transactional and txns.is_aborted(pid, h.base_offset):
                records, kept = decode_records(h), []
            else:
                records = decode_records(h)
                kept = [r for r in records if r.key is not None
                        and r.offset >= newest.get(r.key, r.offset)
                        and (r.value is not None or keep_deletes)]
            stats.records_removed += len(records) - len(kept)
            if records and len(kept) == len(records):
                out.add(bytes(h.raw()), h)
            elif kept or (pid >= 0 and task.last_batches.get(pid) == h.last_offset):
                out.add(rebuild_batch(h, kept), h)
            else:
                continue
            if h.is_transactional:
                txns.batch_kept(pid)
    out.flush()
    cleaned.seal()
    cleaned.txn_index.entries = [e for e in entries if e.last_offset in kept_markers]
    cleaned.txn_index.rewrite()
    stats.bytes_written += out.written
    return cleaned


def clean(task: CleanTask, *, commit: Callable[[list[LogSegment], LogSegment], None],
          io_max_bytes_per_second: float | None = None) -> CleanStats:
    """Clean the log of `task` below `task.cleanable.end` (worker thread). `commit(old, new)`
    swaps a group's segments in memory on the owner thread, once the files are swapped."""
    started = time.monotonic()
    stats = CleanStats()
    throttle = None
    if io_max_bytes_per_second is not None and io_max_bytes_per_second < sys.float_info.max:
        throttle = _Throttle(io_max_bytes_per_second)
    plog = task.plog
    newest = build_offset_map(task, stats, throttle)
    txns = _Transactions(task.aborted)
    entries_of = {id(seg): entries for seg, entries in zip(task.sources, task.txn_entries, strict=True)}
    cfg = plog.config
    for group in group_segments(task.sources, cfg.segment_bytes, cfg.segment_index_bytes):
        entries = [e for seg in group for e in entries_of[id(seg)]]
        try:
            cleaned = _clean_group(task, group, entries, newest, txns, stats, throttle)
        except BaseException:
            remove_cleaned(plog.directory, group[0].base_offset)
            raise
        failpoints.hit("log.cleaner.after_cleaned")
        if task.stop.is_set() or plog.closed:
            cleaned.close()
            remove_cleaned(plog.directory, group[0].base_offset)
            raise CleanAborted(f"clean of {task.name} stopped")
        swap_in(cleaned, group)
        commit(group, cleaned)
        stats.groups += 1
    stats.seconds = time.monotonic() - started
    return stats


# -- the cleaner of a broker -----------------------------------------------------------------------


@dataclass(slots=True)
class CleanerMetrics:
    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    last_clean_ms: int = 0
    last_clean_seconds: float = 0.0
    dirty_ratios: dict[tuple[str, int], float] = field(default_factory=dict)


class LogCleaner:
    """Chooses what to clean and keeps the cleaner checkpoint (`cleaner-offset-checkpoint`).

    `grab_filthiest` and `done` run on the owner thread, `run` in a worker; `clean_once` does
    all three in the calling thread (tests, tools)."""

    def __init__(self, logs_dir: Path, list_logs: Callable[[], list[PartitionLog]],
                 config: CleanerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._list_logs = list_logs
        self._clock = clock
        self.checkpoint_path = Path(logs_dir) / CLEANER_CHECKPOINT
        self.checkpoints = read_checkpoint(self.checkpoint_path)
        self.metrics = CleanerMetrics()

    def grab_filthiest(self, now_ms: int | None = None) -> CleanTask | None:
        """The compacted log with the highest dirty ratio that needs cleaning, marked as being
        cleaned, or None."""
        if now_ms is None:
            now_ms = int(self._clock() * 1000)
        best: tuple[float, PartitionLog, CleanableRange] | None = None
        ratios: dict[tuple[str, int], float] = {}
        for plog in self._list_logs():
            if "compact" not in plog.config.cleanup_policy or plog.cleaning or plog.closed:
                continue
            key = (plog.topic, plog.partition)
            cleanable = cleanable_range(plog, self.checkpoints.get(key), now_ms)
            ratios[key] = cleanable.dirty_ratio
            if should_clean(plog, cleanable):
                rank = 2.0 if cleanable.overdue else cleanable.dirty_ratio
                if best is None or rank > best[0]:
                    best = (rank, plog, cleanable)
        self.metrics.dirty_ratios = ratios
        if best is None:
            return None
        _, plog, cleanable = best
        sources = [seg for seg in plog.segments if seg.base_offset < cleanable.end]
        aborted: dict[int, list[tuple[int, int]]] = {}
        for txn in plog.aborted_transaction_entries(plog.log_start_offset, cleanable.end):
            aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        for spans in aborted.values():
            spans.sort()
        last_batches = {e.producer_id: e.last_offset for e in plog.producers() if e.last_offset >= 0}
        plog.cleaning = True
        return CleanTask(plog, cleanable, sources, [list(s.txn_index.entries) for s in sources],
                         aborted, last_batches, now_ms)

    @staticmethod
    def run(task: CleanTask, commit: Callable[[list[LogSegment], LogSegment], None],
            io_max_bytes_per_second: float | None = None) -> CleanStats:
        return clean(task, commit=commit, io_max_bytes_per_second=io_max_bytes_per_second)

    def done(self, task: CleanTask, stats: CleanStats | None) -> None:
        """After `run` (stats) or its failure (None): checkpoint and metrics (owner thread)."""
        plog = task.plog
        plog.cleaning = False
        live = {(p.topic, p.partition) for p in self._list_logs()}
        stale = [key for key in self.checkpoints if key not in live]
        for key in stale:
            del self.checkpoints[key]
        if stats is not None and not plog.closed:
            self.checkpoints[(plog.topic, plog.partition)] = task.cleanable.end
            m = self.metrics
            m.runs += 1
            m.bytes_read += stats.bytes_read
            m.bytes_written += stats.bytes_written
            m.records_removed += stats.records_removed
            m.last_clean_ms = task.now_ms
            m.last_clean_seconds = stats.seconds
            log.info("event=log_cleaned partition=%s first_dirty=%d end=%d groups=%d read=%d "
                     "written=%d removed=%d keys=%d seconds=%.3f", task.name,
                     task.cleanable.first_dirty, task.cleanable.end, stats.groups, stats.bytes_read,
                     stats.bytes_written, stats.records_removed, stats.map_keys, stats.seconds)
        if stats is not None or stale:
            write_checkpoint(self.checkpoint_path, self.checkpoints)
            failpoints.hit("log.cleaner.after_checkpoint")

    def clean_once(self, now_ms: int | None = None) -> CleanStats | None:
        """Clean the filthiest log now, in this thread; None if no log needs it."""
        task = self.grab_filthiest(now_ms)
        if task is None:
            return None
        stats = None
        try:
            stats = self.run(task, lambda old, new: task.plog.replace_segments(old, new),
                             self.config.io_max_bytes_per_second)
        finally:
            self.done(task, stats)
        return stats

