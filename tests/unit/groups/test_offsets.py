"""OffsetCommit / OffsetFetch, admin APIs, retention, and persistence across restarts."""

from __future__ import annotations

from exactly.groups import OFFSETS_TOPIC, GroupCoordinator, OffsetToCommit
from exactly.protocol.errors import ErrorCode
from exactly.protocol.partitioning import partition_for
from tests.helpers.groups.group_helpers import SESSION, T0, heartbeat, new_member, sync

G = "orders-app"


def commit(coord: GroupCoordinator, group: str, offsets: dict, *, now: int = T0,  # type: ignore[type-arg]
           member: str = "", generation: int = -1, instance: str | None = None):
    return coord.commit_offsets(
        group_id=group, member_id=member, group_instance_id=instance, generation_id=generation,
        offsets={tp: OffsetToCommit(*v) if isinstance(v, tuple) else OffsetToCommit(v)
                 for tp, v in offsets.items()},
        now_ms=now)


def test_offsets_topic_created_internal(env) -> None:
    info = env.logs.topic(OFFSETS_TOPIC)
    assert info is not None and info.internal and info.num_partitions == 5


def test_standalone_commit_and_fetch(env) -> None:
    env.logs.create_topic("t", 3, internal=False)
    coord = env.coordinator
    result = commit(coord, G, {("t", 0): 10, ("t", 1): (20, 4, "meta")})
    assert result.errors == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    assert result.log is env.logs.get_log(OFFSETS_TOPIC, partition_for(G, 5))
    fetched = coord.fetch_offsets(G, [("t", 0), ("t", 1), ("t", 2)])
    assert fetched[("t", 0)].offset == 10  # type: ignore[union-attr]
    assert (fetched[("t", 1)].offset, fetched[("t", 1)].leader_epoch,  # type: ignore[union-attr]
            fetched[("t", 1)].metadata) == (20, 4, "meta")  # type: ignore[union-attr]
    assert fetched[("t", 2)] is None
    assert set(coord.fetch_offsets(G, None)) == {("t", 0), ("t", 1)}
    assert coord.fetch_offsets("unknown", [("t", 0)]) == {("t", 0): None}
    assert coord.fetch_offsets("unknown", None) == {}
    assert coord.describe_group(G).state == "Empty"
    # A later commit overwrites.
    commit(coord, G, {("t", 0): 11})
    assert coord.fetch_offsets(G, [("t", 0)])[("t", 0)].offset == 11  # type: ignore[union-attr]


def test_commit_unknown_topic_or_partition(env) -> None:
    env.logs.create_topic("t", 1, internal=False)
    result = commit(env.coordinator, G, {("t", 0): 1, ("t", 1): 1, ("missing", 0): 1})
    assert result.errors == {("t", 0): ErrorCode.none,
                             ("t", 1): ErrorCode.unknown_topic_or_partition,
                             ("missing", 0): ErrorCode.unknown_topic_or_partition}
    only_bad = commit(env.coordinator, G, {("missing", 0): 1})
    assert only_bad.log is None


def test_commit_metadata_too_large(env) -> None:
    env.logs.create_topic("t", 1, internal=False)
    result = commit(env.coordinator, G, {("t", 0): (1, -1, "x" * 5000)})
    assert result.errors[("t", 0)] is ErrorCode.offset_metadata_too_large


def test_commit_rules_for_managed_groups(env) -> None:
    env.logs.create_topic("t", 1, internal=False)
    coord = env.coordinator
    tp = ("t", 0)
    # A generation on a group that does not exist: an old member, refused.
    assert commit(coord, G, {tp: 1}, member="m", generation=3).errors[tp] \
        is ErrorCode.illegal_generation
    a, out = new_member(coord, G, now=T0)
    gen = out[0].generation_id
    # CompletingRebalance: not yet.
    assert commit(coord, G, {tp: 1}, member=a, generation=gen).errors[tp] \
        is ErrorCode.rebalance_in_progress
    sync(coord, G, a, gen, now=T0, assignments={a: b"x"})
    assert commit(coord, G, {tp: 5}, member=a, generation=gen).errors[tp] is ErrorCode.none
    assert commit(coord, G, {tp: 6}, member=a, generation=gen - 1).errors[tp] \
        is ErrorCode.illegal_generation
    assert commit(coord, G, {tp: 6}, member="other", generation=gen).errors[tp] \
        is ErrorCode.unknown_member_id
    # Standalone commits are only for an Empty group.
    assert commit(coord, G, {tp: 6}).errors[tp] is ErrorCode.unknown_member_id
    # A commit counts as a heartbeat.
    commit(coord, G, {tp: 7}, member=a, generation=gen, now=T0 + SESSION - 1)
    coord.tick(T0 + SESSION + 1)
    assert heartbeat(coord, G, a, gen, now=T0 + SESSION + 2) is ErrorCode.none
    coord.leave_group(group_id=G, members=[(a, None)], now_ms=T0 + SESSION + 3)
    assert commit(coord, G, {tp: 8}, member=a, generation=gen).errors[tp] \
        is ErrorCode.unknown_member_id
    assert commit(coord, G, {tp: 9}).errors[tp] is ErrorCode.none
    assert coord.fetch_offsets(G, [tp])[tp].offset == 9  # type: ignore[union-attr]


