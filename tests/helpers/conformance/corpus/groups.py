"""Classic consumer groups: FindCoordinator (v3's single key, v4+'s batch), JoinGroup (KIP-394's
MEMBER_ID_REQUIRED at v4+), SyncGroup, Heartbeat, LeaveGroup, OffsetCommit / OffsetFetch
(KIP-447's batched fetch at v8+, KIP-848's topic ids at v10), DescribeGroups, ListGroups
(KIP-518's states filter, KIP-848's types filter), DeleteGroups, OffsetDelete (KIP-496) and
static membership (KIP-345: group.instance.id).

Both brokers run with group.initial.rebalance.delay.ms=0, so a lone member's join completes at
once. Joins that wait for other members are sent on connections of their own and read later.
"""

from __future__ import annotations

import struct
from typing import Any

from exactly.protocol.apis import SUPPORTED, request_class
from exactly.protocol.framing import RequestHeader, decode_response, encode_request
from tests.helpers.conformance.corpus.produce import create_topic, topic_id, wait_for_coordinator
from tests.helpers.conformance.harness import Connection, Divergence, Session, case
from tests.helpers.conformance.wire import entity, plain

MEMBER_ID_REQUIRED = 79
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
DESCRIBE_IGNORE = ("groups.*.members.*.client_host",)


# -- the consumer protocol's bytes (ConsumerProtocolSubscription / Assignment v0) --------------


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def subscription(*topics: str) -> bytes:
    return struct.pack(">hi", 0, len(topics)) + b"".join(_str(t) for t in topics) + \
        struct.pack(">i", -1)


def assignment(topics: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t, ps in topics.items():
        out += _str(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


# -- requests ----------------------------------------------------------------------------------


def send(conn: Connection, api_key: int, version: int, fields: dict[str, Any]) -> None:
    """A request whose answer is read later with receive()."""
    conn.correlation_id += 1
    conn.send_frame(encode_request(RequestHeader(api_key, version, conn.correlation_id,
                                                 conn.client_id),
                                   entity(request_class(api_key, version), fields)))


def receive(conn: Connection, api_key: int, version: int) -> dict[str, Any]:
    _cid, response = decode_response(api_key, version, conn.read_frame())
    return plain(response)  # type: ignore[no-any-return]


def join_fields(group: str, member_id: str = "", *, topics: tuple[str, ...] = (),
                instance: str | None = None, session: int = 10000, rebalance: int = 10000,
                version: int = 9) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "group_id": group, "session_timeout": session, "rebalance_timeout": rebalance,
        "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(*topics)}]}
    if version >= 8:
        fields["reason"] = None
    if version < 5:
        del fields["group_instance_id"]
    return fields


def summary(join: dict[str, Any]) -> dict[str, Any]:
    """A JoinGroup answer with its leader told as "is it me" (both ids are made up)."""
    out = dict(join)
    out["leader_is_me"] = join["leader"] == join["member_id"] and join["leader"] != ""
    del out["leader"]
    return out


def join(s: Session, group: str, *, topics: tuple[str, ...] = (), instance: str | None = None,
         conn: Connection | None = None, session: int = 10000,
         rebalance: int = 10000) -> tuple[dict[str, Any], dict[str, Any]]:
    """JoinGroup v9 twice (MEMBER_ID_REQUIRED, then with the id): both answers."""
    first = s.call(11, 9, join_fields(group, topics=topics, instance=instance, session=session,
                                      rebalance=rebalance), conn=conn)
    if first["error_code"] != MEMBER_ID_REQUIRED:
        return first, first
    second = s.call(11, 9, join_fields(group, first["member_id"], topics=topics,
                                       instance=instance, session=session,
                                       rebalance=rebalance), conn=conn)
    return first, second


def sync(s: Session, group: str, generation: int, member: str,
         assignments: dict[str, bytes] | None = None, instance: str | None = None,
         conn: Connection | None = None) -> dict[str, Any]:
    return s.call(14, 5, {
        "group_id": group, "generation_id": generation, "member_id": member,
        "group_instance_id": instance, "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": a}
                        for m, a in (assignments or {}).items()]}, conn=conn)


def heartbeat(s: Session, group: str, generation: int, member: str,
              instance: str | None = None, conn: Connection | None = None) -> dict[str, Any]:
    return s.call(12, 4, {"group_id": group, "generation_id": generation, "member_id": member,
                          "group_instance_id": instance}, conn=conn)


def describe(s: Session, *groups: str) -> dict[str, Any]:
    return s.call(15, 5, {"groups": list(groups), "include_authorized_operations": False})


