"""The share-partition: which records of one topic partition a share group has delivered, to
whom, how often, and which are done (KIP-932, Kafka's `SharePartition`).

Sans-IO: callers pass the time in and the log's batches in; the answers are return values. The
handler (exactly/server/handlers/share.py) reads the log, the coordinator (coordinator.py)
persists the `StateChange`s this machine returns in `__share_group_state` (state_store.py).

Theory of operation
-------------------

Every offset from the share-partition start offset (SPSO, `start_offset`) up to the end offset
(`end_offset`, one past the last offset ever acquired) is in flight, in one state:

    AVAILABLE     may be acquired (never delivered yet, or released)
    ACQUIRED      delivered to one member, locked until `lock_deadline_ms`
    ACKNOWLEDGED  processed (ACCEPT)
    ARCHIVED      never delivered again (REJECT, a gap, or the delivery count reached its limit)
    TX_PENDING    acknowledged inside a producer's open transaction (KIP-1289): held, neither
                  acquirable nor done, until the transaction's marker applies or releases it

Offsets below the SPSO are all done; offsets from the end offset on are AVAILABLE and not
tracked yet. Offsets that hold no record (control batches, aborted transactions under
read_committed, compacted gaps) are never tracked: they count as ARCHIVED.

Events, each a method:

    acquire(member, batches, ...)   AVAILABLE -> ACQUIRED, delivery count + 1, lock = now + lock
    acknowledge(member, batches)    ACQUIRED (by that member) -> ACKNOWLEDGED (ACCEPT),
                                    ARCHIVED (REJECT, GAP), AVAILABLE (RELEASE)
    expire(now)                     ACQUIRED past its lock -> AVAILABLE
    release_member(member)          ACQUIRED by that member -> AVAILABLE (session closed, left)

A record that would become AVAILABLE with its delivery count at `share.delivery.count.limit`
becomes ARCHIVED instead. After each event the SPSO moves over the prefix of ACKNOWLEDGED and
ARCHIVED offsets. New records are acquired only while `end_offset - start_offset` stays below
`group.share.partition.max.record.locks`.

Acknowledgements are two steps, `stage_acknowledgements` (validate, change nothing) and
`apply_acknowledgements` (change the states); `acknowledge` does both. Transactional
acknowledgements (KIP-1289) stage, check with `txn_outcome` (what the commit gives: written in
the transaction first), then `hold` the records TX_PENDING under the transaction's producer id;
its marker ends them with `end_transaction`:

    hold(staged, producer id)             ACQUIRED (by that member) -> TX_PENDING
    end_transaction(producer id, commit)  TX_PENDING -> ACKNOWLEDGED / ARCHIVED (commit, as the
                                          acknowledgement said), AVAILABLE (abort, delivery count
                                          kept; ARCHIVED at the limit, as a release)

A TX_PENDING record has no lock: its lock expiry, its member leaving or its share session
closing leave it alone, however long the transaction takes (a prepared 2PC one included); the
transaction coordinator's timeout (or KIP-1309 session expiry) aborts the transaction instead.

What is durable (Kafka's rule): every state change except an acquisition is written, as
`StateChange` batches of (first, last, state, delivery count). An acquisition is not written:
after a crash the acquired records are AVAILABLE again with their last written delivery count
(0 if none was written). Among them may be offsets with no record (a compacted gap): the first
fetch that reads past such an offset archives it.

Rules that must never break: only the member holding a record may acknowledge it; an
ACKNOWLEDGED or ARCHIVED record is never acquired again; the SPSO never moves backwards.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from exactly.protocol.errors import ErrorCode


class RecordState(enum.IntEnum):
    """Kafka's values: 0, 2 and 4 are written to __share_group_state; 1 lives in memory only."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4
    # Memory only, as ACQUIRED: what a transaction holds is written as the states its commit
    # would give, in the transaction's own batch (state_store.py).
    TX_PENDING = 5

    @property
    def is_done(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AckType(enum.IntEnum):
    """AcknowledgeTypes of ShareFetch/ShareAcknowledge."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int = 0
    # TX_PENDING: the producer id of the transaction and the state its commit gives.
    txn_producer_id: int = -1
    txn_state: RecordState = RecordState.AVAILABLE


@dataclass(frozen=True, slots=True)
class LogBatch:
    """A stored batch as the handler saw it: its offsets, and whether it carries records a share
    consumer may get (not a control batch, not aborted under read_committed)."""

    base_offset: int
    last_offset: int
    deliverable: bool = True


@dataclass(frozen=True, slots=True)
class Acquired:
    """An AcquiredRecords entry of ShareFetch's answer."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """An AcknowledgementBatch: one type for the whole range, or one per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A range of offsets in one durable state, as ShareSnapshot/ShareUpdate values hold them."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateChange:
    """What to write: the SPSO after the event and the offsets whose durable state changed."""

    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class StagedAcks:
    """Validated acknowledgements of one member, not applied yet: (offset, AckType) pairs."""

    member_id: str
    entries: tuple[tuple[int, AckType], ...] = field(default=())


@dataclass(slots=True)
class Limits:
    """The group's settings this machine obeys; the coordinator updates them when configs
    change."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000


class SharePartition:
    def __init__(self, start_offset: int, limits: Limits,
                 durable: Iterable[StateBatch] = ()) -> None:
        """A share-partition at `start_offset`, with the durable states written earlier (after a
        restart: the replayed ShareSnapshot and ShareUpdates)."""
        self.limits = limits
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, InFlight] = {}
        for batch in durable:
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                self.records[offset] = InFlight(batch.state, batch.delivery_count)
                self.end_offset = max(self.end_offset, offset + 1)
        # Offsets between written ones were acquired and never acknowledged (acquisitions are
        # not written): AVAILABLE again. A gap of the log among them is archived when a fetch
        # reads past it.
        for offset in range(self.start_offset, self.end_offset):
            self.records.setdefault(offset, InFlight(RecordState.AVAILABLE, 0))
        self._advance()

    # -- queries ------------------------------------------------------------------------------

    def fetch_offset(self) -> int:
        """Where the next acquisition reads from: the lowest AVAILABLE offset in flight, else
        the end offset."""
        available = [o for o, r in self.records.items() if r.state is RecordState.AVAILABLE]
        return min(available) if available else self.end_offset

    def acquired_by(self, member_id: str) -> list[int]:
        return sorted(o for o, r in self.records.items()
                      if r.state is RecordState.ACQUIRED and r.member_id == member_id)

    @property
    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    # -- events -------------------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Iterable[LogBatch], *, max_records: int,
                now_ms: int) -> list[Acquired]:
        """Acquire the AVAILABLE records of `batches` (in offset order, from `fetch_offset()`)
        for `member_id`, batch by batch until `max_records` are taken: as Kafka 4.2+ (KIP-932's
        batch-optimized acquisition), a batch is acquired whole even when it crosses the limit.
        Returns the acquired ranges, one per run of consecutive offsets with the same delivery
        count."""
        deadline = now_ms + self.limits.record_lock_duration_ms
        taken: list[tuple[int, int]] = []  # (offset, delivery count)
        cursor = self.fetch_offset()
        for batch in batches:
            if len(taken) >= max_records:
                break
            self._archive_gap(cursor, batch.base_offset)
            cursor = batch.last_offset + 1
            for offset in range(max(batch.base_offset, self.start_offset),
                                batch.last_offset + 1):
                if offset < self.end_offset:
                    record = self.records.get(offset)
                    if record is None or record.state is not RecordState.AVAILABLE:
                        continue
                    if not batch.deliverable:
                        self._set(record, RecordState.ARCHIVED)
                        continue
                else:
                    if offset - self.start_offset >= self.limits.max_record_locks:
                        return _ranges(taken)
                    self.end_offset = offset + 1
                    if not batch.deliverable:
                        continue  # never tracked: counts as archived
                    record = self.records[offset] = InFlight(RecordState.AVAILABLE, 0)
                record.state = RecordState.ACQUIRED
                record.delivery_count += 1
                record.member_id = member_id
                record.lock_deadline_ms = deadline
                taken.append((offset, record.delivery_count))
        self._advance()  # undeliverable offsets at the start are done at once
        return _ranges(taken)

    def stage_acknowledgements(self, member_id: str,
                               batches: Sequence[AckBatch]) -> StagedAcks | ErrorCode:
        """Check acknowledgements without applying them: INVALID_REQUEST for a malformed batch,
        INVALID_RECORD_STATE for an offset this member does not hold."""
        entries: list[tuple[int, AckType]] = []
        for batch in batches:
            count = batch.last_offset - batch.first_offset + 1
            if count <= 0 or len(batch.types) not in (1, count):
                return ErrorCode.invalid_request
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                raw = batch.types[0] if len(batch.types) == 1 else batch.types[i]
                if raw not in AckType._value2member_map_:
                    return ErrorCode.invalid_request
                kind = AckType(raw)
                if offset < self.start_offset:
                    continue  # already done (acknowledged or archived): ignored, as Kafka
                record = self.records.get(offset)
                if kind is AckType.GAP and record is None:
                    continue  # a gap we never tracked: nothing to do
                if (record is None or record.state is not RecordState.ACQUIRED
                        or record.member_id != member_id):
                    return ErrorCode.invalid_record_state
                entries.append((offset, kind))
        return StagedAcks(member_id, tuple(entries))

    def apply_acknowledgements(self, staged: StagedAcks) -> StateChange | ErrorCode:
        """Apply what `stage_acknowledgements` accepted. INVALID_RECORD_STATE, changing nothing,
        if a record left the member meanwhile (its lock expired)."""
        if not self._still_held(staged):
            return ErrorCode.invalid_record_state
        changed = []
        for offset, kind in staged.entries:
            record = self.records[offset]
            if kind is AckType.ACCEPT:
                self._set(record, RecordState.ACKNOWLEDGED)
            elif kind is AckType.RELEASE:
                self._release(record)
            else:
                self._set(record, RecordState.ARCHIVED)
            changed.append(offset)
        return self._change(changed)

    def txn_outcome(self, staged: StagedAcks) -> tuple[StateBatch, ...] | ErrorCode:
        """What a transaction's commit would give these staged acknowledgements (KIP-1289),
        changing nothing: INVALID_REQUEST for a RELEASE (a transaction only accepts or
        rejects), INVALID_RECORD_STATE if a record left the member meanwhile."""
        if any(kind is AckType.RELEASE for _, kind in staged.entries):
            return ErrorCode.invalid_request
        if not self._still_held(staged):
            return ErrorCode.invalid_record_state
        return tuple(_state_batches(sorted(
            (offset, _committed(kind), self.records[offset].delivery_count)
            for offset, kind in staged.entries)))

    def hold(self, staged: StagedAcks, producer_id: int) -> None:
        """The records of `txn_outcome`'s acknowledgements become TX_PENDING in the open
        transaction of `producer_id`, once that outcome is written."""
        for offset, kind in staged.entries:
            record = self.records[offset]
            self._set(record, RecordState.TX_PENDING)
            record.txn_producer_id = producer_id
            record.txn_state = _committed(kind)

    def hold_replayed(self, producer_id: int, batches: Iterable[StateBatch]) -> None:
        """After a restart: the staged records of a transaction still open in the log are
        TX_PENDING again, until its marker (the coordinator rolls it forward or aborts it)."""
        for batch in batches:
            for offset in range(max(batch.first_offset, self.start_offset),
                                batch.last_offset + 1):
                record = self.records.setdefault(offset, InFlight(RecordState.AVAILABLE, 0))
                self.end_offset = max(self.end_offset, offset + 1)
                self._set(record, RecordState.TX_PENDING)
                record.delivery_count = batch.delivery_count
                record.txn_producer_id = producer_id
                record.txn_state = batch.state
        for offset in range(self.start_offset, self.end_offset):
            self.records.setdefault(offset, InFlight(RecordState.AVAILABLE, 0))

    def pending_producers(self) -> set[int]:
        """The producer ids whose transactions hold records here."""
        return {r.txn_producer_id for r in self.records.values()
                if r.state is RecordState.TX_PENDING}

    def end_transaction(self, producer_id: int, commit: bool) -> StateChange | None:
        """The marker of `producer_id`'s transaction: its TX_PENDING records take the state
        their acknowledgement said (commit), or are released (abort: AVAILABLE with their
        delivery count, ARCHIVED at the limit). None if it held nothing here."""
        changed = []
        for offset, record in self.records.items():
            if record.state is RecordState.TX_PENDING and record.txn_producer_id == producer_id:
                state = record.txn_state
                record.txn_producer_id, record.txn_state = -1, RecordState.AVAILABLE
                if commit:
                    self._set(record, state)
                else:
                    self._release(record)
                changed.append(offset)
        return self._change(changed) if changed else None

    def acknowledge(self, member_id: str,
                    batches: Sequence[AckBatch]) -> StateChange | ErrorCode:
        staged = self.stage_acknowledgements(member_id, batches)
        if isinstance(staged, ErrorCode):
            return staged
        return self.apply_acknowledgements(staged)

    def expire(self, now_ms: int) -> StateChange | None:
        """Release every acquisition whose lock has run out."""
        changed = []
        for offset, record in self.records.items():
            if record.state is RecordState.ACQUIRED and record.lock_deadline_ms <= now_ms:
                self._release(record)
                changed.append(offset)
        return self._change(changed) if changed else None

    def release_member(self, member_id: str) -> StateChange | None:
        """Release what `member_id` holds (its share session closed, or it left the group)."""
        changed = self.acquired_by(member_id)
        for offset in changed:
            self._release(self.records[offset])
        return self._change(changed) if changed else None

    # -- internals ----------------------------------------------------------------------------

    def _still_held(self, staged: StagedAcks) -> bool:
        for offset, _ in staged.entries:
            record = self.records.get(offset)
            if (record is None or record.state is not RecordState.ACQUIRED
                    or record.member_id != staged.member_id):
                return False
        return True

    def _archive_gap(self, first: int, end: int) -> None:
        """Offsets in [first, end) that the log has no batch for (compacted away): after a
        restart they may be tracked as AVAILABLE (never written, so never known as gaps)."""
        for offset in range(max(first, self.start_offset), min(end, self.end_offset)):
            record = self.records.get(offset)
            if record is not None and record.state is RecordState.AVAILABLE:
                self._set(record, RecordState.ARCHIVED)

    @staticmethod
    def _set(record: InFlight, state: RecordState) -> None:
        record.state = state
        record.member_id = None
        record.lock_deadline_ms = 0

    def _release(self, record: InFlight) -> None:
        limit_reached = record.delivery_count >= self.limits.delivery_count_limit
        self._set(record, RecordState.ARCHIVED if limit_reached else RecordState.AVAILABLE)

    def _advance(self) -> None:
        while self.start_offset < self.end_offset:
            record = self.records.get(self.start_offset)
            if record is not None and not record.state.is_done:
                break
            self.records.pop(self.start_offset, None)
            self.start_offset += 1

    def _change(self, offsets: Iterable[int]) -> StateChange:
        states = []
        for offset in sorted(offsets):
            if offset < self.start_offset:
                continue  # below the new SPSO: the start offset says it all
            record = self.records[offset]
            states.append((offset, record.state, record.delivery_count))
        self._advance()
        live = [(o, s, c) for o, s, c in states if o >= self.start_offset]
        return StateChange(self.start_offset, tuple(_state_batches(live)))


def _committed(kind: AckType) -> RecordState:
    return RecordState.ACKNOWLEDGED if kind is AckType.ACCEPT else RecordState.ARCHIVED


def _ranges(taken: list[tuple[int, int]]) -> list[Acquired]:
    out: list[Acquired] = []
    for offset, count in taken:
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == offset and last.delivery_count == count:
            out[-1] = Acquired(last.first_offset, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out


def _state_batches(entries: Iterable[tuple[int, RecordState, int]]) -> Iterator[StateBatch]:
    run: StateBatch | None = None
    for offset, state, count in entries:
        if (run is not None and run.last_offset + 1 == offset and run.state is state
                and run.delivery_count == count):
            run = StateBatch(run.first_offset, offset, state, count)
            continue
        if run is not None:
            yield run
        run = StateBatch(offset, offset, state, count)
    if run is not None:
        yield run
