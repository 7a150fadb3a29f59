"""Transactional offset commits (TxnOffsetCommit): pending until the marker, then committed or
dropped; fencing through the partition's producer state; replay of markers on restart."""

from __future__ import annotations

import pytest

from exactly.groups import GroupCoordinator, OffsetToCommit
from exactly.log import PartitionLog
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import iter_batches
from tests.helpers.groups.group_helpers import SESSION, T0, join, sync

G = "txn-app"
PID, EPOCH = 4000, 0


def txn_commit(coord: GroupCoordinator, offsets: dict, *, group: str = G,  # type: ignore[type-arg]
               pid: int = PID, epoch: int = EPOCH, member: str = "", generation: int = -1,
               instance: str | None = None, now: int = T0) -> dict:  # type: ignore[type-arg]
    result = coord.commit_txn_offsets(
        group, pid, epoch,
        {tp: OffsetToCommit(*v) if isinstance(v, tuple) else OffsetToCommit(v)
         for tp, v in offsets.items()},
        member_id=member, generation_id=generation, group_instance_id=instance, now_ms=now)
    if result.log is not None:
        assert result.log is coord.log_for(group)
    return result.errors


def committed(coord: GroupCoordinator, tp: tuple[str, int], group: str = G) -> int | None:
    found = coord.fetch_offsets(group, [tp])[tp]
    return None if found is None else found.offset


def marker(coord: GroupCoordinator, group: str, pid: int, epoch: int, *, commit: bool,
           now: int = T0) -> None:
    """What the broker does at the end of a transaction: the marker, then complete_txn."""
    partition = coord.offsets_partition(group)
    coord.log_for(group).append_marker(pid, epoch, commit=commit, coordinator_epoch=0, now_ms=now)
    coord.complete_txn(partition, pid, commit, now)


def offsets_log(coord: GroupCoordinator, group: str = G) -> PartitionLog:
    return coord.log_for(group)


@pytest.fixture
def tenv(env):  # type: ignore[no-untyped-def]
    env.logs.create_topic("t", 3, internal=False)
    return env


# -- pending vs committed ---------------------------------------------------------------------


def test_pending_offsets_are_invisible_until_commit(tenv) -> None:
    coord = tenv.coordinator
    assert txn_commit(coord, {("t", 0): 5}) == {("t", 0): ErrorCode.none}
    assert committed(coord, ("t", 0)) is None
    assert coord.fetch_offsets(G, None) == {}
    assert coord.has_pending(G) and coord.pending_partitions(G) == {("t", 0)}
    assert coord.pending_producers(coord.offsets_partition(G)) == {PID}
    # A group that did not exist is created Empty (Kafka allows commits without members).
    assert [g.state for g in coord.list_groups()] == ["Empty"]

    marker(coord, G, PID, EPOCH, commit=True, now=T0 + 10)
    assert committed(coord, ("t", 0)) == 5
    assert not coord.has_pending(G) and coord.pending_partitions(G) == set()
    assert coord.pending_producers(coord.offsets_partition(G)) == set()
    found = coord.fetch_offsets(G, [("t", 0)])[("t", 0)]
    assert found is not None and found.commit_timestamp == T0  # the TxnOffsetCommit's time


def test_pending_does_not_replace_committed_and_abort_drops(tenv) -> None:
    coord = tenv.coordinator
    coord.commit_offsets(group_id=G, member_id="", group_instance_id=None, generation_id=-1,
                         offsets={("t", 0): OffsetToCommit(3)}, now_ms=T0)
    txn_commit(coord, {("t", 0): 9, ("t", 1): 1})
    assert committed(coord, ("t", 0)) == 3 and committed(coord, ("t", 1)) is None
    marker(coord, G, PID, EPOCH, commit=False)
    assert committed(coord, ("t", 0)) == 3 and committed(coord, ("t", 1)) is None
    assert not coord.has_pending(G)


def test_several_commits_of_one_transaction_and_the_next_transaction(tenv) -> None:
    coord = tenv.coordinator
    txn_commit(coord, {("t", 0): 1})
    txn_commit(coord, {("t", 0): 2, ("t", 1): 7})  # the same transaction commits again
    marker(coord, G, PID, EPOCH, commit=True)
    assert (committed(coord, ("t", 0)), committed(coord, ("t", 1))) == (2, 7)
    # The next transaction of the same producer, same epoch (transaction version 1).
    assert txn_commit(coord, {("t", 0): 4}) == {("t", 0): ErrorCode.none}
    marker(coord, G, PID, EPOCH, commit=True)
    assert committed(coord, ("t", 0)) == 4
    # Each TxnOffsetCommit is one transactional batch of the producer, with real sequences.
    plog = offsets_log(coord)
    data = [b for b in iter_batches(plog.read(0, 1 << 20)) if not b.is_control]
    assert [(b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional)
            for b in data] == [(PID, 0, 0, True), (PID, 0, 1, True), (PID, 0, 3, True)]


