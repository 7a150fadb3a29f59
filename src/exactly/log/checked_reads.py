"""CRC checks of what a fetch reads from disk, each byte at most once per broker run.

Segments below the recovery point are trusted when a log opens, as Apache Kafka trusts them
(loader.py): their CRCs are not read. A byte flipped on disk there would be served as it is: a
consumer that checks CRCs (the Java client; librdkafka with check.crcs) stops at that batch for
good, one that does not takes the damaged records, and the broker says nothing. Checking every
fetched byte would cost CPU on the hot path (and fetch is to move to sendfile, issue 19), so the
broker checks each byte once:

- batches this process appended were validated at append (PartitionLog._parse), and batches that
  recovery validated after a crash likewise: they are never checked again;
- the rest, trusted at open, are a segment's `UncheckedBytes`: the first read of a range checks
  its batches (CRC, sizes, offsets) and takes them out, so later reads of it cost nothing.

A bad batch stays unchecked: the read gets the good batches before it, and a read that starts at
it fails with CorruptRecordError (Kafka's CORRUPT_MESSAGE, as its CorruptRecordException).
`CorruptBatches` logs each bad batch at ERROR with its file, offset and position (rate-limited),
and counts it once (the broker's `exactly_log_corrupt_batches_total`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from exactly.protocol.records import HEADER_SIZE, RecordBatchError, RecordBatchHeader

log = logging.getLogger(__name__)

LOG_INTERVAL_SECONDS = 10.0  # at most one ERROR per partition this often; the rest are counted


def batch_error(header: RecordBatchHeader, expected_offset: int) -> str | None:
    """Why a whole batch read from a segment is bad (magic, sizes, counts, CRC, an offset below
    `expected_offset`), or None. Batches of a cleaned log may have offset gaps (dense=False)."""
    try:
        header.validate(dense=False)
    except RecordBatchError as exc:
        return str(exc)
    if header.base_offset < expected_offset:
        return (f"base offset {header.base_offset} is below {expected_offset}, the offset the log "
                f"had reached: offsets not increasing")
    return None


class BadBatch(Exception):
    """A batch a read found bad: at file `position`, holding `offset` as far as the log knows."""

    def __init__(self, position: int, offset: int, reason: str) -> None:
        super().__init__(f"batch at position {position} (offset {offset}): {reason}")
        self.position = position
        self.offset = offset
        self.reason = reason


class UncheckedBytes:
    """The byte ranges [start, end) of one segment whose batches this process has not checked.
    Every range starts and ends at a batch boundary, as reads do."""

    __slots__ = ("ranges",)

    def __init__(self, end: int = 0) -> None:
        self.ranges: list[tuple[int, int]] = [(0, end)] if end > 0 else []

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def check(self, data: bytes, position: int, offset: int, *, base_offset: int,
              next_offset: int) -> int:
        """Check the unchecked batches of `data`: whole batches read at file `position`, from
        the batch holding `offset`, of a segment holding offsets [base_offset, next_offset).
        Returns how many bytes of `data` are good; raises BadBatch if its first batch is bad."""
        end = position + len(data)
        for a, b in list(self.ranges):
            start, stop = max(a, position), min(b, end)
            pos, expected = start, base_offset
            while pos < stop:
                off = pos - position
                if len(data) - off < HEADER_SIZE:
                    bad = BadBatch(pos, offset if pos == position else expected,
                                   f"{len(data) - off} bytes, too short for a batch header")
                else:
                    header = RecordBatchHeader(data, off)
                    reason = batch_error(header, expected)
                    if reason is None and header.last_offset >= next_offset:
                        reason = (f"last offset {header.last_offset} is past the segment's end "
                                  f"({next_offset})")
                    if reason is None:
                        expected = header.next_offset
                        pos += header.size
                        continue
                    bad = BadBatch(pos, header.base_offset, reason)
                self._checked(start, pos)
                if pos == position:
                    raise bad
                return off
            self._checked(start, stop)
        return len(data)

    def _checked(self, start: int, stop: int) -> None:
        """Take [start, stop) out of the unchecked ranges."""
        if start >= stop:
            return
        kept: list[tuple[int, int]] = []
        for a, b in self.ranges:
            if b <= start or a >= stop:
                kept.append((a, b))
                continue
            if a < start:
                kept.append((a, start))
            if b > stop:
                kept.append((stop, b))
        self.ranges = kept


class CorruptBatches:
    """The bad batches reads found in one partition: each logged (rate-limited) and counted once."""

    def __init__(self) -> None:
        self.count = 0
        self._seen: set[tuple[Path, int]] = set()
        self._logged_at = -LOG_INTERVAL_SECONDS
        self._not_logged = 0

    def found(self, path: Path, bad: BadBatch) -> None:
        if (path, bad.position) in self._seen:
            return
        self._seen.add((path, bad.position))
        self.count += 1
        now = time.monotonic()
        if now - self._logged_at < LOG_INTERVAL_SECONDS:
            self._not_logged += 1
            return
        log.error("event=corrupt_batch file=%s offset=%d position=%d not_logged_before=%d "
                  "reason=%s: fetches get the batches before it, or CORRUPT_MESSAGE; run "
                  "`exactly log verify` on the data directory and restore the partition",
                  path, bad.offset, bad.position, self._not_logged, bad.reason)
        self._logged_at = now
        self._not_logged = 0
