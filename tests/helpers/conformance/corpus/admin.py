"""Admin APIs: CreateTopics (validate_only, replication factor, bad configs, existing topics),
DeleteTopics, CreatePartitions, DeleteRecords, DescribeCluster, DescribeLogDirs, ElectLeaders,
the ACL APIs without an authorizer (SECURITY_DISABLED), DescribeQuorum, the transaction admin
APIs (ListTransactions with KIP-664's filters, KIP-994's duration filter and KIP-1152's
transactional id pattern, DescribeTransactions, DescribeProducers), SCRAM credentials
(KIP-554), and the single-node answers of the reassignment APIs (KIP-455), AlterReplicaLogDirs
(KIP-113), ListConfigResources (KIP-1142) and DescribeTopicPartitions (KIP-966)."""

from __future__ import annotations

from typing import Any

from tests.helpers.conformance.corpus.produce import (
    batch,
    create_topic,
    init_producer_id,
    produce,
    wait_for_coordinator,
    wait_for_leaders,
)
from tests.helpers.conformance.harness import Divergence, Session, case


def create(s: Session, name: str, partitions: int = 1, replication: int = 1,
           configs: dict[str, str] | None = None, validate_only: bool = False,
           version: int = 7) -> dict[str, Any]:
    return s.call(19, version, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": replication,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 30000, "validate_only": validate_only})


def errors_only(answer: dict[str, Any]) -> dict[str, Any]:
    """A CreateTopics answer without the topic's configs (configs.py compares those)."""
    return {**answer, "topics": [{k: v for k, v in t.items() if k != "configs"}
                                 for t in answer["topics"]]}


@case("admin.create_topics")
def create_topics(s: Session) -> None:
    """validate_only, a replication factor above the one node, bad config values, an unknown
    config, an invalid name, a topic that exists, defaults (-1) for partitions and replicas."""
    t = s.name("t")
    s.record("validate_only", errors_only(create(s, t, 3, validate_only=True)))
    s.record("replication 3", create(s, s.name("r3"), 1, replication=3))
    s.record("replication 0", create(s, s.name("r0"), 1, replication=0))
    s.record("partitions 0", create(s, s.name("p0"), 0))
    s.record("bad retention.ms", create(s, s.name("bad1"), configs={"retention.ms": "abc"}))
    s.record("bad cleanup.policy",
             create(s, s.name("bad2"), configs={"cleanup.policy": "sometimes"}))
    s.record("unknown config", create(s, s.name("bad3"), configs={"no.such.config": "1"}))
    s.record("invalid name", create(s, "bad/name", 1))
    s.record("created", errors_only(create(s, t, 3)))
    wait_for_leaders(s, t, 3)
    s.record("exists", create(s, t, 3))
    s.record("exists validate_only", create(s, t, 3, validate_only=True))
    s.record("defaults", errors_only(create(s, s.name("d"), -1, replication=-1)))
    for v in (2, 4, 5):
        s.record(f"v{v} exists", errors_only(create(s, t, 3, version=v)))


@case("admin.create_topics_duplicate")
def create_topics_duplicate(s: Session) -> None:
    """The same topic twice in one request: INVALID_REQUEST for both."""
    t = s.name("t")
    topic = {"name": t, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []}
    s.record("duplicate", errors_only(s.call(19, 7, {"topics": [topic, topic], "timeout": 30000,
                                                       "validate_only": False})))


@case("admin.delete_topics")
def delete_topics(s: Session) -> None:
    """By name, an unknown name, an unknown id, then the deleted topic again."""
    t = s.name("t")
    create_topic(s, t)
    s.record("unknown name v6", s.call(20, 6, {"topics": [{"name": s.name("none"),
                                                           "topic_id": None}],
                                               "timeout": 30000}))
    s.record("unknown id v6", s.call(20, 6, {"topics": [{
        "name": None, "topic_id": "00000000-0000-0000-0000-00000000abcd"}], "timeout": 30000}))
    s.record("deleted v6", s.call(20, 6, {"topics": [{"name": t, "topic_id": None}],
                                          "timeout": 30000}))
    s.record("again v4", s.call(20, 4, {"topic_names": [t], "timeout": 30000}))


@case("admin.create_partitions")
def create_partitions(s: Session) -> None:
    """More partitions (validate_only, then for real), the same count, fewer, an unknown
    topic, assignments naming an unknown broker."""
    t = s.name("t")
    create_topic(s, t, partitions=1)

    def grow(count: int, validate_only: bool = False, name: str = t,
             assignments: list[Any] | None = None) -> dict[str, Any]:
        return s.call(37, 3, {"topics": [{"name": name, "count": count,
                                          "assignments": assignments}],
                              "timeout": 30000, "validate_only": validate_only})

    s.record("validate_only 3", grow(3, True))
    s.record("grow 3", grow(3))
    wait_for_leaders(s, t, 3)
    s.record("same 3", grow(3))
    s.record("fewer 2", grow(2))
    s.record("unknown topic", grow(2, name=s.name("none")))
    s.record("unknown broker", grow(4, assignments=[{"broker_ids": [12345]}]))


@case("admin.delete_records")
def delete_records(s: Session) -> None:
    """Below the high watermark, at it (-1), above it, an unknown partition and topic."""
    t = s.name("t")
    create_topic(s, t, partitions=1)
    produce(s, t, batch(b"a", b"b", b"c", b"d"))

    def delete(offset: int, partition: int = 0, name: str = t) -> dict[str, Any]:
        return s.call(21, 2, {"topics": [{"name": name, "partitions": [
            {"partition_index": partition, "offset": offset}]}], "timeout": 30000})

    s.record("below", delete(1))
    s.record("lower than start", delete(0))
    s.record("high watermark -1", delete(-1))
    s.record("above", delete(10))
    s.record("unknown partition", delete(0, partition=5))
    s.record("unknown topic", delete(0, name=s.name("none")))
    for v in (0, 1):
        s.record(f"v{v}", s.call(21, v, {"topics": [{"name": t, "partitions": [
            {"partition_index": 0, "offset": 4}]}], "timeout": 30000}))


@case("admin.describe_cluster")
def describe_cluster(s: Session) -> None:
    """v0 and v1, with and without authorized operations, brokers and controllers (v1)."""
    s.record("v0", s.call(60, 0, {"include_cluster_authorized_operations": False}))
    s.record("v0 ops", s.call(60, 0, {"include_cluster_authorized_operations": True}))
    s.record("v1 brokers", s.call(60, 1, {"include_cluster_authorized_operations": False,
                                          "endpoint_type": 1}))
    s.record("v1 controllers", s.call(60, 1, {"include_cluster_authorized_operations": False,
                                              "endpoint_type": 2}))
    s.record("v1 bad type", s.call(60, 1, {"include_cluster_authorized_operations": False,
                                           "endpoint_type": 7}))


@case("admin.describe_log_dirs")
def describe_log_dirs(s: Session) -> None:
    """One topic's partitions (sizes and paths left out: each broker has its own)."""
    t = s.name("t")
    create_topic(s, t, partitions=2)
    ignore = ("results.*.log_dir", "results.*.total_bytes", "results.*.usable_bytes",
              "results.*.topics.*.partitions.*.partition_size")
    for v in (1, 2, 3, 4):
        s.record(f"v{v}", s.call(35, v, {"topics": [{"topic": t, "partitions": [0, 1, 7]}]}),
                 ignore=ignore, unordered=("results.*.topics.*.partitions",))
    s.record("unknown topic", s.call(35, 4, {"topics": [{"topic": s.name("none"),
                                                         "partitions": [0]}]}), ignore=ignore)


@case("admin.elect_leaders")
def elect_leaders(s: Session) -> None:
    """Preferred and unclean elections on one node: nothing to elect."""
    t = s.name("t")
    create_topic(s, t, partitions=2)
    for etype in (0, 1):
        s.record(f"type {etype}", s.call(43, 2, {
            "election_type": etype, "topic_partitions": [{"topic": t, "partitions": [0, 1]}],
            "timeout": 30000}), unordered=("replica_election_results.*.partition_result",))
    s.record("unknown partition", s.call(43, 2, {
        "election_type": 0, "topic_partitions": [{"topic": t, "partitions": [9]}],
        "timeout": 30000}))
    s.record("unknown topic", s.call(43, 2, {
        "election_type": 0, "topic_partitions": [{"topic": s.name("none"), "partitions": [0]}],
        "timeout": 30000}))
    s.record("v0", s.call(43, 0, {"topic_partitions": [{"topic": t, "partitions": [0]}],
                                  "timeout": 30000}))
    s.record("bad type", s.call(43, 2, {
        "election_type": 5, "topic_partitions": [{"topic": t, "partitions": [0]}],
        "timeout": 30000}))


ANY_ACL = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


@case("admin.acls_without_authorizer")
def acls_without_authorizer(s: Session) -> None:
    """No authorizer configured on either broker: SECURITY_DISABLED."""
    s.record("describe", s.call(29, 3, ANY_ACL))
    s.record("create", s.call(30, 3, {"creations": [{
        "resource_type": 2, "resource_name": s.name("t"), "resource_pattern_type": 3,
        "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}]}))
    s.record("delete", s.call(31, 3, {"filters": [ANY_ACL]}))


@case("admin.describe_quorum")
def describe_quorum(s: Session) -> None:
    """The metadata quorum of one combined node (offsets and times left out)."""
    ignore = ("topics.*.partitions.*.high_watermark",
              "topics.*.partitions.*.current_voters.*.log_end_offset",
              "topics.*.partitions.*.observers.*.log_end_offset",
              "topics.*.partitions.*.leader_epoch",
              "topics.*.partitions.*.current_voters.*.last_fetch_timestamp",
              "topics.*.partitions.*.current_voters.*.last_caught_up_timestamp",
              "topics.*.partitions.*.current_voters.*.replica_directory_id",
              "nodes.*.listeners")
    for v in (0, 1, 2):
        s.record(f"v{v}", s.call(55, v, {"topics": [{"topic_name": "__cluster_metadata",
                                                     "partitions": [{"partition_index": 0}]}]}),
                 ignore=ignore)
    s.record("other topic", s.call(55, 2, {"topics": [{"topic_name": s.name("t"),
                                                      "partitions": [{"partition_index": 0}]}]}))


# -- transactions -----------------------------------------------------------------------------


def ready_pid(s: Session, tid: str) -> dict[str, Any] | None:
    """InitProducerId's answer once it succeeds (a fresh coordinator may still be loading)."""
    answer = init_producer_id(s, tid)
    return answer if answer["error_code"] == 0 else None


def open_transaction(s: Session, tid: str, topic: str) -> dict[str, Any]:
    """InitProducerId, AddPartitionsToTxn v3 (transaction version 1) and a transactional
    Produce: a transaction left Ongoing. The InitProducerId answer."""
    wait_for_coordinator(s, tid)
    pid = s.until("producer id", lambda: ready_pid(s, tid))
    added = s.call(24, 3, {"v3_and_below_transactional_id": tid,
                           "v3_and_below_producer_id": pid["producer_id"],
                           "v3_and_below_producer_epoch": pid["producer_epoch"],
                           "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    result = added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]
    assert result["partition_error_code"] == 0, added
    answer = produce(s, topic, batch(b"x", producer_id=pid["producer_id"],
                                     producer_epoch=pid["producer_epoch"], base_sequence=0,
                                     transactional=True), transactional_id=tid)
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0, answer
    return pid


def mine(s: Session, answer: dict[str, Any]) -> dict[str, Any]:
    """This case's transactions, by transactional id (so producer ids alias in one order)."""
    prefix = s.name("")
    return {**answer, "transaction_states": sorted(
        (t for t in answer["transaction_states"] if t["transactional_id"].startswith(prefix)),
        key=lambda t: t["transactional_id"])}


@case("admin.transactions")
def transactions(s: Session) -> None:
    """An open transaction and an empty one: ListTransactions with every filter (states,
    producer ids, KIP-994's duration, KIP-1152's pattern), DescribeTransactions,
    DescribeProducers."""
    t = s.name("t")
    create_topic(s, t, partitions=1)
    tid, idle = s.name("open"), s.name("idle")
    pid = open_transaction(s, tid, t)
    wait_for_coordinator(s, idle)
    idle_pid = s.until("idle producer id", lambda: ready_pid(s, idle))
    unordered = ("transaction_states",)
    lt: dict[str, Any] = {"state_filters": [], "producer_id_filters": []}
    s.record("list v0", mine(s, s.call(66, 0, lt)), unordered=unordered)
    s.record("list Ongoing", mine(s, s.call(66, 0, {**lt, "state_filters": ["Ongoing"]})),
             unordered=unordered)
    s.record("list Empty", mine(s, s.call(66, 0, {**lt, "state_filters": ["Empty"]})),
             unordered=unordered)
    s.record("list unknown state", s.call(66, 0, {**lt, "state_filters": ["Sleeping"]}))
    s.record("list pid", s.call(66, 0, {**lt, "producer_id_filters": [pid["producer_id"]]}))
    s.record("list pid none", s.call(66, 0, {**lt, "producer_id_filters": [987654321]}))
    s.record("list v1 duration 0", mine(s, s.call(66, 1, {**lt, "duration_filter": 0})),
             unordered=unordered)
    s.record("list v1 duration -1", mine(s, s.call(66, 1, {**lt, "duration_filter": -1})),
             unordered=unordered)
    s.record("list v1 duration 1h", s.call(66, 1, {**lt, "duration_filter": 3_600_000}))
    s.record("list v2 pattern", s.call(66, 2, {**lt, "duration_filter": -1,
                                               "transactional_id_pattern": s.name("op.*")}))
    s.record("list v2 pattern all", mine(s, s.call(66, 2, {
        **lt, "duration_filter": -1, "transactional_id_pattern": s.name(".*")})),
        unordered=unordered)
    s.record("list v2 bad pattern", s.call(66, 2, {**lt, "duration_filter": -1,
                                                   "transactional_id_pattern": "(["}))
    s.record("list v2 empty pattern", mine(s, s.call(66, 2, {
        **lt, "duration_filter": -1, "transactional_id_pattern": ""})), unordered=unordered)
    s.record("describe", s.call(65, 0, {"transactional_ids": [idle, tid, s.name("none")]}))
    s.record("producers", s.call(61, 0, {"topics": [{"name": t, "partition_indexes": [0, 3]}]}),
             ignore=("topics.*.partitions.*.active_producers.*.last_timestamp",
                     "topics.*.partitions.*.active_producers.*.coordinator_epoch"))
    s.record("producers unknown topic", s.call(61, 0, {"topics": [
        {"name": s.name("none"), "partition_indexes": [0]}]}))
    assert idle_pid["producer_id"] != pid["producer_id"]


# -- SCRAM credentials ------------------------------------------------------------------------


@case("admin.scram_credentials")
def scram_credentials(s: Session) -> None:
    """Describe nobody (empty list: everyone, KIP-554), null users, an unknown user; upsert
    and delete a credential of this case's user."""
    user = s.name("u")
    s.record("describe unknown", s.call(50, 0, {"users": [{"name": user}]}))
    s.record("upsert", s.call(51, 0, {"deletions": [], "upsertions": [{
        "name": user, "mechanism": 1, "iterations": 4096, "salt": b"saltsalt",
        "salted_password": b"p" * 32}]}))

    def described() -> dict[str, Any] | None:
        # Kafka's controller applies the upsert; its brokers answer Describe from their
        # metadata image, which follows a moment later (RESOURCE_NOT_FOUND until then).
        answer = s.call(50, 0, {"users": [{"name": user}]})
        return answer if answer["results"][0]["error_code"] == 0 else None

    s.record("describe", s.until("the credential described", described))
    everyone = s.call(50, 0, {"users": []})
    s.record("describe empty list", {**everyone, "results": [
        r for r in everyone["results"] if r["user"] == user]})
    everyone = s.call(50, 0, {"users": None})
    s.record("describe null", {**everyone, "results": [
        r for r in everyone["results"] if r["user"] == user]})
    s.record("bad iterations", s.call(51, 0, {"deletions": [], "upsertions": [{
        "name": user, "mechanism": 2, "iterations": 1, "salt": b"saltsalt",
        "salted_password": b"p" * 64}]}))
    s.record("bad mechanism", s.call(51, 0, {"deletions": [{"name": user, "mechanism": 0}],
                                             "upsertions": []}))
    s.record("delete", s.call(51, 0, {"deletions": [{"name": user, "mechanism": 1}],
                                      "upsertions": []}))
    s.record("delete again", s.call(51, 0, {"deletions": [{"name": user, "mechanism": 1}],
                                            "upsertions": []}))


# -- APIs of a cluster, answered by one node --------------------------------------------------


@case("admin.partition_reassignments")
def partition_reassignments(s: Session) -> None:
    """AlterPartitionReassignments to the one broker (a no-op), to an unknown broker, a cancel
    with nothing in progress; ListPartitionReassignments of one topic and of all."""
    t = s.name("t")
    create_topic(s, t, partitions=2)
    md = s.call(3, 12, {"topics": [{"name": t, "topic_id": None}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    broker = md["topics"][0]["partitions"][0]["replica_nodes"][0]

    def alter(replicas: list[int] | None, partition: int = 0, name: str = t,
              version: int = 0) -> dict[str, Any]:
        fields: dict[str, Any] = {"timeout": 30000, "topics": [{"name": name, "partitions": [
            {"partition_index": partition, "replicas": replicas}]}]}
        if version >= 1:
            fields["allow_replication_factor_change"] = True
        return s.call(45, version, fields)

    s.record("to the broker", alter([broker]))
    s.record("to the broker v1", alter([broker], version=1))
    s.record("unknown broker", alter([broker + 100]))
    s.record("two replicas", alter([broker, broker + 100]))
    s.record("duplicate replicas", alter([broker, broker]))
    s.record("empty replicas", alter([]))
    s.record("cancel none", alter(None))
    s.record("unknown partition", alter([broker], partition=9))
    s.record("unknown topic", alter([broker], name=s.name("none")))
    s.record("list one", s.call(46, 0, {"timeout": 30000, "topics": [
        {"name": t, "partition_indexes": [0, 1]}]}))
    s.record("list all", s.call(46, 0, {"timeout": 30000, "topics": None}))
    s.record("list unknown", s.call(46, 0, {"timeout": 30000, "topics": [
        {"name": s.name("none"), "partition_indexes": [0]}]}))


@case("admin.alter_replica_log_dirs")
def alter_replica_log_dirs(s: Session) -> None:
    """A move to the directory the replica already is in, to an unknown directory, of an
    unknown partition."""
    t = s.name("t")
    create_topic(s, t, partitions=1)
    dirs = s.call(35, 4, {"topics": [{"topic": t, "partitions": [0]}]})
    path = dirs["results"][0]["log_dir"]
    for v in (1, 2):
        s.record(f"same dir v{v}", s.call(34, v, {"dirs": [{"path": path, "topics": [
            {"name": t, "partitions": [0]}]}]}))
    s.record("unknown dir", s.call(34, 2, {"dirs": [{"path": "/no/such/dir", "topics": [
        {"name": t, "partitions": [0]}]}]}))
    s.record("unknown partition", s.call(34, 2, {"dirs": [{"path": path, "topics": [
        {"name": t, "partitions": [7]}, {"name": s.name("none"), "partitions": [0]}]}]}))


@case("admin.list_config_resources")
def list_config_resources(s: Session) -> None:
    """KIP-1142: v0 (client metrics only), v1 with each resource type; this case's topic."""
    t = s.name("t")
    create_topic(s, t)
    s.record("v0", s.call(74, 0, {}))

    def listed(types: list[int]) -> dict[str, Any]:
        a = s.call(74, 1, {"resource_types": types})
        return {**a, "config_resources": [
            r for r in a["config_resources"]
            if r["resource_type"] != 2 or r["resource_name"].startswith(s.name(""))]}

    s.record("v1 topics", listed([2]), unordered=("config_resources",))
    s.record("v1 brokers", listed([4]), unordered=("config_resources",))
    s.record("v1 groups", listed([32]), unordered=("config_resources",))
    s.record("v1 client metrics", listed([16]))
    s.record("v1 broker logger", listed([8]))
    s.record("v1 unknown type", listed([99]))


@case("admin.describe_topic_partitions")
def describe_topic_partitions(s: Session) -> None:
    """KIP-966: topics with paging (a partition limit, the cursor it answers), an unknown
    topic, a cursor past the end."""
    a, b = s.name("a"), s.name("b")
    create_topic(s, a, partitions=3)
    create_topic(s, b, partitions=2)

    def dtp(names: list[str], limit: int = 2000, cursor: dict[str, Any] | None = None,
            ) -> dict[str, Any]:
        return s.call(75, 0, {"topics": [{"name": n} for n in names],
                              "response_partition_limit": limit, "cursor": cursor})

    s.record("both", dtp([a, b]))
    s.record("limit 2", dtp([a, b], 2))
    s.record("cursor a:2 limit 2", dtp([a, b], 2, {"topic_name": a, "partition_index": 2}))
    s.record("cursor b:1", dtp([a, b], 5, {"topic_name": b, "partition_index": 1}))
    s.record("cursor past end", dtp([a], 5, {"topic_name": a, "partition_index": 9}))
    s.record("unknown", dtp([s.name("none")]))
    s.record("unknown and known", dtp([s.name("none"), a], 1))
    s.record("limit 0", dtp([a], 0))
    s.record("limit 3 ends a topic", dtp([a, b], 3))
    s.record("cursor not asked", dtp([a], 5, {"topic_name": b, "partition_index": 0}))
    s.record("invalid name", dtp(["bad/name"]))
    s.record("internal unknown", dtp(["__share_group_state"]))


DIVERGENCES: list[Divergence] = []