def test_a_later_plain_commit_wins_over_an_earlier_transaction(tenv) -> None:
    coord = tenv.coordinator
    txn_commit(coord, {("t", 0): 10, ("t", 1): 10})
    coord.commit_offsets(group_id=G, member_id="", group_instance_id=None, generation_id=-1,
                         offsets={("t", 0): OffsetToCommit(20)}, now_ms=T0 + 1)
    marker(coord, G, PID, EPOCH, commit=True)
    # Kafka's rule: transactional offsets replace only offsets written before them.
    assert (committed(coord, ("t", 0)), committed(coord, ("t", 1))) == (20, 10)


def test_two_producers_and_two_groups(tenv) -> None:
    coord = tenv.coordinator
    other = next(f"g{i}" for i in range(100)
                 if coord.offsets_partition(f"g{i}") != coord.offsets_partition(G))
    txn_commit(coord, {("t", 0): 1}, pid=1)
    txn_commit(coord, {("t", 0): 2}, pid=2)
    txn_commit(coord, {("t", 0): 3}, pid=1, group=other)
    # A marker for producer 1 in G's partition does not end its transaction in other's.
    marker(coord, G, 1, 0, commit=True)
    assert committed(coord, ("t", 0)) == 1 and committed(coord, ("t", 0), other) is None
    assert coord.has_pending(G) and coord.has_pending(other)
    assert coord.pending_producers(coord.offsets_partition(G)) == {2}
    assert coord.pending_producers(coord.offsets_partition(other)) == {1}
    marker(coord, G, 2, 0, commit=True)
    marker(coord, other, 1, 0, commit=False)
    assert committed(coord, ("t", 0)) == 2 and committed(coord, ("t", 0), other) is None
    assert not coord.has_pending(G) and not coord.has_pending(other)
    coord.complete_txn(coord.offsets_partition(G), 2, True, T0)  # again: nothing happens


def test_open_transaction_holds_the_offsets_partition_lso(tenv) -> None:
    coord = tenv.coordinator
    plog = offsets_log(coord)
    txn_commit(coord, {("t", 0): 1})
    assert plog.last_stable_offset == 0 < plog.high_watermark
    marker(coord, G, PID, EPOCH, commit=True)
    assert plog.last_stable_offset == plog.high_watermark


# -- validation -------------------------------------------------------------------------------


def test_unknown_partitions_and_bad_metadata_per_partition(tenv) -> None:
    coord = tenv.coordinator
    errors = txn_commit(coord, {("t", 0): 1, ("t", 9): 1, ("nope", 0): 1,
                                ("t", 1): (1, -1, "x" * 5000)})
    assert errors == {("t", 0): ErrorCode.none, ("t", 9): ErrorCode.unknown_topic_or_partition,
                      ("nope", 0): ErrorCode.unknown_topic_or_partition,
                      ("t", 1): ErrorCode.offset_metadata_too_large}
    assert coord.pending_partitions(G) == {("t", 0)}
    assert coord.commit_txn_offsets("", PID, 0, {("t", 0): OffsetToCommit(1)}, now_ms=T0
                                    ).errors == {("t", 0): ErrorCode.invalid_group_id}


def test_nothing_accepted_writes_nothing(tenv) -> None:
    coord = tenv.coordinator
    result = coord.commit_txn_offsets(G, PID, 0, {("nope", 0): OffsetToCommit(1)}, now_ms=T0)
    assert result.log is None and not coord.has_pending(G)
    assert coord.list_groups() == [] and offsets_log(coord).log_end_offset == 0


def test_member_and_generation_checked_when_given(tenv) -> None:
    coord = tenv.coordinator
    joined = join(coord, G, now=T0, instance="i-1")  # a static member joins in one step
    member, gen = joined[0].member_id, joined[0].generation_id
    assert sync(coord, G, member, gen, now=T0, instance="i-1")[0].error is ErrorCode.none
    tp = ("t", 0)
    # v0-2 requests carry no member: accepted whatever the group's state.
    assert txn_commit(coord, {tp: 1}) == {tp: ErrorCode.none}
    assert txn_commit(coord, {tp: 1}, member=member, generation=gen,
                      instance="i-1") == {tp: ErrorCode.none}
    assert txn_commit(coord, {tp: 1}, member=member,
                      generation=gen + 1) == {tp: ErrorCode.illegal_generation}
    assert txn_commit(coord, {tp: 1}, member="who", generation=gen) == {
        tp: ErrorCode.unknown_member_id}
    assert txn_commit(coord, {tp: 1}, member="who", generation=gen, instance="i-1") == {
        tp: ErrorCode.fenced_instance_id}
    # A group that does not exist has no members.
    assert txn_commit(coord, {tp: 1}, group="fresh", member="m", generation=1) == {
        tp: ErrorCode.unknown_member_id}
    assert not coord.has_pending("fresh")
    # Refused commits left nothing pending beyond the accepted ones.
    assert coord.pending_partitions(G) == {tp}


