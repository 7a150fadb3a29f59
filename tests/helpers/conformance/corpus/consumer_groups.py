"""KIP-848 consumer groups: ConsumerGroupHeartbeat v1 (KIP-1082: the member makes its own id)
joining by topic names and by regex, leaving (epoch -1), fenced (FENCED_MEMBER_EPOCH) and
unknown members, ConsumerGroupDescribe, and the group configs of KIP-848
(consumer.session.timeout.ms, consumer.heartbeat.interval.ms) set by IncrementalAlterConfigs on a
GROUP resource."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.helpers.conformance.corpus.groups import wait_group_coordinator
from tests.helpers.conformance.corpus.produce import create_topic, topic_id
from tests.helpers.conformance.harness import Divergence, Session, case

FENCED_MEMBER_EPOCH = 110
UNKNOWN_MEMBER_ID = 25
GROUP = 32  # ConfigResource type of a group (KIP-848)
DESCRIBE_IGNORE = ("groups.*.members.*.client_host",)


def heartbeat(s: Session, group: str, member: str, epoch: int, *,
              topics: list[str] | None = None, regex: str | None = None,
              owned: list[dict[str, Any]] | None = None,
              rebalance: int = 30000) -> dict[str, Any]:
    return s.call(68, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None,
        "rack_id": None, "rebalance_timeout": rebalance, "subscribed_topic_names": topics,
        "subscribed_topic_regex": regex, "server_assignor": None, "topic_partitions": owned})


def owned(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The assignment of a heartbeat's answer as the next heartbeat's owned partitions."""
    a = answer.get("assignment")
    return [] if a is None else [{"topic_id": t["topic_id"], "partitions": t["partitions"]}
                                 for t in a["topic_partitions"]]


def describe(s: Session, *groups: str) -> dict[str, Any]:
    return s.call(69, 1, {"group_ids": list(groups), "include_authorized_operations": False})


def sorted_assignment(answer: dict[str, Any]) -> dict[str, Any]:
    out = dict(answer)
    if out.get("assignment"):
        out["assignment"] = {"topic_partitions": sorted(
            ({"topic_id": t["topic_id"], "partitions": sorted(t["partitions"])}
             for t in out["assignment"]["topic_partitions"]), key=lambda t: t["topic_id"])}
    return out


@case("consumer_groups.join_leave")
def join_leave(s: Session) -> None:
    """A member joins by topic names (epoch 0 → 1 with the assignment), heartbeats with what it
    owns, is described, a wrong epoch is fenced, an unknown member refused, then it leaves."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic, partitions=2)
    wait_group_coordinator(s, group)
    tid = topic_id(s, topic)
    member = str(uuid.uuid4())
    joined = heartbeat(s, group, member, 0, topics=[topic], owned=[])
    s.record("join", sorted_assignment(joined))
    s.record("topic id", {"same": joined["assignment"] is not None and all(
        t["topic_id"] == tid for t in joined["assignment"]["topic_partitions"])})
    epoch = joined["member_epoch"]
    s.record("heartbeat", heartbeat(s, group, member, epoch, owned=owned(joined)))
    s.record("describe", describe(s, group), ignore=DESCRIBE_IGNORE)
    s.record("fenced", heartbeat(s, group, member, epoch + 5, topics=[topic], owned=[]))
    s.record("unknown member", heartbeat(s, group, str(uuid.uuid4()), 1, topics=[topic],
                                         owned=[]))
    s.record("leave", heartbeat(s, group, member, -1))
    s.record("describe after leave", describe(s, group),
             ignore=DESCRIBE_IGNORE)
    s.record("heartbeat after leave", heartbeat(s, group, member, epoch, owned=[]))


@case("consumer_groups.two_members")
def two_members(s: Session) -> None:
    """A second member joins: the first one, heartbeating with all it owns, is asked to give
    partitions up; once it does, the second gets them at the next epoch."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic, partitions=2)
    wait_group_coordinator(s, group)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    ja = heartbeat(s, group, a, 0, topics=[topic], owned=[])
    s.record("first joins", sorted_assignment(ja))
    # Kafka 4.4 runs the assignor at most once a group.consumer.assignment.interval.ms (1 s,
    # KIP-1263); Exactly runs it in the heartbeat that needs it. Past the interval both agree.
    time.sleep(1.2)
    jb = heartbeat(s, group, b, 0, topics=[topic], owned=[])
    s.record("second joins", sorted_assignment(jb))
    ha = heartbeat(s, group, a, ja["member_epoch"], owned=owned(ja))
    s.record("first revokes", sorted_assignment(ha))
    ha2 = heartbeat(s, group, a, ha["member_epoch"], owned=owned(ha))
    s.record("first revoked", sorted_assignment(ha2))
    hb = heartbeat(s, group, b, jb["member_epoch"], owned=owned(jb))
    s.record("second assigned", sorted_assignment(hb))
    s.record("describe", describe(s, group), ignore=DESCRIBE_IGNORE,
             unordered=("groups.*.members",))
    time.sleep(1.2)
    s.record("first leaves", heartbeat(s, group, a, -1))
    s.record("describe after a leave", describe(s, group),
             ignore=DESCRIBE_IGNORE)
    hb2 = heartbeat(s, group, b, hb["member_epoch"], owned=owned(hb))
    s.record("second after the leave", sorted_assignment(hb2))


