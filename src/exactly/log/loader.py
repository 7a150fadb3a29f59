"""Opening a partition directory: load or recover the segments, then rebuild the producer state
and the aborted-transaction indexes from the newest usable snapshot and the log after it.

After a clean stop (the `.clean_shutdown` marker) every segment's indexes are trusted. After a
crash, older segments are trusted when their indexes check out (they were fsynced at roll), and
the active segment is validated batch by batch (CRC) from the partition's recovery point, as
Apache Kafka does with its `recovery-point-offset-checkpoint`:

- The recovery point is `PartitionLog.flushed_offset`: the log is fsynced below it. The log
  manager writes it for every partition to `recovery-point-offset-checkpoint` in the log
  directory (Kafka's file and format, log/checkpoints.py), every
  `log.flush.offset.checkpoint.interval.ms` and after a clean stop.
- Bytes are not enough: recovery must also find the recovery point's position in the segment
  without reading what lies before it. The active segment's offset and time index entries are
  kept in memory and written lazily, so `PartitionLog.recovery_point` writes and fsyncs them
  before the checkpoint records the offset: the entries that lead to the recovery point are
  durable whenever the checkpoint is. Nothing else is added to Kafka's file.
- On open after a crash (`LogSegment.recover_from`): index entries at or past the recovery
  point are dropped, the batch headers from the last kept entry up to the recovery point are
  read (no more than about `index.interval.bytes`) to check that it is a batch boundary, and
  only the batches after it are validated; the file is cut at the first torn one, as before,
  with a WARN (`event=log_truncated`) naming the file, the offset and byte position of that
  batch and what was wrong with it (CRC, length, magic, offsets, a torn tail).
  The bytes below are trusted without their CRCs: a corrupt byte there is not noticed here (the
  trade Kafka makes; such a byte was fsynced, so only a failing disk puts it there), but by the
  first fetch that reads it (checked_reads.py) and by `exactly log verify` (verify.py).
- With no checkpoint entry, a recovery point outside the active segment, or files that disagree
  with it (an index entry missing or wrong, the offset inside a batch or past the end of the
  file, say after the file was truncated), the whole active segment is validated, as without a
  checkpoint.
- The producer state is rebuilt from the newest snapshot and the batch headers after it (no
  CRC, no record decoded). Snapshots are taken at roll, at a clean stop, and by the broker with
  each recovery-point checkpoint for every log that grew, so after a crash the replay covers at
  most one checkpoint interval.
- The broker fsyncs every log before it writes the checkpoint (a no-op under
  `log.flush.policy=fsync`), so under `os` too a crash costs at most one interval of validation.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from exactly.log.config import LogConfig
from exactly.log.markers import parse_marker
from exactly.log.producer_state import ProducerStateManager
from exactly.log.segment import LogSegment, Recovery
from exactly.log.swap import finish_swaps

log = logging.getLogger(__name__)

_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


def delete_segments(directory: Path, bases: list[int]) -> None:
    for base in bases:
        LogSegment(directory, base, index_interval=1, created_ms=0).delete()


@dataclass(frozen=True, slots=True)
class LoadedSegments:
    """What load_segments found, and what it read to find it."""

    segments: list[LogSegment]
    txn_rebuild_from: int  # the aborted-transaction indexes are rebuilt from here (none: the end)
    recovered_from: int | None  # the recovery point the active segment was recovered from
    validated_bytes: int  # read and checked batch by batch (CRC): 0 after a clean stop


def load_segments(directory: Path, config: LogConfig, *, clean: bool, now_ms: int,
                  recovery_point: int | None = None) -> LoadedSegments:
    """The segments, validated (and cut at the first torn batch), the offset from which the
    aborted-transaction indexes must be rebuilt, and what recovery read. After a crash the
    active segment is validated from `recovery_point` when the files agree with it."""
    finish_swaps(directory)  # a clean that a crash interrupted: completed or dropped
    bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
    for suffix in _INDEX_SUFFIXES:  # indexes whose segment is gone
        for p in directory.glob(f"*{suffix}"):
            if not p.stem.isdigit() or int(p.stem) not in bases:
                p.unlink(missing_ok=True)
    for p in directory.glob("*.txnindex.tmp"):
        p.unlink(missing_ok=True)
    interval = config.index_interval_bytes
    if not bases:
        return LoadedSegments([LogSegment.create(directory, 0, index_interval=interval,
                                                 created_ms=now_ms)], 0, None, 0)
    segments: list[LogSegment] = []
    rebuild_from: int | None = None
    recovered_from: int | None = None
    validated = 0
    for i, base in enumerate(bases):
        seg = LogSegment(directory, base, index_interval=interval, created_ms=now_ms)
        is_last = i == len(bases) - 1
        if segments and base < segments[-1].next_offset:
            log.warning("event=segment_overlap dir=%s base=%d", directory, base)
            delete_segments(directory, bases[i:])
            break
        # Older segments were fsynced at roll: trust them if their indexes check out. After
        # a crash the active segment may hold a torn tail: it is validated, from the recovery
        # point when there is a usable one.
        recovery: Recovery | None = None
        recovered = not ((clean or not is_last) and seg.load())
        if recovered:
            recovery, start = _recover(directory, seg, recovery_point if is_last else None)
            validated += recovery.validated
            if start > seg.base_offset:
                recovered_from = start
        segments.append(seg)
        if not _load_txn_index(seg, recovered):
            log.warning("event=txn_index_rebuild dir=%s segment=%d", directory, base)
            if rebuild_from is None:
                rebuild_from = base
        if recovery is not None and recovery.truncated:
            log.warning("event=log_truncated file=%s offset=%d position=%d bytes=%d reason=%s",
                        seg.log_path, recovery.offset, recovery.position, recovery.truncated,
                        recovery.reason)
            if not is_last:  # like Kafka: what follows a torn batch is not trusted
                delete_segments(directory, bases[i + 1 :])
                break
    return LoadedSegments(segments,
                          segments[-1].next_offset if rebuild_from is None else rebuild_from,
                          recovered_from, validated)


def _recover(directory: Path, seg: LogSegment, recovery_point: int | None) -> tuple[Recovery, int]:
    """Recover `seg` from `recovery_point` if it lies inside the segment and the files agree
    with it, else from its start. Returns what was read and the offset validation began at."""
    start, recovery = seg.base_offset, None
    if recovery_point is not None and recovery_point > seg.base_offset:
        recovery = seg.recover_from(recovery_point)
        if recovery is None:
            log.warning("event=recovery_point_unusable dir=%s segment=%d recovery_point=%d "
                        "action=validating_whole_segment", directory, seg.base_offset,
                        recovery_point)
        else:
            start = recovery_point
    if recovery is None:
        recovery = seg.recover()
    log.info("event=segment_recovered dir=%s segment=%d from_offset=%d validated_bytes=%d "
             "truncated_bytes=%d", directory, seg.base_offset, start, recovery.validated,
             recovery.truncated)
    return recovery, start


def _load_txn_index(seg: LogSegment, recovered: bool) -> bool:
    """Load the segment's aborted-transaction index; False (and empty) if it must be rebuilt."""
    index = seg.txn_index
    if index.load():
        if recovered:  # entries of markers cut off with a torn tail go
            index.truncate_to(seg.next_offset)
        if not index.entries or index.entries[-1].last_offset < seg.next_offset:
            return True
    index.reset()
    return False


