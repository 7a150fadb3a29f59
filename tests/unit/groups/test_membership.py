"""JoinGroup / SyncGroup / Heartbeat / LeaveGroup flows with explicit time."""

from __future__ import annotations

from exactly.groups import GroupState
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

G = "g1"


def stable_group(coord, n: int, now: int = T0) -> tuple[list[str], int]:
    """n members joined (all at once, with no initial delay) and synced: (member ids, generation)."""
    pending = [new_member(coord, G, now=now, client_id=f"c{i}") for i in range(n)]
    # With delay 0 the first member completes alone; the others force later generations.
    # Rejoin everyone until one generation holds all of them.
    ids = [mid for mid, _ in pending]
    answers = {mid: out for mid, out in pending}
    while True:
        gens = {answers[m][-1].generation_id for m in ids if answers[m]}
        if coord.describe_group(G).state == "CompletingRebalance" and len(gens) == 1 and all(
                answers[m] for m in ids):
            break
        for m in ids:
            if coord.group_manager.groups[G].members[m].join_callback is None:
                answers[m] = join(coord, G, m, now=now)
    generation = answers[ids[0]][-1].generation_id
    leader = answers[ids[0]][-1].leader_id
    assignments = {m: f"assign-{m}".encode() for m in ids}
    out = sync(coord, G, leader, generation, now=now, assignments=assignments)
    assert out[0].error is ErrorCode.none
    for m in ids:
        if m != leader:
            assert sync(coord, G, m, generation, now=now)[0].error is ErrorCode.none
    assert coord.describe_group(G).state == "Stable"
    return ids, generation


def test_single_member_join_sync_heartbeat(env) -> None:
    coord = env.coordinator
    first = join(coord, G, now=T0, client_id="app")
    assert first[0].error is ErrorCode.member_id_required
    assert first[0].member_id.startswith("app-")
    member_id = first[0].member_id
    out = join(coord, G, member_id, now=T0, client_id="app")
    assert len(out) == 1
    r = out[0]
    assert r.error is ErrorCode.none
    assert (r.generation_id, r.leader_id, r.member_id) == (1, member_id, member_id)
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in r.members] == [(member_id, b"range-meta")]
    assert coord.describe_group(G).state == "CompletingRebalance"
    assert heartbeat(coord, G, member_id, 1, now=T0 + 1) is ErrorCode.none

    s = sync(coord, G, member_id, 1, now=T0 + 2, assignments={member_id: b"A"},
             protocol_type="consumer", protocol_name="range")
    assert s[0].error is ErrorCode.none and s[0].assignment == b"A"
    assert s[0].protocol_name == "range"
    d = coord.describe_group(G)
    assert d.state == "Stable" and d.protocol_data == "range"
    assert d.members[0].assignment == b"A" and d.members[0].metadata == b"range-meta"
    assert heartbeat(coord, G, member_id, 1, now=T0 + 3) is ErrorCode.none


def test_join_v0_to_v3_gets_member_id_directly(env) -> None:
    out = join(env.coordinator, G, now=T0, require_known=False)
    assert out[0].error is ErrorCode.none and out[0].member_id.startswith("client-")


def test_initial_rebalance_delay_is_extended_by_new_joins(make_env) -> None:
    coord = make_env(initial_rebalance_delay_ms=3000).coordinator
    a, a_out = new_member(coord, G, now=T0)
    assert a_out == [] and coord.describe_group(G).state == "PreparingRebalance"
    b, b_out = new_member(coord, G, now=T0 + 1000)
    coord.tick(T0 + 2999)
    assert a_out == [] and b_out == []
    coord.tick(T0 + 3000)  # b joined during the delay: wait one more delay
    assert a_out == [] and b_out == []
    coord.tick(T0 + 6000)
    assert len(a_out) == 1 and len(b_out) == 1
    assert a_out[0].generation_id == b_out[0].generation_id == 1
    assert a_out[0].leader_id == a
    assert {m.member_id for m in a_out[0].members} == {a, b}
    assert b_out[0].members == ()