@case("consumer_groups.regex")
def regex(s: Session) -> None:
    """Subscription by regex (KIP-848): Kafka resolves it asynchronously, so the first answer
    has no partitions; a later heartbeat gets them."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic, partitions=1)
    wait_group_coordinator(s, group)
    member = str(uuid.uuid4())
    pattern = s.name("").replace(".", "\\.") + "t.*"
    joined = heartbeat(s, group, member, 0, regex=pattern, owned=[])
    s.record("join", sorted_assignment(joined))

    def assigned() -> dict[str, Any] | None:
        a = heartbeat(s, group, member, joined["member_epoch"], owned=[])
        return a if a["assignment"] is not None and a["assignment"]["topic_partitions"] else None

    s.record("assigned later", sorted_assignment(s.until("regex resolved", assigned)))
    s.record("describe", describe(s, group), ignore=DESCRIBE_IGNORE)
    s.record("bad regex", heartbeat(s, group, str(uuid.uuid4()), 0, regex="(", owned=[]))


@case("consumer_groups.configs")
def configs(s: Session) -> None:
    """KIP-848's group configs: consumer.session.timeout.ms and consumer.heartbeat.interval.ms
    on a GROUP resource (IncrementalAlterConfigs), then the heartbeat interval a member gets."""
    topic, group = s.name("t"), s.name("g")
    create_topic(s, topic)
    wait_group_coordinator(s, group)

    def alter(name: str, value: str) -> dict[str, Any]:
        return s.call(44, 1, {"resources": [{"resource_type": GROUP, "resource_name": group,
                                             "configs": [{"name": name, "config_operation": 0,
                                                          "value": value}]}],
                              "validate_only": False})

    s.record("session timeout", alter("consumer.session.timeout.ms", "50000"))
    s.record("heartbeat interval", alter("consumer.heartbeat.interval.ms", "6000"))
    s.record("heartbeat interval too small", alter("consumer.heartbeat.interval.ms", "10"))
    joined = heartbeat(s, group, str(uuid.uuid4()), 0, topics=[topic], owned=[])
    s.record("join", sorted_assignment(joined))
    described = s.call(32, 4, {"resources": [{"resource_type": GROUP, "resource_name": group,
                                              "configuration_keys": None}],
                               "include_synonyms": False, "include_documentation": False})
    result = described["results"][0]
    # Only KIP-848's two configs: Kafka 4.4 also lists streams.*, errors.* and share.* keys
    # that Exactly does not have (share.* ones are the share_groups corpus' business).
    s.record("describe configs", {
        "error_code": result["error_code"],
        "configs": sorted(({k: c[k] for k in ("name", "value", "read_only", "config_source",
                                               "is_sensitive")}
                           for c in result["configs"] if c["name"] in (
                               "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")),
                          key=lambda c: c["name"])})
    s.record("delete heartbeat interval", s.call(44, 1, {"resources": [{
        "resource_type": GROUP, "resource_name": group, "configs": [{
            "name": "consumer.heartbeat.interval.ms", "config_operation": 1, "value": None}]}],
        "validate_only": False}))


DIVERGENCES: list[Divergence] = []
