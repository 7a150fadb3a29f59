"""Opening a partition directory: load or recover the segments, then rebuild the producer state
and the aborted-transaction indexes from the newest usable snapshot and the log after it."""

from __future__ import annotations

import logging
from bisect import bisect_right
from pathlib import Path

from exactly.log.config import LogConfig
from exactly.log.markers import parse_marker
from exactly.log.producer_state import ProducerStateManager
from exactly.log.segment import LogSegment

log = logging.getLogger(__name__)

_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


def delete_segments(directory: Path, bases: list[int]) -> None:
    for base in bases:
        LogSegment(directory, base, index_interval=1, created_ms=0).delete()


def load_segments(directory: Path, config: LogConfig, *, clean: bool, now_ms: int) -> tuple[list[LogSegment], int]:
    """The segments, validated (and cut at the first torn batch), and the offset from which the
    aborted-transaction indexes must be rebuilt (the log end offset if none must)."""
    bases = sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
    for suffix in _INDEX_SUFFIXES:  # indexes whose segment is gone
        for p in directory.glob(f"*{suffix}"):
            if not p.stem.isdigit() or int(p.stem) not in bases:
                p.unlink(missing_ok=True)
    for p in directory.glob("*.txnindex.tmp"):
        p.unlink(missing_ok=True)
    interval = config.index_interval_bytes
    if not bases:
        return [LogSegment.create(directory, 0, index_interval=interval, created_ms=now_ms)], 0
    segments: list[LogSegment] = []
    rebuild_from: int | None = None
    for i, base in enumerate(bases):
        seg = LogSegment(directory, base, index_interval=interval, created_ms=now_ms)
        is_last = i == len(bases) - 1
        if segments and base < segments[-1].next_offset:
            log.warning("event=segment_overlap dir=%s base=%d", directory, base)
            delete_segments(directory, bases[i:])
            break
        # Older segments were fsynced at roll: trust them if their indexes check out. After
        # a crash the active segment may hold a torn tail, so it is always validated.
        truncated = 0
        recovered = not ((clean or not is_last) and seg.load())
        if recovered:
            truncated = seg.recover()
        segments.append(seg)
        if not _load_txn_index(seg, recovered):
            log.warning("event=txn_index_rebuild dir=%s segment=%d", directory, base)
            if rebuild_from is None:
                rebuild_from = base
        if truncated:
            log.warning("event=log_truncated dir=%s segment=%d bytes=%d", directory, base, truncated)
            if not is_last:  # like Kafka: what follows a torn batch is not trusted
                delete_segments(directory, bases[i + 1 :])
                break
    return segments, segments[-1].next_offset if rebuild_from is None else rebuild_from


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
                        log_end_offset: int, txn_rebuild_from: int) -> None:
    """Load the newest snapshot at or below `txn_rebuild_from` and replay the log after it:
    producer state, open transactions, and every aborted-transaction entry from there on."""
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