def test_initial_delay_capped_by_rebalance_timeout(make_env) -> None:
    coord = make_env(initial_rebalance_delay_ms=3000).coordinator
    _, a_out = new_member(coord, G, now=T0, rebalance=7000)
    now = T0
    for i in range(10):  # a new member every delay, forever
        now = T0 + 3000 * i
        new_member(coord, G, now=now, rebalance=7000)
        coord.tick(now)
        if a_out:
            break
    # delay 3000, then remaining 4000 -> 3000 more, then 1000 more: done by 7000.
    assert a_out and a_out[0].generation_id == 1
    assert now <= T0 + 9000


def test_three_members_followers_wait_for_leader_assignment(make_env) -> None:
    coord = make_env(initial_rebalance_delay_ms=100).coordinator
    joined = [new_member(coord, G, now=T0, client_id=f"c{i}") for i in range(3)]
    coord.tick(T0 + 100)  # others joined during the delay: it is extended once
    coord.tick(T0 + 200)
    results = {mid: out[0] for mid, out in joined}
    leader = next(r.leader_id for r in results.values())
    followers = [m for m in results if m != leader]
    gen = results[leader].generation_id
    assert len(results[leader].members) == 3
    waits = {f: sync(coord, G, f, gen, now=T0 + 250) for f in followers}
    assert all(w == [] for w in waits.values())  # parked until the leader syncs
    out = sync(coord, G, leader, gen, now=T0 + 300,
               assignments={m: m.encode() for m in results})
    assert out[0].assignment == leader.encode()
    for f, w in waits.items():
        assert w[0].error is ErrorCode.none and w[0].assignment == f.encode()
    assert coord.describe_group(G).state == "Stable"


def test_member_joining_stable_group_triggers_rebalance(env) -> None:
    coord = env.coordinator
    (a,), gen = stable_group(coord, 1)
    b, b_out = new_member(coord, G, now=T0 + 10, client_id="b")
    assert b_out == [] and coord.describe_group(G).state == "PreparingRebalance"
    assert heartbeat(coord, G, a, gen, now=T0 + 20) is ErrorCode.rebalance_in_progress
    a_out = join(coord, G, a, now=T0 + 30)
    assert a_out[0].generation_id == b_out[0].generation_id == gen + 1
    assert a_out[0].leader_id == a  # the old leader keeps the role
    # Old generation is now refused.
    assert heartbeat(coord, G, a, gen, now=T0 + 40) is ErrorCode.illegal_generation
    assert sync(coord, G, b, gen, now=T0 + 40)[0].error is ErrorCode.illegal_generation


def test_leave_triggers_rebalance_and_last_leave_empties(env) -> None:
    coord = env.coordinator
    (a, b), gen = stable_group(coord, 2)
    top, errors = coord.leave_group(group_id=G, members=[(b, None)], now_ms=T0 + 10)
    assert top is ErrorCode.none and errors == [ErrorCode.none]
    assert coord.describe_group(G).state == "PreparingRebalance"
    assert heartbeat(coord, G, a, gen, now=T0 + 11) is ErrorCode.rebalance_in_progress
    a_out = join(coord, G, a, now=T0 + 12)
    assert a_out[0].generation_id == gen + 1 and len(a_out[0].members) == 1
    _, errors = coord.leave_group(group_id=G, members=[(a, None), ("nobody", None)],
                                  now_ms=T0 + 13)
    assert errors == [ErrorCode.none, ErrorCode.unknown_member_id]
    d = coord.describe_group(G)
    assert d.state == "Empty" and d.members == () and d.protocol_type == "consumer"
    top, errors = coord.leave_group(group_id="unknown", members=[("x", None)], now_ms=T0)
    assert top is ErrorCode.none and errors == [ErrorCode.unknown_member_id]


