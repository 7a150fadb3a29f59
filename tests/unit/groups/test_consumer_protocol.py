"""KIP-848 consumer groups, sans-IO: the coordinator driven with explicit time on a real
LogManager (ConsumerGroupHeartbeat rules, reconciliation, timers, durability, offsets with member
epochs, migration to and from classic groups)."""

from __future__ import annotations

import uuid

import pytest

from exactly.client.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from exactly.groups import GroupState, OffsetToCommit
from exactly.groups.consumer_coordinator import ConsumerHeartbeat, HeartbeatResult
from exactly.log.cleaner import LogCleaner
from exactly.log.config import CleanerConfig
from exactly.protocol.errors import ErrorCode
from tests.helpers.groups.group_helpers import T0, heartbeat, join, new_member, sync

SESSION = 3000
GROUP = "g"


@pytest.fixture
def cenv(make_env):
    env = make_env(consumer_session_timeout_ms=SESSION, consumer_heartbeat_interval_ms=500)
    env.logs.create_topic("t", 6)
    return env


def tid(env, topic="t") -> uuid.UUID:
    return env.logs.topic(topic).topic_id


def hb(env, member, epoch, now, *, topics=("t",), owned=None, regex=None, instance=None,
       assignor=None, rebalance=60_000, full=None) -> HeartbeatResult:
    """One heartbeat; joining (epoch 0) sends the subscription, later ones only what changed."""
    joining = epoch == 0 if full is None else full
    result = env.coordinator.consumer.heartbeat(ConsumerHeartbeat(
        group_id=GROUP, member_id=member, member_epoch=epoch, instance_id=instance,
        rebalance_timeout_ms=rebalance if joining else -1,
        subscribed_topic_names=tuple(topics) if joining and regex is None else None,
        subscribed_topic_regex=regex if joining else None, server_assignor=assignor,
        owned=owned, client_id="client", client_host="/127.0.0.1"), now)
    if result.log is not None:
        result.log.flush()
    return result


def parts(env, result_or_assignment, topic="t") -> set[int]:
    a = getattr(result_or_assignment, "assignment", result_or_assignment)
    assert a is not None
    return set(a.get(tid(env, topic), ()))


def owned(env, partitions, topic="t"):
    return {tid(env, topic): frozenset(partitions)} if partitions else {}


def group_of(env):
    return env.coordinator.group_manager.groups[GROUP]


def test_first_member_gets_everything_then_revokes_before_the_newcomer_gets_it(cenv):
    r1 = hb(cenv, "m1", 0, T0)
    # As Kafka 4.4: a new group is at epoch 1, the first subscription takes it to 2.
    assert (r1.error, r1.member_epoch, parts(cenv, r1)) == (ErrorCode.none, 2, set(range(6)))
    assert r1.heartbeat_interval_ms == 500
    r2 = hb(cenv, "m2", 0, T0 + 10)
    # m2 is at the new epoch but its partitions are still m1's: nothing yet.
    assert (r2.member_epoch, parts(cenv, r2)) == (3, set())
    r1 = hb(cenv, "m1", 2, T0 + 20, owned=owned(cenv, range(6)))
    kept = parts(cenv, r1)
    assert r1.member_epoch == 2 and len(kept) == 3  # revoke first, at the old epoch
    assert group_of(cenv).state is GroupState.RECONCILING
    r2 = hb(cenv, "m2", 3, T0 + 30)
    assert r2.assignment is None  # still unreleased
    r1 = hb(cenv, "m1", 2, T0 + 40, owned=owned(cenv, kept))
    # Revoked: m1 moves to epoch 3 with what it kept (unchanged, so not sent again).
    assert (r1.member_epoch, r1.assignment) == (3, None)
    r2 = hb(cenv, "m2", 3, T0 + 50)
    assert parts(cenv, r2) == set(range(6)) - kept
    assert group_of(cenv).state is GroupState.STABLE