def stable_member(s: Session, group: str, topic: str, conn: Connection | None = None,
                  ) -> tuple[str, int]:
    """A lone member joined and synced (the partition 0 of `topic`): its id and generation."""
    _first, joined = join(s, group, topics=(topic,), conn=conn)
    member, gen = joined["member_id"], joined["generation_id"]
    sync(s, group, gen, member, {member: assignment({topic: [0]})}, conn=conn)
    return member, gen


def commit(s: Session, group: str, topic: str, offsets: dict[int, int], version: int = 9,
           generation: int = -1, member: str = "", tid: str | None = None) -> dict[str, Any]:
    parts = [{"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
              "committed_metadata": "m"} for p, o in offsets.items()]
    if version < 6:
        for part in parts:
            del part["committed_leader_epoch"]
    fields: dict[str, Any] = {"group_id": group, "topics": [{"name": topic,
                                                             "partitions": parts}]}
    if version >= 10:
        fields["topics"] = [{"topic_id": tid, "partitions": parts}]
    if version >= 1:
        fields |= {"generation_id_or_member_epoch": generation, "member_id": member}
    if 2 <= version <= 4:
        fields["retention_time"] = -1
    if version >= 7:
        fields["group_instance_id"] = None
    return s.call(8, version, fields)


def fetch_offsets(s: Session, group: str, topic: str | None, partitions: list[int],
                  version: int = 9, tid: str | None = None) -> dict[str, Any]:
    if version >= 8:
        topics: Any = None if topic is None else [
            {"name": topic, "partition_indexes": partitions}]
        if version >= 10 and topic is not None:
            topics = [{"topic_id": tid, "partition_indexes": partitions}]
        return s.call(9, version, {"groups": [{"group_id": group, "member_id": None,
                                               "member_epoch": -1, "topics": topics}],
                                   "require_stable": True})
    fields: dict[str, Any] = {"group_id": group, "topics": None if topic is None else [
        {"name": topic, "partition_indexes": partitions}]}
    if version >= 7:
        fields["require_stable"] = True
    return s.call(9, version, fields)


