"""KIP-345 static membership with explicit time: a restarted static member replaces its old
member id without a rebalance (KIP-814's skip_assignment for the leader), the old id is
fenced everywhere, a change of protocol rebalances, batch leave by instance id, and the
replacement survives a restart."""

from __future__ import annotations

from exactly.groups import GroupCoordinator, JoinResult, OffsetToCommit
from exactly.protocol.errors import ErrorCode
from tests.helpers.groups.group_helpers import RANGE, SESSION, T0, heartbeat, join, sync

G = "static-app"
BOTH = [("range", b"r"), ("roundrobin", b"rr")]


def join_static(coord: GroupCoordinator, instance: str, *, now: int,
                protocols: list[tuple[str, bytes]] | None = None,
                skip: bool = True) -> list[JoinResult]:
    out: list[JoinResult] = []
    coord.join_group(group_id=G, member_id="", group_instance_id=instance, client_id=instance,
                     client_host="/127.0.0.1", session_timeout_ms=SESSION,
                     rebalance_timeout_ms=SESSION, protocol_type="consumer",
                     protocols=RANGE if protocols is None else protocols,
                     require_known_member_id=True, now_ms=now, respond=out.append,
                     supports_skip_assignment=skip)
    return out


def stable_static(coord: GroupCoordinator, instances: list[str],
                  protocols: list[tuple[str, bytes]] | None = None) -> tuple[dict[str, str], int]:
    """Static members joined and synced into one generation: ({instance: member id}, gen)."""
    answers = {i: join_static(coord, i, now=T0, protocols=protocols) for i in instances}
    ids = {i: coord.group_manager.groups[G].static_members[i] for i in instances}
    while coord.describe_group(G).state != "CompletingRebalance" or not all(
            answers[i] and answers[i][-1].error is ErrorCode.none for i in instances):
        for i in instances:  # the first completes alone: rejoin the others' generation
            if coord.group_manager.groups[G].members[ids[i]].join_callback is None:
                answers[i] = []
                coord.join_group(
                    group_id=G, member_id=ids[i], group_instance_id=i, client_id=i,
                    client_host="/127.0.0.1", session_timeout_ms=SESSION,
                    rebalance_timeout_ms=SESSION, protocol_type="consumer",
                    protocols=RANGE if protocols is None else protocols,
                    require_known_member_id=True, now_ms=T0, respond=answers[i].append)
    gen = answers[instances[0]][-1].generation_id
    leader = answers[instances[0]][-1].leader_id
    assignments = {m: f"assign-{i}".encode() for i, m in ids.items()}
    assert sync(coord, G, leader, gen, now=T0, assignments=assignments,
                instance=next(i for i, m in ids.items() if m == leader))[0].error is ErrorCode.none
    for i, m in ids.items():
        if m != leader:
            assert sync(coord, G, m, gen, now=T0, instance=i)[0].error is ErrorCode.none
    assert coord.describe_group(G).state == "Stable"
    return ids, gen


def test_restarted_follower_replaces_its_id_without_rebalance(env) -> None:
    coord = env.coordinator
    ids, gen = stable_static(coord, ["a", "b"])
    follower = "b" if coord.group_manager.groups[G].leader_id == ids["a"] else "a"
    other = "a" if follower == "b" else "b"
    out = join_static(coord, follower, now=T0 + 100)
    assert len(out) == 1, "answered at once"
    result = out[0]
    new = result.member_id
    assert result.error is ErrorCode.none and new != ids[follower]
    assert result.generation_id == gen and not result.skip_assignment and result.members == ()
    assert coord.describe_group(G).state == "Stable"
    # The other member sees no rebalance; the new id gets the old assignment back.
    assert heartbeat(coord, G, ids[other], gen, now=T0 + 101, instance=other) is ErrorCode.none
    synced = sync(coord, G, new, gen, now=T0 + 102, instance=follower)
    assert synced[0].error is ErrorCode.none
    assert synced[0].assignment == f"assign-{follower}".encode()
    assert heartbeat(coord, G, new, gen, now=T0 + 103, instance=follower) is ErrorCode.none


def test_old_member_id_is_fenced_everywhere(env) -> None:
    coord = env.coordinator
    env.logs.create_topic("t", 1, internal=False)
    ids, gen = stable_static(coord, ["a"])
    old = ids["a"]
    new = join_static(coord, "a", now=T0 + 100)[0].member_id
    assert heartbeat(coord, G, old, gen, now=T0 + 101, instance="a") is ErrorCode.fenced_instance_id
    assert sync(coord, G, old, gen, now=T0 + 101, instance="a")[0].error \
        is ErrorCode.fenced_instance_id
    committed = coord.commit_offsets(group_id=G, member_id=old, group_instance_id="a",
                                     generation_id=gen, offsets={("t", 0): OffsetToCommit(5)},
                                     now_ms=T0 + 101)
    assert committed.errors == {("t", 0): ErrorCode.fenced_instance_id}
    _, errors = coord.leave_group(group_id=G, members=[(old, "a")], now_ms=T0 + 101)
    assert errors == [ErrorCode.fenced_instance_id]
    assert list(coord.group_manager.groups[G].members) == [new]
    committed = coord.commit_offsets(group_id=G, member_id=new, group_instance_id="a",
                                     generation_id=gen, offsets={("t", 0): OffsetToCommit(5)},
                                     now_ms=T0 + 102)
    assert committed.errors == {("t", 0): ErrorCode.none}