def test_epochs_are_checked(cenv):
    hb(cenv, "m1", 0, T0)
    assert hb(cenv, "m1", 6, T0 + 1).error is ErrorCode.fenced_member_epoch
    assert hb(cenv, "nobody", 1, T0 + 1).error is ErrorCode.unknown_member_id
    hb(cenv, "m2", 0, T0 + 2)  # group epoch 3: m1 must revoke
    kept = parts(cenv, hb(cenv, "m1", 2, T0 + 3, owned=owned(cenv, range(6))))
    r1 = hb(cenv, "m1", 2, T0 + 4, owned=owned(cenv, kept))
    assert r1.member_epoch == 3
    # The answer with epoch 3 was lost: epoch 2 again, owning nothing beyond the assignment.
    again = hb(cenv, "m1", 2, T0 + 5, owned=owned(cenv, kept))
    assert (again.error, again.member_epoch) == (ErrorCode.none, 3)
    assert hb(cenv, "m1", 2, T0 + 6, owned=owned(cenv, range(6))).error is \
        ErrorCode.fenced_member_epoch


def test_invalid_requests_say_what_is_wrong(cenv):
    bad = hb(cenv, "m1", 0, T0, rebalance=-1)
    assert bad.error is ErrorCode.invalid_request and "RebalanceTimeoutMs" in bad.error_message
    assert hb(cenv, "m1", 0, T0, assignor="sticky").error is ErrorCode.unsupported_assignor
    assert hb(cenv, "m1", 0, T0, regex="t[").error is ErrorCode.invalid_regular_expression


def test_leaving_and_session_timeout_give_partitions_to_the_others(cenv):
    hb(cenv, "m1", 0, T0)
    hb(cenv, "m2", 0, T0)
    hb(cenv, "m3", 0, T0)
    # m3 leaves; m2 goes silent and times out; m1 ends up with everything.
    left = hb(cenv, "m3", -1, T0 + 100)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
    now, epoch, mine = T0 + 200, 2, set(range(6))
    while now < T0 + SESSION + 2000:
        r = hb(cenv, "m1", epoch, now, owned=owned(cenv, mine))
        epoch, mine = r.member_epoch, parts(cenv, r) if r.assignment is not None else mine
        cenv.coordinator.tick(now)
        now += 500
    assert set(group_of(cenv).consumer.members) == {"m1"}
    assert mine == set(range(6))


def test_a_member_that_does_not_revoke_in_time_is_fenced(cenv):
    hb(cenv, "m1", 0, T0, rebalance=1000)
    hb(cenv, "m2", 0, T0 + 1)
    r1 = hb(cenv, "m1", 2, T0 + 2, owned=owned(cenv, range(6)))
    assert len(parts(cenv, r1)) == 3
    hb(cenv, "m2", 3, T0 + 500)
    cenv.coordinator.tick(T0 + 900)
    assert "m1" in group_of(cenv).consumer.members
    hb(cenv, "m1", 2, T0 + 1001, owned=owned(cenv, range(6)))  # still owns what it must revoke
    cenv.coordinator.tick(T0 + 1100)
    assert "m1" not in group_of(cenv).consumer.members
    assert hb(cenv, "m1", 2, T0 + 1200).error is ErrorCode.unknown_member_id
    r2 = hb(cenv, "m2", 3, T0 + 1300)
    assert (r2.member_epoch, parts(cenv, r2)) == (4, set(range(6)))


def test_static_member_leaves_and_returns_under_a_new_id_without_a_rebalance(cenv):
    hb(cenv, "a1", 0, T0, instance="inst-a")
    hb(cenv, "b", 0, T0 + 1)
    mine = parts(cenv, hb(cenv, "a1", 2, T0 + 2, owned=owned(cenv, range(6)), instance="inst-a"))
    epoch = hb(cenv, "a1", 2, T0 + 3, owned=owned(cenv, mine), instance="inst-a").member_epoch
    assert hb(cenv, "a2", 0, T0 + 4, instance="inst-a").error is ErrorCode.unreleased_instance_id
    assert hb(cenv, "a1", -2, T0 + 5, instance="inst-a").member_epoch == -2
    back = hb(cenv, "a2", 0, T0 + 6, instance="inst-a")
    assert (back.error, parts(cenv, back)) == (ErrorCode.none, mine)
    assert group_of(cenv).consumer.group_epoch == epoch  # no rebalance
    assert set(group_of(cenv).consumer.members) == {"a2", "b"}