def wait_group_coordinator(s: Session, group: str) -> None:
    """FindCoordinator until NONE, then OffsetFetch until the coordinator serves the group (a
    fresh Kafka answers NOT_COORDINATOR while its __consumer_offsets partition loads)."""
    wait_for_coordinator(s, group, key_type=0)
    s.until(f"coordinator of {group} serving", lambda: s.call(9, 9, {"groups": [
        {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
        "require_stable": False})["groups"][0]["error_code"] not in (
            COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR))


# -- cases -------------------------------------------------------------------------------------


@case("groups.find_coordinator")
def find_coordinator(s: Session) -> None:
    """FindCoordinator of a group: v3's single key, v4+'s batch of keys (KIP-699)."""
    g1, g2 = s.name("g1"), s.name("g2")
    wait_group_coordinator(s, g1)
    s.record("v3", s.call(10, 3, {"key": g1, "key_type": 0}))
    s.record("v4 two keys", s.call(10, 4, {"key_type": 0, "coordinator_keys": [g1, g2]}))
    s.record("v6 one key", s.call(10, 6, {"key_type": 0, "coordinator_keys": [g2]}))


@case("groups.join_sync_heartbeat")
def join_sync_heartbeat(s: Session) -> None:
    """A lone member: MEMBER_ID_REQUIRED, join, sync with its assignment, heartbeats (ok, with a
    wrong generation, with an unknown member), leave, and the group left Empty."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic)
    wait_group_coordinator(s, group)
    first, joined = join(s, group, topics=(topic,))
    s.record("join without member id", first)
    s.record("join with member id", summary(joined))
    member, gen = joined["member_id"], joined["generation_id"]
    a = assignment({topic: [0]})
    s.record("sync", sync(s, group, gen, member, {member: a}))
    s.record("heartbeat", heartbeat(s, group, gen, member))
    s.record("heartbeat wrong generation", heartbeat(s, group, gen + 5, member))
    s.record("heartbeat unknown member", heartbeat(s, group, gen, "nobody"))
    s.record("describe stable", describe(s, group), ignore=DESCRIBE_IGNORE)
    s.record("leave", s.call(13, 5, {"group_id": group, "members": [
        {"member_id": member, "group_instance_id": None, "reason": None}]}))
    s.record("heartbeat after leave", heartbeat(s, group, gen, member))
    s.record("describe empty", describe(s, group), ignore=DESCRIBE_IGNORE)


@case("groups.old_join_versions")
def old_join_versions(s: Session) -> None:
    """JoinGroup v3 (no MEMBER_ID_REQUIRED: the id is given at once) and v5, SyncGroup v3."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic)
    wait_group_coordinator(s, group)
    joined = s.call(11, 3, join_fields(group, topics=(topic,), version=3))
    s.record("join v3", summary(joined))
    member, gen = joined["member_id"], joined["generation_id"]
    s.record("sync v3", s.call(14, 3, {
        "group_id": group, "generation_id": gen, "member_id": member,
        "group_instance_id": None,
        "assignments": [{"member_id": member, "assignment": assignment({topic: [0]})}]}))
    s.record("heartbeat v0", s.call(12, 0, {"group_id": group, "generation_id": gen,
                                            "member_id": member}))
    s.record("leave v0", s.call(13, 0, {"group_id": group, "member_id": member}))


@case("groups.rebalance")
def rebalance(s: Session) -> None:
    """A second member joins a Stable group: the first one's heartbeat says
    REBALANCE_IN_PROGRESS, it rejoins, both get generation 2, the leader syncs both."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic, partitions=2)
    wait_group_coordinator(s, group)
    a, gen1 = stable_member(s, group, topic)
    other = s.connect()
    first = s.call(11, 9, join_fields(group, topics=(topic,)), conn=other)
    s.record("second join without id", first)
    b = first["member_id"]
    send(other, 11, 9, join_fields(group, b, topics=(topic,)))  # waits for the rebalance

    def rebalancing() -> dict[str, Any] | None:
        hb = heartbeat(s, group, gen1, a)
        return hb if hb["error_code"] != 0 else None

    s.record("heartbeat during rebalance", s.until("rebalance", rebalancing))
    rejoin = s.call(11, 9, join_fields(group, a, topics=(topic,)))
    s.record("first rejoins", summary(rejoin), unordered=("members",))
    s.record("second joined", summary(receive(other, 11, 9)), unordered=("members",))
    gen2 = rejoin["generation_id"]
    send(other, 14, 5, {"group_id": group, "generation_id": gen2, "member_id": b,
                        "group_instance_id": None, "protocol_type": "consumer",
                        "protocol_name": "range", "assignments": []})
    s.record("leader syncs", sync(s, group, gen2, a, {a: assignment({topic: [0]}),
                                                      b: assignment({topic: [1]})}))
    s.record("follower synced", receive(other, 14, 5))
    s.record("old generation heartbeat", heartbeat(s, group, gen1, a))
    s.record("describe", describe(s, group), ignore=DESCRIBE_IGNORE,
             unordered=("groups.*.members",))


@case("groups.offsets")
def offsets(s: Session) -> None:
    """OffsetCommit / OffsetFetch by a simple consumer (generation -1) at several versions, of a
    known and an unknown topic, and the batched OffsetFetch v8+ of two groups."""
    topic, group, g2 = s.name("t"), s.name("g"), s.name("g2")
    create_topic(s, topic, partitions=2)
    wait_group_coordinator(s, group)
    wait_group_coordinator(s, g2)
    s.record("commit v2", commit(s, group, topic, {0: 5}, version=2))
    s.record("commit v9", commit(s, group, topic, {0: 7, 1: 3}))
    s.record("commit unknown topic", commit(s, group, s.name("nope"), {0: 1}))
    s.record("commit unknown partition", commit(s, group, topic, {7: 1}))
    s.record("fetch v1", fetch_offsets(s, group, topic, [0, 1], version=1))
    s.record("fetch v5", fetch_offsets(s, group, topic, [0, 1], version=5))
    s.record("fetch v7", fetch_offsets(s, group, topic, [0, 1], version=7))
    s.record("fetch v9", fetch_offsets(s, group, topic, [0, 1]))
    s.record("fetch v9 all topics", fetch_offsets(s, group, None, []))
    s.record("fetch unknown topic", fetch_offsets(s, group, s.name("nope"), [0]))
    s.record("fetch unknown group", fetch_offsets(s, g2, topic, [0]))
    s.record("fetch two groups", s.call(9, 9, {"groups": [
        {"group_id": group, "member_id": None, "member_epoch": -1,
         "topics": [{"name": topic, "partition_indexes": [1]}]},
        {"group_id": g2, "member_id": None, "member_epoch": -1, "topics": None}],
        "require_stable": False}))
    if SUPPORTED[8][1] >= 10 and SUPPORTED[9][1] >= 10:  # KIP-848: topic ids
        tid = topic_id(s, topic)
        s.record("commit v10", commit(s, group, topic, {0: 11}, version=10, tid=tid))
        s.record("commit v10 unknown id", commit(
            s, group, topic, {0: 1}, version=10, tid="00000000-0000-0000-0000-00000000abcd"))
        s.record("fetch v10", fetch_offsets(s, group, topic, [0, 1], version=10, tid=tid))


@case("groups.commit_by_member")
def commit_by_member(s: Session) -> None:
    """OffsetCommit by a member of a Stable group: ok, wrong generation, unknown member; a
    simple commit (generation -1) to a group with members."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic)
    wait_group_coordinator(s, group)
    member, gen = stable_member(s, group, topic)
    s.record("commit", commit(s, group, topic, {0: 4}, generation=gen, member=member))
    s.record("commit wrong generation", commit(s, group, topic, {0: 5}, generation=gen + 1,
                                               member=member))
    s.record("commit unknown member", commit(s, group, topic, {0: 5}, generation=gen,
                                             member="nobody"))
    s.record("simple commit to a live group", commit(s, group, topic, {0: 6}))
    s.record("fetch", fetch_offsets(s, group, topic, [0]))


@case("groups.list_describe_delete")
def list_describe_delete(s: Session) -> None:
    """ListGroups v5 filtered by state and by type, DescribeGroups of a live, an empty and an
    unknown group, DeleteGroups of a group with members (NON_EMPTY_GROUP), of an empty one and
    of an unknown one, OffsetDelete of a live and an empty group."""
    topic, live, empty, unknown = s.name("t"), s.name("live"), s.name("empty"), s.name("none")
    create_topic(s, topic)
    for g in (live, empty, unknown):
        wait_group_coordinator(s, g)
    member, gen = stable_member(s, live, topic)
    commit(s, live, topic, {0: 1}, generation=gen, member=member)
    commit(s, empty, topic, {0: 2})
    mine = {live, empty}

    def listed(states: list[str], types: list[str]) -> dict[str, Any]:
        a = s.call(16, 5, {"states_filter": states, "types_filter": types})
        a["groups"] = [g for g in a["groups"] if g["group_id"] in mine]
        return a

    s.record("list all", listed([], []), unordered=("groups",))
    s.record("list stable", listed(["Stable"], []), unordered=("groups",))
    s.record("list empty", listed(["Empty"], []), unordered=("groups",))
    s.record("list classic", listed([], ["classic"]), unordered=("groups",))
    s.record("list consumer", listed([], ["consumer"]), unordered=("groups",))
    s.record("list v3", {"groups": sorted(
        (g for g in s.call(16, 3, {})["groups"] if g["group_id"] in mine),
        key=lambda g: g["group_id"])})
    # Kafka answers group by group of each __consumer_offsets partition: an order of its own.
    s.record("describe", describe(s, live, empty, unknown), ignore=DESCRIBE_IGNORE,
             unordered=("groups",))
    s.record("offset delete live", s.call(47, 0, {"group_id": live, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0}]}]}))
    s.record("offset delete empty", s.call(47, 0, {"group_id": empty, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0}]}]}))
    s.record("offset delete unknown group", s.call(47, 0, {"group_id": unknown, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0}]}]}))
    s.record("fetch after offset delete", fetch_offsets(s, empty, topic, [0]))
    s.record("delete", s.call(42, 2, {"groups_names": [live, empty, unknown]}),
             unordered=("results",))
    s.record("describe after delete", describe(s, live, empty), ignore=DESCRIBE_IGNORE,
             unordered=("groups",))


