"""DescribeTopicPartitions (KIP-966) as Kafka 4.4 answers it on one node: librdkafka's
describe_topics uses it, and its paging (response_partition_limit, cursor) is Kafka's."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, TopicCollection
from confluent_kafka.admin import AdminClient

from exactly.protocol.apis import SUPPORTED, ApiKey
from exactly.protocol.errors import ErrorCode
from tests.helpers.conformance.harness import Connection, Target
from tests.support import create_topic


def _dtp(conn: Connection, names: list[str], limit: int = 2000,
         cursor: dict[str, Any] | None = None) -> dict[str, Any]:
    return conn.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": n} for n in names], "response_partition_limit": limit,
        "cursor": cursor})


def test_advertised() -> None:
    assert SUPPORTED[ApiKey.DESCRIBE_TOPIC_PARTITIONS] == (0, 0)


def test_admin_client_describe_topics(broker) -> None:
    create_topic(broker.bootstrap, "dtp-three", partitions=3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.describe_topics(TopicCollection(["dtp-three", "dtp-none"]))
    described = futures["dtp-three"].result(timeout=20)
    assert described.name == "dtp-three" and not described.is_internal
    assert [p.id for p in described.partitions] == [0, 1, 2]
    assert all(p.leader is not None and len(p.replicas) == 1 for p in described.partitions)
    error = futures["dtp-none"].exception(timeout=20)
    assert error is not None
    assert error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_paging_with_a_cursor(broker) -> None:
    create_topic(broker.bootstrap, "page-a", partitions=3)
    create_topic(broker.bootstrap, "page-b", partitions=2)
    conn = Connection(Target("exactly", broker.host, broker.port))
    try:
        first = _dtp(conn, ["page-b", "page-a"], limit=2)
        # Topics in name order; the cursor names the first partition left out.
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in first["topics"]] == [("page-a", [0, 1])]
        assert first["next_cursor"] == {"topic_name": "page-a", "partition_index": 2}
        second = _dtp(conn, ["page-a", "page-b"], limit=2, cursor=first["next_cursor"])
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in second["topics"]] == [("page-a", [2]), ("page-b", [0])]
        assert second["next_cursor"] == {"topic_name": "page-b", "partition_index": 1}
        last = _dtp(conn, ["page-a", "page-b"], limit=2, cursor=second["next_cursor"])
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in last["topics"]] == [("page-b", [1])]
        assert last["next_cursor"] is None
        # A limit that ends a topic exactly: the cursor is the next topic's first partition.
        assert _dtp(conn, ["page-a", "page-b"], limit=3)["next_cursor"] == {
            "topic_name": "page-b", "partition_index": 0}
        # A limit below 1 is 1, as Kafka clamps it.
        assert len(_dtp(conn, ["page-a"], limit=0)["topics"][0]["partitions"]) == 1
        # A cursor on a topic not asked for makes every topic INVALID_REQUEST.
        bad = _dtp(conn, ["page-a"], cursor={"topic_name": "page-b", "partition_index": 0})
        assert [t["error_code"] for t in bad["topics"]] == [ErrorCode.invalid_request]
        unknown = _dtp(conn, ["page-none", "bad/name"])
        assert {t["name"]: t["error_code"] for t in unknown["topics"]} == {
            "page-none": ErrorCode.unknown_topic_or_partition,
            "bad/name": ErrorCode.invalid_topic_exception}
        # Every topic (none named) includes the internal ones.
        every = _dtp(conn, [])
        names = [t["name"] for t in every["topics"]]
        assert names == sorted(names) and "page-a" in names and "__consumer_offsets" in names
    finally:
        conn.close()
