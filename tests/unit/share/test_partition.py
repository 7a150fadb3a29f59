"""The share-partition state machine (exactly.share.partition), with time as a number."""

from __future__ import annotations

import pytest

from exactly.protocol.errors import ErrorCode
from exactly.share.partition import (
    AckBatch,
    AckType,
    Acquired,
    Limits,
    LogBatch,
    RecordState,
    SharePartition,
    StateBatch,
    StateChange,
)

LOCK = 1000


def sp(start: int = 0, *, limit: int = 3, locks: int = 100) -> SharePartition:
    return SharePartition(start, Limits(record_lock_duration_ms=LOCK, delivery_count_limit=limit,
                                        max_record_locks=locks))


def ack(first: int, last: int, *types: AckType) -> AckBatch:
    return AckBatch(first, last, tuple(int(t) for t in types))


# (acknowledge type, delivery count before, state after) for a record held by "m".
TRANSITIONS = [
    (AckType.ACCEPT, 1, RecordState.ACKNOWLEDGED),
    (AckType.REJECT, 1, RecordState.ARCHIVED),
    (AckType.GAP, 1, RecordState.ARCHIVED),
    (AckType.RELEASE, 1, RecordState.AVAILABLE),
    (AckType.RELEASE, 3, RecordState.ARCHIVED),  # the delivery count reached the limit (3)
]


@pytest.mark.parametrize(("kind", "deliveries", "after"), TRANSITIONS)
def test_transition_table(kind: AckType, deliveries: int, after: RecordState) -> None:
    p = sp()
    p.acquire("m", [LogBatch(0, 0), LogBatch(1, 1)], max_records=1, now_ms=0)
    for _ in range(deliveries - 1):  # release and acquire again
        assert p.acknowledge("m", [ack(0, 0, AckType.RELEASE)]) == StateChange(
            0, (StateBatch(0, 0, RecordState.AVAILABLE, p.records[0].delivery_count),))
        p.acquire("m", [LogBatch(0, 0)], max_records=1, now_ms=0)
    assert p.records[0].delivery_count == deliveries
    change = p.acknowledge("m", [ack(0, 0, kind)])
    assert isinstance(change, StateChange)
    if after is RecordState.AVAILABLE:
        assert p.records[0].state is RecordState.AVAILABLE
        assert change.batches == (StateBatch(0, 0, RecordState.AVAILABLE, deliveries),)
    else:
        assert change.start_offset == 1 and change.batches == ()  # SPSO moved over it


def test_acquire_counts_deliveries_and_locks() -> None:
    p = sp()
    # Whole batches, as Kafka 4.2+: the batch that crosses max_records is taken whole, the
    # next one is left.
    got = p.acquire("a", [LogBatch(0, 2), LogBatch(3, 4)], max_records=2, now_ms=10)
    assert got == [Acquired(0, 2, 1)]
    assert p.records[2].lock_deadline_ms == 10 + LOCK
    assert p.acquire("b", [LogBatch(0, 2), LogBatch(3, 4)], max_records=10,
                     now_ms=10) == [Acquired(3, 4, 1)]
    assert p.acquired_by("a") == [0, 1, 2] and p.acquired_by("b") == [3, 4]
    assert p.fetch_offset() == 5 and p.in_flight == 5


def test_only_the_holder_may_acknowledge() -> None:
    p = sp()
    p.acquire("a", [LogBatch(0, 1)], max_records=10, now_ms=0)
    assert p.acknowledge("b", [ack(0, 0, AckType.ACCEPT)]) is ErrorCode.invalid_record_state
    assert p.acknowledge("a", [ack(5, 5, AckType.ACCEPT)]) is ErrorCode.invalid_record_state
    assert p.acknowledge("a", [ack(0, 1, AckType.ACCEPT, AckType.ACCEPT, AckType.ACCEPT)]) \
        is ErrorCode.invalid_request
    assert p.acknowledge("a", [ack(0, 0, 9)]) is ErrorCode.invalid_request  # type: ignore[arg-type]
    # a refused acknowledgement changed nothing
    assert p.acquired_by("a") == [0, 1]
    p.acknowledge("a", [ack(0, 1, AckType.ACCEPT)])
    # Below the start offset (already done): ignored, as Kafka 4.4 answers it.
    assert not isinstance(p.acknowledge("a", [ack(0, 0, AckType.ACCEPT)]), ErrorCode)


def test_per_offset_types_and_spso_advance_over_a_prefix() -> None:
    p = sp()
    p.acquire("a", [LogBatch(0, 3)], max_records=10, now_ms=0)
    change = p.acknowledge("a", [ack(0, 3, AckType.ACCEPT, AckType.RELEASE, AckType.REJECT,
                                     AckType.ACCEPT)])
    assert isinstance(change, StateChange)
    # 0 done -> SPSO 1; 1 available blocks the rest
    assert change.start_offset == 1
    assert change.batches == (StateBatch(1, 1, RecordState.AVAILABLE, 1),
                              StateBatch(2, 2, RecordState.ARCHIVED, 1),
                              StateBatch(3, 3, RecordState.ACKNOWLEDGED, 1))
    assert p.fetch_offset() == 1
    assert p.acquire("b", [LogBatch(0, 3)], max_records=10, now_ms=0) == [Acquired(1, 1, 2)]
    change = p.acknowledge("b", [ack(1, 1, AckType.ACCEPT)])
    assert isinstance(change, StateChange) and change.start_offset == 4 and p.records == {}


