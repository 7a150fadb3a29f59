"""Session and rebalance deadlines take effect at the deadline, not on the next tick: a request
at or after a deadline sees its effect even if `tick` has not run (issue 17: DeleteGroups 6 ms
after a session ended got GROUP_NOT_EMPTY). No `tick` is called in these tests."""

from __future__ import annotations

from exactly.protocol.errors import ErrorCode
from tests.helpers.groups.group_helpers import (
    REBALANCE,
    SESSION,
    T0,
    heartbeat,
    join,
    new_member,
    sync,
)

G = "timers"


def one_member(coord) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    member, out = new_member(coord, G, now=T0)
    gen = out[0].generation_id
    assert sync(coord, G, member, gen, now=T0, assignments={member: b"x"})[0].error \
        is ErrorCode.none
    return member, gen


def test_delete_groups_at_the_session_deadline_succeeds(env) -> None:
    coord = env.coordinator
    member, gen = one_member(coord)
    assert heartbeat(coord, G, member, gen, now=T0 + 1000) is ErrorCode.none
    deadline = T0 + 1000 + SESSION
    assert coord.delete_groups([G], deadline - 1) == {G: ErrorCode.non_empty_group}
    assert coord.delete_groups([G], deadline) == {G: ErrorCode.none}


def test_a_request_at_the_session_deadline_sees_the_member_gone(env) -> None:
    coord = env.coordinator
    member, gen = one_member(coord)
    assert coord.describe_group(G, T0 + SESSION - 1).members[0].member_id == member
    assert heartbeat(coord, G, member, gen, now=T0 + SESSION) is ErrorCode.unknown_member_id
    assert coord.describe_group(G).state == "Empty"


def test_describe_and_list_at_the_deadline_show_the_member_gone(env) -> None:
    coord = env.coordinator
    one_member(coord)
    assert [g.state for g in coord.list_groups(None, T0 + SESSION - 1)] == ["Stable"]
    assert [g.state for g in coord.list_groups(None, T0 + SESSION)] == ["Empty"]
    assert coord.describe_group(G, T0 + SESSION).state == "Empty"


def test_rebalance_deadline_completes_the_join_without_a_tick(env) -> None:
    coord = env.coordinator
    rebalance = SESSION - 2000  # the join deadline comes before "a"'s session ends
    a, a_out = new_member(coord, G, now=T0, rebalance=rebalance)
    gen = a_out[0].generation_id
    sync(coord, G, a, gen, now=T0, assignments={a: b"x"})
    b, b_out = new_member(coord, G, now=T0 + 1, rebalance=rebalance)  # "a" must rejoin
    assert b_out == [] and coord.describe_group(G).state == "PreparingRebalance"
    # "b" is parked in JoinGroup; "a" heartbeats but never rejoins.
    deadline = T0 + 1 + rebalance
    assert heartbeat(coord, G, a, gen, now=deadline - 1) is ErrorCode.rebalance_in_progress
    assert b_out == []
    assert heartbeat(coord, G, a, gen, now=deadline) is ErrorCode.unknown_member_id
    assert b_out[0].error is ErrorCode.none and b_out[0].generation_id == gen + 1
    assert b_out[0].leader_id == b


def test_join_after_a_pending_sync_deadline_sees_the_member_gone(env) -> None:
    coord = env.coordinator
    a, a_out = new_member(coord, G, now=T0)
    # "a" got its generation but never sends SyncGroup: at the rebalance timeout it is dropped.
    assert a_out[0].error is ErrorCode.none
    assert join(coord, G, a, now=T0 + REBALANCE)[0].error is ErrorCode.unknown_member_id