def test_fenced_producer_epoch(tenv) -> None:
    coord = tenv.coordinator
    txn_commit(coord, {("t", 0): 1}, epoch=0)
    # The coordinator aborts with a bumped epoch (KIP-890): the old epoch is fenced.
    marker(coord, G, PID, 1, commit=False)
    assert txn_commit(coord, {("t", 0): 2}, epoch=0) == {("t", 0): ErrorCode.invalid_producer_epoch}
    assert not coord.has_pending(G)
    assert txn_commit(coord, {("t", 0): 3}, epoch=1) == {("t", 0): ErrorCode.none}
    assert txn_commit(coord, {("t", 0): 4}, epoch=2) == {("t", 0): ErrorCode.none}  # new epoch
    marker(coord, G, PID, 2, commit=True)
    assert committed(coord, ("t", 0)) == 4


# -- deletion and expiry ----------------------------------------------------------------------


def test_group_with_pending_offsets_is_neither_deleted_nor_expired(make_env) -> None:
    env = make_env(offsets_retention_ms=1000)
    env.logs.create_topic("t", 1, internal=False)
    coord = env.coordinator
    coord.commit_offsets(group_id=G, member_id="", group_instance_id=None, generation_id=-1,
                         offsets={("t", 0): OffsetToCommit(1)}, now_ms=T0)
    txn_commit(coord, {("t", 0): 2})
    assert coord.delete_groups([G], T0) == {G: ErrorCode.non_empty_group}
    coord.expire_offsets(T0 + 10 * SESSION)
    assert committed(coord, ("t", 0)) == 1 and coord.has_pending(G)
    marker(coord, G, PID, EPOCH, commit=False)
    assert coord.delete_groups([G], T0) == {G: ErrorCode.none}


# -- replay -----------------------------------------------------------------------------------


def test_replay_applies_markers_and_keeps_open_transactions_pending(tenv) -> None:
    coord = tenv.coordinator
    other = next(f"g{i}" for i in range(100)
                 if coord.offsets_partition(f"g{i}") != coord.offsets_partition(G))
    coord.commit_offsets(group_id=G, member_id="", group_instance_id=None, generation_id=-1,
                         offsets={("t", 0): OffsetToCommit(1), ("t", 2): OffsetToCommit(1)},
                         now_ms=T0)
    txn_commit(coord, {("t", 0): 10}, pid=1)                 # committed below
    txn_commit(coord, {("t", 1): 20}, pid=2)                 # aborted below
    txn_commit(coord, {("t", 2): 30}, pid=3)                 # left open
    txn_commit(coord, {("t", 2): 40}, pid=1, group=other)    # left open in another partition
    marker(coord, G, 1, 0, commit=True)
    marker(coord, G, 2, 0, commit=False)
    before = (coord.fetch_offsets(G, None), coord.fetch_offsets(other, None))

    coord = tenv.restart(T0 + 1000)
    assert (coord.fetch_offsets(G, None), coord.fetch_offsets(other, None)) == before
    assert committed(coord, ("t", 0)) == 10 and committed(coord, ("t", 1)) is None
    assert committed(coord, ("t", 2)) == 1
    assert coord.pending_partitions(G) == {("t", 2)} and coord.pending_partitions(other) == {
        ("t", 2)}
    assert coord.pending_producers(coord.offsets_partition(G)) == {3}
    assert coord.pending_producers(coord.offsets_partition(other)) == {1}
    assert coord.delete_groups([other], T0) == {other: ErrorCode.non_empty_group}

    # The transaction coordinator later ends them; the producers' sequences carry on.
    assert txn_commit(coord, {("t", 1): 35}, pid=3) == {("t", 1): ErrorCode.none}
    marker(coord, G, 3, 0, commit=True, now=T0 + 2000)
    marker(coord, other, 1, 0, commit=True, now=T0 + 2000)
    assert (committed(coord, ("t", 1)), committed(coord, ("t", 2))) == (35, 30)
    assert committed(coord, ("t", 2), other) == 40
    expected = (coord.fetch_offsets(G, None), coord.fetch_offsets(other, None))

    coord = tenv.restart(T0 + 3000)
    assert (coord.fetch_offsets(G, None), coord.fetch_offsets(other, None)) == expected
    assert not coord.has_pending(G) and not coord.has_pending(other)


def test_replay_of_a_group_known_only_from_pending_offsets(tenv) -> None:
    coord = tenv.coordinator
    txn_commit(coord, {("t", 0): 7})
    coord = tenv.restart(T0 + 1000)
    assert [g.group_id for g in coord.list_groups()] == [G]
    assert coord.fetch_offsets(G, None) == {} and coord.has_pending(G)
    marker(coord, G, PID, EPOCH, commit=True)
    assert committed(coord, ("t", 0)) == 7


def test_replay_keeps_a_plain_commit_written_inside_a_transaction(tenv) -> None:
    coord = tenv.coordinator
    txn_commit(coord, {("t", 0): 5, ("t", 1): 5})
    coord.commit_offsets(group_id=G, member_id="", group_instance_id=None, generation_id=-1,
                         offsets={("t", 1): OffsetToCommit(50)}, now_ms=T0)
    marker(coord, G, PID, EPOCH, commit=True)
    assert (committed(coord, ("t", 0)), committed(coord, ("t", 1))) == (5, 50)
    coord = tenv.restart(T0 + 1000)
    assert (committed(coord, ("t", 0)), committed(coord, ("t", 1))) == (5, 50)