def test_lock_expiry_releases_and_the_limit_archives() -> None:
    p = sp(limit=2)
    p.acquire("a", [LogBatch(0, 0)], max_records=1, now_ms=0)
    assert p.expire(LOCK - 1) is None
    change = p.expire(LOCK)
    assert change == StateChange(0, (StateBatch(0, 0, RecordState.AVAILABLE, 1),))
    assert p.acquire("b", [LogBatch(0, 0)], max_records=1, now_ms=LOCK) == [Acquired(0, 0, 2)]
    change = p.expire(2 * LOCK)  # second delivery timed out: the limit (2) archives it
    assert change == StateChange(1, ())
    assert p.acquire("c", [LogBatch(0, 0)], max_records=1, now_ms=2 * LOCK) == []


def test_release_member() -> None:
    p = sp()
    p.acquire("a", [LogBatch(0, 0), LogBatch(1, 1)], max_records=1, now_ms=0)
    p.acquire("b", [LogBatch(0, 0), LogBatch(1, 1)], max_records=1, now_ms=0)
    change = p.release_member("a")
    assert change == StateChange(0, (StateBatch(0, 0, RecordState.AVAILABLE, 1),))
    assert p.acquired_by("b") == [1] and p.release_member("a") is None


def test_in_flight_limit() -> None:
    p = sp(locks=3)
    assert p.acquire("a", [LogBatch(0, 9)], max_records=10, now_ms=0) == [Acquired(0, 2, 1)]
    p.acknowledge("a", [ack(1, 2, AckType.ACCEPT)])
    assert p.acquire("b", [LogBatch(0, 9)], max_records=10, now_ms=0) == []  # 0 still held
    p.acknowledge("a", [ack(0, 0, AckType.ACCEPT)])
    assert p.start_offset == 3
    assert p.acquire("b", [LogBatch(3, 9)], max_records=10, now_ms=0) == [Acquired(3, 5, 1)]


def test_read_committed_skips_what_is_not_deliverable() -> None:
    # the handler marks control batches and aborted batches not deliverable
    p = sp()
    got = p.acquire("a", [LogBatch(0, 1), LogBatch(2, 3, deliverable=False),
                          LogBatch(4, 4, deliverable=False), LogBatch(5, 6)],
                    max_records=10, now_ms=0)
    assert got == [Acquired(0, 1, 1), Acquired(5, 6, 1)]
    change = p.acknowledge("a", [ack(0, 1, AckType.ACCEPT)])
    assert isinstance(change, StateChange) and change.start_offset == 5  # over the gap
    # a GAP acknowledgement of offsets never tracked is accepted and changes nothing
    assert isinstance(p.acknowledge("a", [ack(2, 2, AckType.GAP)]), StateChange)


def test_staged_acknowledgements_apply_later_or_fail_after_expiry() -> None:
    p = sp()
    p.acquire("a", [LogBatch(0, 1)], max_records=10, now_ms=0)
    staged = p.stage_acknowledgements("a", [ack(0, 1, AckType.ACCEPT)])
    assert not isinstance(staged, ErrorCode)
    assert p.acquired_by("a") == [0, 1]  # staging changes nothing
    p.expire(LOCK)
    assert p.apply_acknowledgements(staged) is ErrorCode.invalid_record_state
    p.acquire("a", [LogBatch(0, 1)], max_records=10, now_ms=LOCK)
    staged = p.stage_acknowledgements("a", [ack(0, 1, AckType.ACCEPT)])
    assert not isinstance(staged, ErrorCode)
    assert p.apply_acknowledgements(staged) == StateChange(2, ())


def test_restart_from_durable_state() -> None:
    durable = [StateBatch(5, 6, RecordState.ACKNOWLEDGED, 1),
               StateBatch(7, 7, RecordState.AVAILABLE, 2),
               StateBatch(8, 8, RecordState.ARCHIVED, 5)]
    p = SharePartition(5, Limits(LOCK, 5, 100), durable)
    assert p.start_offset == 7 and p.end_offset == 9
    got = p.acquire("a", [LogBatch(7, 10)], max_records=10, now_ms=0)
    assert got == [Acquired(7, 7, 3), Acquired(9, 10, 1)]


def test_after_a_restart_unwritten_offsets_are_available_and_log_gaps_archived() -> None:
    durable = [StateBatch(5, 5, RecordState.ACKNOWLEDGED, 1),
               StateBatch(8, 8, RecordState.ACKNOWLEDGED, 1)]
    p = SharePartition(5, Limits(LOCK, 5, 100), durable)
    # 6 and 7 were acquired before the crash, never written: available again
    assert p.start_offset == 6 and p.fetch_offset() == 6
    # the log no longer has offset 6 (compacted): the read starts at the batch holding 7
    got = p.acquire("a", [LogBatch(7, 7), LogBatch(8, 9)], max_records=10, now_ms=0)
    assert got == [Acquired(7, 7, 1), Acquired(9, 9, 1)]
    assert p.start_offset == 7  # 6 archived as a gap