def test_new_partitions_and_new_matching_topics_bump_the_group_epoch(cenv):
    # As Kafka 4.4: a new regex is resolved after the heartbeat that brings it, so the first
    # answer assigns nothing (epoch 1) and the next one the matching topics (epoch 2).
    r = hb(cenv, "m1", 0, T0, regex="t.*")
    assert (r.member_epoch, parts(cenv, r)) == (1, set())
    r = hb(cenv, "m1", 1, T0 + 1)
    assert (r.member_epoch, parts(cenv, r)) == (2, set(range(6)))
    cenv.logs.create_partitions("t", 8)
    r = hb(cenv, "m1", 2, T0 + 1)
    assert (r.member_epoch, parts(cenv, r)) == (3, set(range(8)))
    cenv.logs.create_topic("t2", 2)
    cenv.logs.create_topic("other", 2)
    r = hb(cenv, "m1", 3, T0 + 2)
    assert r.member_epoch == 4
    assert parts(cenv, r, "t2") == {0, 1} and parts(cenv, r, "other") == set()


def test_range_assignor_chosen_by_the_members(cenv):
    hb(cenv, "m1", 0, T0, assignor="range")
    hb(cenv, "m2", 0, T0, assignor="range")
    target = group_of(cenv).consumer.target
    assert target["m1"] == owned(cenv, {0, 1, 2}) and target["m2"] == owned(cenv, {3, 4, 5})


def test_the_group_survives_a_restart_and_members_carry_on(cenv):
    hb(cenv, "m1", 0, T0)
    hb(cenv, "m2", 0, T0)
    kept = parts(cenv, hb(cenv, "m1", 2, T0 + 1, owned=owned(cenv, range(6))))
    r1 = hb(cenv, "m1", 2, T0 + 2, owned=owned(cenv, kept))
    r2 = hb(cenv, "m2", 3, T0 + 3)
    hb(cenv, "m3", 0, T0 + 4)
    hb(cenv, "m3", -1, T0 + 5)  # leaves: tombstones
    before = group_of(cenv).consumer
    epochs = (before.group_epoch, before.assignment_epoch)
    cenv.restart(T0 + 10)
    after = group_of(cenv).consumer
    assert (after.group_epoch, after.assignment_epoch) == epochs
    assert set(after.members) == {"m1", "m2"}
    assert after.members["m2"].assigned == owned(cenv, parts(cenv, r2))
    assert after.target == before.target
    r1 = hb(cenv, "m1", r1.member_epoch, T0 + 20)  # its epoch from before the restart
    assert r1.error is ErrorCode.none
    assert after.assignment_epoch == epochs[0]  # m3's leaving is assigned now
    cenv.coordinator.tick(T0 + 10 + SESSION)  # a fresh session each, from the restart
    assert set(group_of(cenv).consumer.members) == {"m1"}


def test_offset_commits_carry_the_member_epoch(cenv):
    r = hb(cenv, "m1", 0, T0)
    coord = cenv.coordinator
    offsets = {("t", 0): OffsetToCommit(5)}

    def commit(member, epoch, version=9):
        return coord.commit_offsets(group_id=GROUP, member_id=member, group_instance_id=None,
                                    generation_id=epoch, offsets=offsets, now_ms=T0,
                                    api_version=version).errors[("t", 0)]

    def txn_commit(member, epoch):
        return coord.commit_txn_offsets(GROUP, 1000, 0, offsets, member_id=member,
                                        generation_id=epoch, now_ms=T0).errors[("t", 0)]

    assert commit("m1", r.member_epoch) is ErrorCode.none
    assert commit("m1", 7) is ErrorCode.stale_member_epoch  # m1 is at epoch 2
    assert commit("ghost", 1) is ErrorCode.unknown_member_id
    assert commit("m1", 1, version=8) is ErrorCode.unsupported_version
    assert commit("", -1) is ErrorCode.unknown_member_id  # the group has members
    # TxnOffsetCommit answers a stale epoch with ILLEGAL_GENERATION, as Kafka does.
    assert txn_commit("m1", 7) is ErrorCode.illegal_generation
    assert txn_commit("ghost", 1) is ErrorCode.unknown_member_id
    assert txn_commit("m1", 2) is ErrorCode.none
    assert coord.validate_offset_fetch(GROUP, "m1", 2) is ErrorCode.none
    assert coord.validate_offset_fetch(GROUP, "m1", 3) is ErrorCode.stale_member_epoch
    assert coord.validate_offset_fetch(GROUP, "x", 1) is ErrorCode.unknown_member_id
    assert coord.validate_offset_fetch(GROUP, None, -1) is ErrorCode.none
    assert coord.fetch_offsets(GROUP, [("t", 0)])[("t", 0)].offset == 5