def test_session_expiry_removes_member_and_rebalances(env) -> None:
    coord = env.coordinator
    (a, b), gen = stable_group(coord, 2)
    for t in range(0, SESSION + 1, 3000):  # only a heartbeats
        assert heartbeat(coord, G, a, gen, now=T0 + t) is ErrorCode.none
        coord.tick(T0 + t)
    coord.tick(T0 + SESSION)
    assert b not in {m.member_id for m in coord.describe_group(G).members}
    assert coord.describe_group(G).state == "PreparingRebalance"
    assert heartbeat(coord, G, b, gen, now=T0 + SESSION) is ErrorCode.unknown_member_id
    a_out = join(coord, G, a, now=T0 + SESSION + 1)
    assert a_out[0].generation_id == gen + 1


def test_rebalance_timeout_removes_members_that_did_not_rejoin(env) -> None:
    coord = env.coordinator
    (a, b), gen = stable_group(coord, 2)
    c, c_out = new_member(coord, G, now=T0 + 100, client_id="c")
    a_out = join(coord, G, a, now=T0 + 200)
    # b keeps heartbeating but never rejoins: removed when the rebalance times out.
    for t in range(300, REBALANCE, 3000):
        assert heartbeat(coord, G, b, gen, now=T0 + t) is ErrorCode.rebalance_in_progress
        coord.tick(T0 + t)
    coord.tick(T0 + 100 + REBALANCE - 1)
    assert a_out == [] and c_out == []
    coord.tick(T0 + 100 + REBALANCE)
    assert a_out[0].error is ErrorCode.none and c_out[0].error is ErrorCode.none
    assert {m.member_id for m in a_out[0].members} == {a, c}
    assert heartbeat(coord, G, b, gen, now=T0 + 100 + REBALANCE) is ErrorCode.unknown_member_id


def test_member_that_never_syncs_is_removed(env) -> None:
    coord = env.coordinator
    a, a_out = new_member(coord, G, now=T0)
    gen = a_out[0].generation_id
    coord.tick(T0 + REBALANCE)
    assert coord.describe_group(G).state == "Empty"
    assert sync(coord, G, a, gen, now=T0 + REBALANCE)[0].error is ErrorCode.unknown_member_id


def test_protocol_selection_by_vote(make_env) -> None:
    coord = make_env(initial_rebalance_delay_ms=10).coordinator
    prefs = [[("range", b"r1"), ("roundrobin", b"o1")],
             [("roundrobin", b"o2"), ("range", b"r2")],
             [("sticky", b"s3"), ("roundrobin", b"o3"), ("range", b"r3")]]
    outs = [new_member(coord, G, now=T0, protocols=p, client_id=f"c{i}")[1]
            for i, p in enumerate(prefs)]
    coord.tick(T0 + 10)
    coord.tick(T0 + 20)
    assert {o[0].protocol_name for o in outs} == {"roundrobin"}
    leader_out = next(o[0] for o in outs if o[0].members)
    assert sorted(m.metadata for m in leader_out.members) == [b"o1", b"o2", b"o3"]


def test_inconsistent_protocols_are_refused(env) -> None:
    coord = env.coordinator
    stable_group(coord, 1)
    assert join(coord, G, now=T0, protocols=[("sticky", b"")])[0].error \
        is ErrorCode.inconsistent_group_protocol
    assert join(coord, G, now=T0, protocol_type="connect")[0].error \
        is ErrorCode.inconsistent_group_protocol
    assert join(coord, "other", now=T0, protocols=[])[0].error \
        is ErrorCode.inconsistent_group_protocol
    assert join(coord, "other2", now=T0, protocol_type="")[0].error \
        is ErrorCode.inconsistent_group_protocol