@case("groups.static_membership")
def static_membership(s: Session) -> None:
    """KIP-345: a static member (group.instance.id) joins; a second join with the same instance
    id and no member id takes its place: the old member id is fenced (FENCED_INSTANCE_ID)."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic)
    wait_group_coordinator(s, group)
    instance = "instance-1"
    joined = s.call(11, 9, join_fields(group, topics=(topic,), instance=instance))
    s.record("static join", summary(joined))
    old, gen = joined["member_id"], joined["generation_id"]
    s.record("sync", sync(s, group, gen, old, {old: assignment({topic: [0]})},
                          instance=instance))
    other = s.connect()
    again = s.call(11, 9, join_fields(group, topics=(topic,), instance=instance), conn=other)
    s.record("same instance joins again", summary(again))
    new = again["member_id"]
    s.record("new member id", {"changed": new != old})
    s.record("old member heartbeat", heartbeat(s, group, gen, old, instance=instance))
    s.record("new member heartbeat", heartbeat(s, group, again["generation_id"], new,
                                               instance=instance, conn=other))
    s.record("describe", describe(s, group), ignore=DESCRIBE_IGNORE)
    s.record("old member leaves", s.call(13, 5, {"group_id": group, "members": [
        {"member_id": old, "group_instance_id": instance, "reason": None}]}))
    s.record("instance leaves", s.call(13, 5, {"group_id": group, "members": [
        {"member_id": "", "group_instance_id": instance, "reason": None}]}))


DIVERGENCES: list[Divergence] = []