def test_restarted_leader_gets_skip_assignment(env) -> None:
    coord = env.coordinator
    ids, gen = stable_static(coord, ["a", "b"])
    leader = next(i for i, m in ids.items() if m == coord.group_manager.groups[G].leader_id)
    result = join_static(coord, leader, now=T0 + 100)[0]
    assert result.error is ErrorCode.none and result.skip_assignment
    assert result.leader_id == result.member_id and result.generation_id == gen
    assert {m.group_instance_id for m in result.members} == {"a", "b"}
    assert coord.describe_group(G).state == "Stable"


def test_restarted_leader_before_join_group_v9_is_not_told_it_leads(env) -> None:
    coord = env.coordinator
    ids, _ = stable_static(coord, ["a", "b"])
    old_leader = coord.group_manager.groups[G].leader_id
    leader = next(i for i, m in ids.items() if m == old_leader)
    result = join_static(coord, leader, now=T0 + 100, skip=False)[0]
    assert result.error is ErrorCode.none and not result.skip_assignment
    assert result.leader_id == old_leader != result.member_id and result.members == ()
    assert coord.describe_group(G).state == "Stable"


def test_new_metadata_under_the_same_protocol_keeps_the_assignment(env) -> None:
    # A restarted consumer's subscription differs anyway (no owned partitions): as in Kafka,
    # only a change of the selected protocol rebalances.
    coord = env.coordinator
    _, gen = stable_static(coord, ["a"])
    result = join_static(coord, "a", now=T0 + 100, protocols=[("range", b"other")])[0]
    assert result.error is ErrorCode.none and result.generation_id == gen
    assert coord.describe_group(G).state == "Stable"


def test_protocol_change_rebalances(env) -> None:
    coord = env.coordinator
    ids, gen = stable_static(coord, ["a"], protocols=BOTH)
    out = join_static(coord, "a", now=T0 + 100, protocols=list(reversed(BOTH)))
    # A group of one completes its rebalance at once: a new generation, a new protocol.
    assert out[0].error is ErrorCode.none and out[0].generation_id == gen + 1
    assert out[0].protocol_name == "roundrobin" and out[0].member_id != ids["a"]
    assert coord.describe_group(G).state == "CompletingRebalance"


def test_a_new_protocol_that_is_not_selected_keeps_the_assignment(env) -> None:
    coord = env.coordinator
    _, gen = stable_static(coord, ["a", "b"])
    out = join_static(coord, "a", now=T0 + 100, protocols=[("range", b"r"), ("x", b"")])
    # "b" knows only "range": the selected protocol stays, so no rebalance.
    assert out and out[0].generation_id == gen
    assert coord.describe_group(G).state == "Stable"


def test_rejoin_during_completing_rebalance_rebalances(env) -> None:
    coord = env.coordinator
    ids, gen = stable_static(coord, ["a", "b"])
    # "a" rejoins with its id: a rebalance; both rejoin and the group waits for SyncGroup.
    a_out = join(coord, G, ids["a"], now=T0 + 10, instance="a", session=SESSION, rebalance=SESSION)
    b_out = join(coord, G, ids["b"], now=T0 + 10, instance="b", session=SESSION, rebalance=SESSION)
    assert a_out[0].generation_id == gen + 1 and b_out[0].generation_id == gen + 1
    assert coord.describe_group(G).state == "CompletingRebalance"
    out = join_static(coord, "b", now=T0 + 20)
    assert out == [] and coord.describe_group(G).state == "PreparingRebalance"


def test_replacement_is_written_before_the_answer_and_survives_restart(env) -> None:
    coord = env.coordinator
    ids, gen = stable_static(coord, ["a", "b"])
    new = join_static(coord, "a", now=T0 + 100)[0].member_id
    coord = env.restart(T0 + 200)
    group = coord.group_manager.groups[G]
    assert group.static_members["a"] == new and ids["a"] not in group.members
    assert heartbeat(coord, G, new, gen, now=T0 + 201, instance="a") is ErrorCode.none
    assert heartbeat(coord, G, ids["a"], gen, now=T0 + 201, instance="a") \
        is ErrorCode.fenced_instance_id
    # And it can restart again after the broker did, still without a rebalance.
    again = join_static(coord, "b", now=T0 + 300)[0]
    assert again.error is ErrorCode.none and again.generation_id == gen
    assert coord.describe_group(G).state == "Stable"


def test_absent_static_member_expires_after_its_session(env) -> None:
    coord = env.coordinator
    ids, gen = stable_static(coord, ["a", "b"])
    # "a" keeps heartbeating; "b" was killed (a static member sends no LeaveGroup).
    assert heartbeat(coord, G, ids["a"], gen, now=T0 + SESSION - 1, instance="a") is ErrorCode.none
    assert heartbeat(coord, G, ids["a"], gen, now=T0 + SESSION, instance="a") \
        is ErrorCode.rebalance_in_progress
    assert ids["b"] not in coord.group_manager.groups[G].members


def test_batch_leave_by_instance_id(env) -> None:
    coord = env.coordinator
    stable_static(coord, ["a", "b", "c"])
    top, errors = coord.leave_group(group_id=G, members=[("", "a"), ("", "b"), ("", "zz")],
                                    now_ms=T0 + 10)
    assert top is ErrorCode.none
    assert errors == [ErrorCode.none, ErrorCode.none, ErrorCode.unknown_member_id]
    assert set(coord.group_manager.groups[G].static_members) == {"c"}
    _, errors = coord.leave_group(group_id=G, members=[("", "c")], now_ms=T0 + 11)
    assert errors == [ErrorCode.none] and coord.describe_group(G).state == "Empty"