def test_empty_classic_group_becomes_consumer_and_back_with_its_offsets(cenv):
    coord = cenv.coordinator
    first = join(coord, GROUP, now=T0, require_known=False)[0]
    coord.sync_group(group_id=GROUP, generation_id=first.generation_id,
                     member_id=first.member_id, group_instance_id=None, protocol_type=None,
                     protocol_name=None, assignments={first.member_id: b""}, now_ms=T0,
                     respond=lambda _: None)
    assert coord.commit_offsets(group_id=GROUP, member_id=first.member_id,
                                group_instance_id=None, generation_id=first.generation_id,
                                offsets={("t", 1): OffsetToCommit(42)},
                                now_ms=T0).errors[("t", 1)] is ErrorCode.none
    # A consumer-protocol member cannot join while the classic member is there.
    assert hb(cenv, "m1", 0, T0 + 1).error is ErrorCode.group_id_not_found
    coord.leave_group(group_id=GROUP, members=[(first.member_id, None)], now_ms=T0 + 2)
    r = hb(cenv, "m1", 0, T0 + 3)
    assert r.error is ErrorCode.none and group_of(cenv).group_type == "consumer"
    assert coord.fetch_offsets(GROUP, [("t", 1)])[("t", 1)].offset == 42
    # A classic member cannot join the live consumer group; once it is empty, it may.
    assert join(coord, GROUP, now=T0 + 4)[0].error is ErrorCode.inconsistent_group_protocol
    hb(cenv, "m1", -1, T0 + 5)
    cenv.restart(T0 + 6)  # the conversion is durable
    assert group_of(cenv).group_type == "consumer"
    coord = cenv.coordinator
    answer = join(coord, GROUP, now=T0 + 7, require_known=False)[0]
    assert answer.error is ErrorCode.none and group_of(cenv).group_type == "classic"
    cenv.restart(T0 + 8)
    assert group_of(cenv).group_type == "classic"
    assert cenv.coordinator.fetch_offsets(GROUP, [("t", 1)])[("t", 1)].offset == 42


def test_list_describe_and_delete_a_consumer_group(cenv):
    coord = cenv.coordinator
    hb(cenv, "m1", 0, T0)
    listed = {g.group_id: g for g in coord.list_groups()}
    assert (listed[GROUP].group_type, listed[GROUP].protocol_type) == ("consumer", "consumer")
    assert coord.describe_group(GROUP).state == "Dead"  # DescribeGroups: not a classic group
    assert coord.delete_groups([GROUP], T0 + 1)[GROUP] is ErrorCode.non_empty_group
    hb(cenv, "m1", -1, T0 + 2)
    assert coord.list_groups({"Empty"})[0].group_id == GROUP
    assert coord.delete_groups([GROUP], T0 + 3)[GROUP] is ErrorCode.none
    cenv.restart(T0 + 4)
    assert GROUP not in cenv.coordinator.group_manager.groups


def test_compaction_keeps_the_consumer_group_and_drops_what_was_replaced(make_env):
    env = make_env(consumer_session_timeout_ms=SESSION, consumer_heartbeat_interval_ms=500,
                   offsets_topic_num_partitions=1, offsets_topic_segment_bytes=2048)
    env.logs.create_topic("t", 6)
    now = T0
    hb(env, "stays", 0, now)
    for i in range(40):  # members come and go: many records, most of them replaced later
        now += 10
        hb(env, f"visitor-{i}", 0, now)
        hb(env, f"visitor-{i}", -1, now + 1)
    before = group_of(env).consumer
    plog = env.coordinator.log_for(GROUP)
    size = sum(s.size for s in plog.segments)
    cleaner = LogCleaner(env.path, env.logs.logs, CleanerConfig(), clock=lambda: now / 1000)
    assert cleaner.clean_once(now) is not None
    after_size = sum(s.size for s in plog.segments)
    assert after_size < size / 2
    env.restart(now + 100)
    after = group_of(env).consumer
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch,
                                                           before.assignment_epoch)
    assert set(after.members) == {"stays"}
    assert after.members["stays"].assigned == before.members["stays"].assigned
    assert after.target == before.target


