"""The admin APIs of issue 17 with unchanged confluent-kafka (librdkafka) clients over TCP:
`delete_records` then a consumer from the beginning starts at the new low watermark, also after
kill -9; the legacy `alter_configs` replaces a topic's overrides; `elect_leaders` answers as a
single-replica cluster (ELECTION_NOT_NEEDED); DescribeQuorum, which librdkafka does not send,
on the raw wire: this node the only voter and the leader; and kafka-python's `describe_log_dirs`."""

from __future__ import annotations

import datetime
from importlib import import_module

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from exactly.protocol.apis import SUPPORTED, ApiKey
from exactly.protocol.errors import ErrorCode
from tests.rawclient import RawConnection
from tests.support import consume_confluent, create_topic, end_offsets, produce_confluent


def _low_watermark(bootstrap: str, topic: str, offset: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0, offset)
    return int(admin.delete_records([tp])[tp].result(timeout=20).low_watermark)


@pytest.mark.broker_settings({"group.initial.rebalance.delay.ms": "0"})
def test_delete_records_moves_where_consumers_start_also_after_kill_9(broker) -> None:
    create_topic(broker.bootstrap, "trimmed")
    produce_confluent(broker.bootstrap, "trimmed", [f"v{i}".encode() for i in range(30)])
    assert _low_watermark(broker.bootstrap, "trimmed", 10) == 10
    first = consume_confluent(broker.bootstrap, "trimmed", 20, timeout=30)
    assert [m.offset() for m in first] == list(range(10, 30))
    assert first[0].value() == b"v10"

    broker.restart()  # kill -9
    again = consume_confluent(broker.bootstrap, "trimmed", 20, timeout=30)
    assert [m.offset() for m in again] == list(range(10, 30))
    # OFFSET_END (-1): everything below the high watermark.
    assert _low_watermark(broker.bootstrap, "trimmed", -1) == end_offsets(broker.bootstrap,
                                                                          "trimmed", 1)[0] == 30


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_configs_replaces_the_topic_overrides(broker) -> None:
    create_topic(broker.bootstrap, "legacy", config={"retention.ms": "600000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, "legacy",
                              set_config={"segment.bytes": "1048576"})
    admin.alter_configs([resource])[resource].result(timeout=20)
    described = ConfigResource(ResourceType.TOPIC, "legacy")
    entries = admin.describe_configs([described])[described].result(timeout=20)
    assert (entries["segment.bytes"].value, entries["segment.bytes"].is_default) == ("1048576", False)
    # Not named: back to the default, as Kafka's AlterConfigs does.
    assert entries["retention.ms"].is_default
    # Every version on the raw wire, and an unknown topic.
    host, port = broker.bootstrap.split(":")
    low, high = SUPPORTED[ApiKey.ALTER_CONFIGS]
    for version in range(low, high + 1):
        schema = import_module(f"kio.schema.alter_configs.v{version}.request")
        conn = RawConnection(host, int(port))
        try:
            raw = conn.request(ApiKey.ALTER_CONFIGS, version, validate_only=False, resources=tuple(
                schema.AlterConfigsResource(resource_type=2, resource_name=name, configs=(
                    schema.AlterableConfig(name="retention.ms", value=str(1000 + version)),))
                for name in ("legacy", "missing")))
        finally:
            conn.close()
        assert [r.error_code for r in raw.responses] == [ErrorCode.none,
                                                         ErrorCode.unknown_topic_or_partition]
        entries = admin.describe_configs([described])[described].result(timeout=20)
        assert entries["retention.ms"].value == str(1000 + version)
        assert entries["segment.bytes"].is_default


def test_single_node_answers_to_elect_leaders_and_describe_quorum(broker) -> None:
    create_topic(broker.bootstrap, "elected", partitions=2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    asked = [TopicPartition("elected", 0), TopicPartition("elected", 1)]
    results = admin.elect_leaders(ElectionType.PREFERRED, asked).result(timeout=20)
    assert {(tp.topic, tp.partition) for tp in results} == {("elected", 0), ("elected", 1)}
    assert all(err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED
               for err in results.values())
    # All partitions (null): only those where an election ran are listed, none here.
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=20) == {}

    host, port = broker.bootstrap.split(":")
    low, high = SUPPORTED[ApiKey.ELECT_LEADERS]
    for version in range(low, high + 1):  # every version, on the raw wire
        schema = import_module(f"kio.schema.elect_leaders.v{version}.request")
        conn = RawConnection(host, int(port))
        try:
            raw = conn.request(ApiKey.ELECT_LEADERS, version, **({"election_type": 0} if version else {}),
                               timeout=datetime.timedelta(seconds=5),
                               topic_partitions=(schema.TopicPartitions(topic="elected",
                                                                        partitions=(0, 5)),))
        finally:
            conn.close()
        assert [(r.partition_id, r.error_code) for r in raw.replica_election_results[0].partition_result] \
            == [(0, ErrorCode.election_not_needed), (5, ErrorCode.unknown_topic_or_partition)]

    # DescribeQuorum: this node is the only voter of the metadata quorum, and its leader.
    low, high = SUPPORTED[ApiKey.DESCRIBE_QUORUM]
    for version in range(low, high + 1):
        schema = import_module(f"kio.schema.describe_quorum.v{version}.request")
        conn = RawConnection(host, int(port))
        try:
            answer = conn.request(ApiKey.DESCRIBE_QUORUM, version, topics=(schema.TopicData(
                topic_name="__cluster_metadata",
                partitions=(schema.PartitionData(partition_index=0),)),))
            wrong = conn.request(ApiKey.DESCRIBE_QUORUM, version, topics=(schema.TopicData(
                topic_name="orders", partitions=(schema.PartitionData(partition_index=0),)),))
        finally:
            conn.close()
        assert answer.error_code == ErrorCode.none
        (partition,) = answer.topics[0].partitions
        assert partition.error_code == ErrorCode.none and partition.leader_id == 1
        assert [v.replica_id for v in partition.current_voters] == [1] and not partition.observers
        assert partition.current_voters[0].log_end_offset == partition.high_watermark >= 0
        if version >= 2:
            assert [n.node_id for n in answer.nodes] == [1]
            assert answer.nodes[0].listeners[0].port == int(port)
        # As Apache Kafka 4.4: the request is answered, the partition is not the quorum's.
        assert wrong.error_code == ErrorCode.none
        assert wrong.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_describe_log_dirs_with_kafka_python(broker) -> None:
    """confluent-kafka's Python AdminClient has no describe_log_dirs; kafka-python's has."""
    from kafka import KafkaAdminClient

    create_topic(broker.bootstrap, "sized-kp", partitions=2)
    produce_confluent(broker.bootstrap, "sized-kp", [b"x" * 1000] * 20)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    (log_dir,) = answer["log_dirs"]  # one: the data directory
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == str(broker.data_dir)
    sizes = {(t["name"], p["partition_index"]): (p["partition_size"], p["offset_lag"])
             for t in log_dir["topics"] for p in t["partitions"]}
    assert sizes[("sized-kp", 0)][0] + sizes[("sized-kp", 1)][0] > 20 * 1000  # the records
    assert {lag for _, lag in sizes.values()} == {0}
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