def load_producer_state(ps: ProducerStateManager, segments: list[LogSegment], *, log_start_offset: int,
                        log_end_offset: int, txn_rebuild_from: int) -> int:
    """Load the newest snapshot at or below `txn_rebuild_from` and replay the log after it:
    producer state, open transactions, and every aborted-transaction entry from there on.
    Returns the offset the replay started from."""
    start = ps.load_snapshot(min_offset=log_start_offset, max_offset=log_end_offset,
                             at_most=min(txn_rebuild_from, log_end_offset))
    if start is None:
        start = log_start_offset
    for seg in segments:  # the replay recomputes these
        seg.txn_index.truncate_to(start)
    if start < log_end_offset:
        append = ps.begin()
        bases = [s.base_offset for s in segments]
        idx = max(0, bisect_right(bases, start) - 1)
        for seg in segments[idx:]:
            _, position = seg.index.lookup(start)
            for pos, h in seg.headers_from(position):
                if h.next_offset <= start or h.producer_id < 0:
                    continue
                marker = parse_marker(seg.read_batch(pos, h)) if h.is_control else None
                if marker is not None:
                    append.add_marker(h.producer_id, h.producer_epoch, h.base_offset, h.max_timestamp,
                                      commit=marker.commit, coordinator_epoch=marker.coordinator_epoch,
                                      validate=False)
                else:
                    append.add(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                               h.base_offset, h.last_offset, h.max_timestamp, is_control=h.is_control,
                               is_transactional=h.is_transactional, validate=False)
        for txn in append.commit():
            segments[bisect_right(bases, txn.last_offset) - 1].txn_index.add(txn)
    for seg in segments:
        if seg.txn_index.dirty:
            seg.txn_index.rewrite()
    return start