# -- online migration: classic members inside a consumer group -------------------------------


def _classic_member(env, now):
    """A classic member of GROUP with a real ConsumerProtocolSubscription (eager: owns nothing)."""
    metadata = encode_subscription(Subscription(["t"]))
    member_id, answers = new_member(env.coordinator, GROUP, now=now,
                                    protocols=[("range", metadata)])
    return member_id, answers


def _classic_assignment(env, member_id, generation, now) -> set[int]:
    (answer,) = sync(env.coordinator, GROUP, member_id, generation, now=now)
    assert answer.error is ErrorCode.none, answer
    return set(decode_assignment(answer.assignment).partitions.get("t", []))


def test_online_upgrade_then_downgrade_with_live_classic_members(cenv):
    coord = cenv.coordinator
    a, _ = _classic_member(cenv, T0)
    b, b_join = _classic_member(cenv, T0)  # parked until a rejoins
    a_join = join(coord, GROUP, a, now=T0, protocols=[
        ("range", encode_subscription(Subscription(["t"])))])
    # The classic rebalance: a is the leader (first joined), 3 partitions each.
    gen = b_join[0].generation_id
    assert a_join[0].leader_id == a and gen == a_join[0].generation_id
    halves = {a: encode_assignment(Assignment({"t": [0, 1, 2]})),
              b: encode_assignment(Assignment({"t": [3, 4, 5]}))}
    sync(coord, GROUP, b, gen, now=T0)
    sync(coord, GROUP, a, gen, now=T0, assignments=halves)
    assert group_of(cenv).state is GroupState.STABLE
    # A consumer-protocol member joins: the group becomes a consumer group with a and b in it.
    c = hb(cenv, "c", 0, T0 + 10)
    assert c.error is ErrorCode.none and group_of(cenv).group_type == "consumer"
    assert parts(cenv, c) == set()  # everything is still a's or b's
    owned_now: dict[str, set[int]] = {}
    for member in (a, b):
        assert heartbeat(coord, GROUP, member, gen, now=T0 + 20) is ErrorCode.rebalance_in_progress
        (rejoined,) = join(coord, GROUP, member, now=T0 + 30, protocols=[
            ("range", encode_subscription(Subscription(["t"])))])
        assert rejoined.error is ErrorCode.none and rejoined.leader_id == ""
        owned_now[member] = _classic_assignment(cenv, member, rejoined.generation_id, T0 + 40)
        assert heartbeat(coord, GROUP, member, rejoined.generation_id,
                         now=T0 + 50) is ErrorCode.none
    c = hb(cenv, "c", c.member_epoch, T0 + 60)
    owned_now["c"] = parts(cenv, c)
    flat = sorted(p for ps in owned_now.values() for p in ps)
    assert flat == list(range(6)) and all(len(ps) == 2 for ps in owned_now.values())
    epoch = group_of(cenv).consumer.group_epoch
    cenv.restart(T0 + 70)  # the classic members' metadata is durable too
    coord = cenv.coordinator
    assert {m for m, v in group_of(cenv).consumer.members.items() if v.classic} == {a, b}
    # The consumer-protocol member leaves: back to a classic group, which rebalances.
    assert hb(cenv, "c", c.member_epoch, T0 + 80).error is ErrorCode.none  # session refreshed
    coord.consumer_heartbeat(ConsumerHeartbeat(group_id=GROUP, member_id="c", member_epoch=-1),
                             T0 + 90)
    group = group_of(cenv)
    assert group.group_type == "classic" and group.state is GroupState.PREPARING_REBALANCE
    assert group.generation_id == epoch + 1
    assert heartbeat(coord, GROUP, a, epoch + 1, now=T0 + 100) is ErrorCode.rebalance_in_progress
    a_again = join(coord, GROUP, a, now=T0 + 110, protocols=[
        ("range", encode_subscription(Subscription(["t"])))])
    b_again = join(coord, GROUP, b, now=T0 + 110, protocols=[
        ("range", encode_subscription(Subscription(["t"])))])
    assert a_again[0].error is ErrorCode.none and b_again[0].error is ErrorCode.none
    assert a_again[0].generation_id == epoch + 2
