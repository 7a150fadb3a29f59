"""What a ShareFetch acquires from one partition's log: whole stored batches from the
share-partition's fetch offset, the records of those batches the member acquired, and the
AcquiredRecords ranges (KIP-932).

Under `share.isolation.level=read_committed` the read stops at the last stable offset, and
control batches and the batches of aborted transactions are never acquired (they count as
archived); under read_uncommitted it stops at the high watermark and only control batches are
skipped. Records go out as stored, as Kafka sends them: a batch some of whose records another
member holds is sent whole, and AcquiredRecords tells the client which of them are its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from exactly.log import PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import iter_batches
from exactly.share.partition import Acquired, LogBatch, SharePartition


@dataclass(frozen=True, slots=True)
class Fetched:
    """One partition's part of a ShareFetch answer."""

    error: ErrorCode = ErrorCode.none
    records: bytes = b""
    acquired: Sequence[Acquired] = field(default=())

    @property
    def count(self) -> int:
        return sum(a.last_offset - a.first_offset + 1 for a in self.acquired)

    def merge(self, later: Fetched) -> Fetched:
        """This answer and a later acquisition's of the same partition (a ShareFetch that waited
        for min_bytes): a batch both hold goes out once."""
        if self.error is not ErrorCode.none or later.error is not ErrorCode.none:
            return self if self.error is not ErrorCode.none else later
        seen = {h.base_offset for h in iter_batches(self.records)}
        view = memoryview(later.records)
        extra = b"".join(bytes(view[h.position:h.end]) for h in iter_batches(later.records)
                         if h.base_offset not in seen)
        return Fetched(ErrorCode.none, self.records + extra,
                       tuple(self.acquired) + tuple(later.acquired))


def acquire_from_log(sp: SharePartition, plog: PartitionLog, member_id: str, *,
                     read_committed: bool, max_records: int, max_bytes: int, batch_size: int,
                     now_ms: int, first: bool) -> Fetched:
    """Acquire up to `max_records` records for `member_id`, reading at most `max_bytes` (the
    first batch of a response whole even past it, KIP-74, when `first`)."""
    offset = max(sp.fetch_offset(), plog.log_start_offset)
    upper = plog.last_stable_offset if read_committed else plog.high_watermark
    if offset >= upper:
        return Fetched()
    try:
        data = plog.read(offset, max(max_bytes, 0), max_offset=upper, min_one_batch=first)
    except LogError as exc:
        return Fetched(exc.error_code)
    headers = list(iter_batches(data))
    aborted = plog.aborted_transaction_entries(offset, upper) if read_committed else []
    batches = []
    for h in headers:
        deliverable = not h.is_control and not (h.is_transactional and any(
            a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
            for a in aborted))
        batches.append(LogBatch(h.base_offset, h.last_offset, deliverable))
    acquired = sp.acquire(member_id, batches, max_records=max_records, now_ms=now_ms)
    if not acquired:
        return Fetched()
    view = memoryview(data)
    parts = [bytes(view[h.position:h.end]) for h in headers
             if any(a.first_offset <= h.last_offset and h.base_offset <= a.last_offset
                    for a in acquired)]
    return Fetched(ErrorCode.none, b"".join(parts), split(acquired, batch_size))


def split(acquired: Sequence[Acquired], batch_size: int) -> list[Acquired]:
    """AcquiredRecords of at most `batch_size` records each (ShareFetch's BatchSize)."""
    if batch_size <= 0:
        return list(acquired)
    out = []
    for a in acquired:
        first = a.first_offset
        while first <= a.last_offset:
            last = min(a.last_offset, first + batch_size - 1)
            out.append(Acquired(first, last, a.delivery_count))
            first = last + 1
    return out