def test_error_codes(env) -> None:
    coord = env.coordinator
    assert join(coord, "", now=T0)[0].error is ErrorCode.invalid_group_id
    assert join(coord, G, now=T0, session=10)[0].error is ErrorCode.invalid_session_timeout
    assert join(coord, G, now=T0, session=1_800_001)[0].error is ErrorCode.invalid_session_timeout
    assert join(coord, "nope", "some-member", now=T0)[0].error is ErrorCode.unknown_member_id
    assert heartbeat(coord, "nope", "m", 1, now=T0) is ErrorCode.unknown_member_id
    assert sync(coord, "nope", "m", 1, now=T0)[0].error is ErrorCode.unknown_member_id
    (a,), gen = stable_group(coord, 1)
    assert heartbeat(coord, G, "stranger", gen, now=T0) is ErrorCode.unknown_member_id
    assert heartbeat(coord, G, a, gen + 5, now=T0) is ErrorCode.illegal_generation
    assert join(coord, G, "stranger", now=T0)[0].error is ErrorCode.unknown_member_id
    assert sync(coord, G, a, gen, now=T0, protocol_name="roundrobin")[0].error \
        is ErrorCode.inconsistent_group_protocol


def test_pending_member_expires(env) -> None:
    coord = env.coordinator
    first = join(coord, G, now=T0)
    assert first[0].error is ErrorCode.member_id_required
    coord.tick(T0 + SESSION)
    later = join(coord, G, first[0].member_id, now=T0 + SESSION + 1)
    assert later[0].error is ErrorCode.unknown_member_id


def test_follower_rejoin_with_same_metadata_gets_current_generation(env) -> None:
    coord = env.coordinator
    (a, b), gen = stable_group(coord, 2)
    follower = b if coord.describe_group(G).members[0].member_id == a else a
    out = join(coord, G, follower, now=T0 + 1)
    assert out[0].generation_id == gen and out[0].members == ()
    assert coord.describe_group(G).state == "Stable"


def test_new_member_that_vanishes_during_rebalance_is_dropped(env) -> None:
    coord = env.coordinator
    (a,), gen = stable_group(coord, 1)
    # b joins, never completes: a never rejoins either (e.g. long poll); after the rebalance
    # timeout a is removed and b (awaiting join) completes a new generation alone.
    b, b_out = new_member(coord, G, now=T0, client_id="b")
    coord.tick(T0 + REBALANCE)
    assert b_out[0].error is ErrorCode.none and b_out[0].leader_id == b
    assert heartbeat(coord, G, a, gen, now=T0 + REBALANCE) is ErrorCode.unknown_member_id


def test_static_member_rejoin_fences_old_instance(env) -> None:
    coord = env.coordinator
    out = join(coord, G, now=T0, instance="i-1")
    assert out[0].error is ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
    old, gen = out[0].member_id, out[0].generation_id
    assert sync(coord, G, old, gen, now=T0, assignments={old: b"x"}, instance="i-1")[0].error \
        is ErrorCode.none
    again = join(coord, G, now=T0 + 5, instance="i-1")
    new = again[0].member_id
    assert again[0].error is ErrorCode.none and new != old and again[0].leader_id == new
    assert heartbeat(coord, G, old, again[0].generation_id, now=T0 + 6, instance="i-1") \
        is ErrorCode.fenced_instance_id
    _, errors = coord.leave_group(group_id=G, members=[("", "i-1")], now_ms=T0 + 7)
    assert errors == [ErrorCode.none]
    assert coord.describe_group(G).state == "Empty"


def test_members_awaiting_join_are_not_expired(env) -> None:
    coord = env.coordinator
    (a, _b), _gen = stable_group(coord, 2)
    a_out = join(coord, G, a, now=T0 + 1)  # a waits for b through a long rebalance
    coord.tick(T0 + SESSION * 2)
    assert a_out == [] or a_out[0].error is ErrorCode.none
    assert coord.describe_group(G).state != "Dead"
    assert a in {m.member_id for m in coord.describe_group(G).members}
    assert coord.group_manager.groups[G].state in (GroupState.PREPARING_REBALANCE,
                                      GroupState.COMPLETING_REBALANCE)