def test_list_and_describe_and_delete(env) -> None:
    env.logs.create_topic("t", 1, internal=False)
    coord = env.coordinator
    commit(coord, "simple", {("t", 0): 1})
    a, out = new_member(coord, "live", now=T0)
    sync(coord, "live", a, out[0].generation_id, now=T0, assignments={a: b"x"})
    listed = {g.group_id: (g.protocol_type, g.state) for g in coord.list_groups()}
    assert listed == {"simple": ("", "Empty"), "live": ("consumer", "Stable")}
    assert [g.group_id for g in coord.list_groups({"stable"})] == ["live"]
    assert [g.group_id for g in coord.list_groups({"Empty"})] == ["simple"]
    assert coord.describe_group("nothing").state == "Dead"
    assert coord.delete_groups(["simple", "live", "nothing"], T0) == {
        "simple": ErrorCode.none, "live": ErrorCode.non_empty_group,
        "nothing": ErrorCode.group_id_not_found}
    assert coord.fetch_offsets("simple", None) == {}
    assert [g.group_id for g in coord.list_groups()] == ["live"]


def test_offsets_survive_restart(env) -> None:
    env.logs.create_topic("t", 4, internal=False)
    coord = env.coordinator
    commit(coord, G, {("t", p): (100 + p, 2, f"m{p}") for p in range(4)})
    commit(coord, G, {("t", 0): 500})
    commit(coord, "gone", {("t", 0): 1})
    assert coord.delete_groups(["gone"], T0 + 1) == {"gone": ErrorCode.none}
    coord = env.restart(T0 + 10)
    fetched = coord.fetch_offsets(G, None)
    assert {tp: c.offset for tp, c in fetched.items()} == {  # type: ignore[union-attr]
        ("t", 0): 500, ("t", 1): 101, ("t", 2): 102, ("t", 3): 103}
    assert fetched[("t", 2)].metadata == "m2" and fetched[("t", 2)].leader_epoch == 2  # type: ignore[union-attr]
    assert coord.fetch_offsets("gone", None) == {}
    assert {g.group_id for g in coord.list_groups()} == {G}


def test_group_metadata_survives_restart(env) -> None:
    env.logs.create_topic("t", 1, internal=False)
    coord = env.coordinator
    a, out = new_member(coord, G, now=T0)
    gen = out[0].generation_id
    sync(coord, G, a, gen, now=T0, assignments={a: b"assigned"})
    commit(coord, G, {("t", 0): 42}, member=a, generation=gen)
    coord = env.restart(T0 + 100)
    d = coord.describe_group(G)
    assert d.state == "Stable" and d.protocol_type == "consumer" and d.protocol_data == "range"
    assert [(m.member_id, m.assignment) for m in d.members] == [(a, b"assigned")]
    # The member carries on where it was: same generation, same assignment.
    assert heartbeat(coord, G, a, gen, now=T0 + 200) is ErrorCode.none
    assert sync(coord, G, a, gen, now=T0 + 200)[0].assignment == b"assigned"
    assert coord.fetch_offsets(G, [("t", 0)])[("t", 0)].offset == 42  # type: ignore[union-attr]
    # If it is gone, its session expires and the next generation starts from the stored one.
    coord.tick(T0 + 200 + SESSION)
    assert coord.describe_group(G).state == "Empty"
    coord = env.restart(T0 + 300 + SESSION)
    assert coord.describe_group(G).state == "Empty"
    _, out = new_member(coord, G, now=T0 + 400 + SESSION)
    assert out[0].generation_id == gen + 2  # gen+1 was the Empty generation


def test_offsets_of_empty_groups_expire(make_env) -> None:
    env = make_env(offsets_retention_ms=1000, offsets_retention_check_interval_ms=500)
    env.logs.create_topic("t", 1, internal=False)
    coord = env.coordinator
    commit(coord, "simple", {("t", 0): 1}, now=T0)
    a, out = new_member(coord, "live", now=T0)
    sync(coord, "live", a, out[0].generation_id, now=T0, assignments={a: b""})
    commit(coord, "live", {("t", 0): 3}, member=a, generation=out[0].generation_id, now=T0)
    heartbeat(coord, "live", a, out[0].generation_id, now=T0 + 999)
    coord.tick(T0 + 1000)
    assert coord.fetch_offsets("simple", None) == {}  # expired 1000 ms after its commit
    assert "simple" not in {g.group_id for g in coord.list_groups()}
    assert coord.fetch_offsets("live", None) != {}  # a live group keeps its offsets
    coord = env.restart(T0 + 1001)
    assert coord.fetch_offsets("simple", None) == {}


def test_partition_placement_matches_kafka() -> None:
    # Java: "".hashCode() == 0, "hello".hashCode() == 99162322,
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE (Kafka's Utils.abs maps it to 0).
    from exactly.protocol.partitioning import java_string_hashcode

    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hashcode("\U0001f600") == 1772899  # surrogate pair: 0xD83D, 0xDE00
    assert partition_for("hello", 50) == 99162322 % 50
    assert 0 <= partition_for("console-consumer-12345", 50) < 50


def test_codec_round_trip() -> None:
    from exactly.groups.codec import (
        GroupKey,
        GroupValue,
        MemberValue,
        OffsetKey,
        OffsetValue,
        decode_group_value,
        decode_key,
        decode_offset_value,
        encode_group_key,
        encode_group_value,
        encode_offset_key,
        encode_offset_value,
    )

    assert decode_key(encode_offset_key(OffsetKey("g", "t", 7))) == OffsetKey("g", "t", 7)
    assert decode_key(encode_group_key(GroupKey("g"))) == GroupKey("g")
    v = OffsetValue(12, 3, "meta", T0)
    assert decode_offset_value(encode_offset_value(v)) == v
    # Kafka's own bytes for OffsetCommitKey v1 ("g", "t", 7).
    assert encode_offset_key(OffsetKey("g", "t", 7)) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x07"
    gv = GroupValue("consumer", 4, "range", "m1", T0, (
        MemberValue("m1", None, "c", "/h", 30000, 10000, b"sub", b"asg"),
        MemberValue("m2", "inst", "c2", "/h2", 60000, 45000, b"", b"")))
    assert decode_group_value(encode_group_value(gv)) == gv
