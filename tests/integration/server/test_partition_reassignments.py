"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455) as Kafka 4.4 answers
them on one node: the only assignment is [this broker], already in place; nothing is ever being
reassigned."""

from __future__ import annotations

from typing import Any

from exactly.protocol.apis import SUPPORTED, ApiKey
from exactly.protocol.errors import ErrorCode
from tests.helpers.conformance.harness import Connection, Target
from tests.support import create_topic


def _alter(conn: Connection, topic: str, partition: int, replicas: list[int] | None,
           version: int = 0) -> dict[str, Any]:
    fields: dict[str, Any] = {"timeout": 30000, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "replicas": replicas}]}]}
    if version >= 1:
        fields["allow_replication_factor_change"] = False
    return conn.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, fields)


def _error(answer: dict[str, Any]) -> tuple[int, bool]:
    p = answer["responses"][0]["partitions"][0]
    return p["error_code"], p["error_message"] is not None


def test_advertised() -> None:
    assert SUPPORTED[ApiKey.ALTER_PARTITION_REASSIGNMENTS] == (0, 1)
    assert SUPPORTED[ApiKey.LIST_PARTITION_REASSIGNMENTS] == (0, 0)


def test_reassignments_on_one_node(broker) -> None:
    create_topic(broker.bootstrap, "moves", partitions=2)
    conn = Connection(Target("exactly", broker.host, broker.port))
    try:
        node = conn.call(ApiKey.METADATA, 12, {
            "topics": [{"name": "moves", "topic_id": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})["brokers"][0]["node_id"]
        for version in (0, 1):
            answer = _alter(conn, "moves", 0, [node], version)
            assert answer["error_code"] == ErrorCode.none
            assert _error(answer) == (ErrorCode.none, False)
        assert _error(_alter(conn, "moves", 0, [node + 1])) == (
            ErrorCode.invalid_replica_assignment, True)
        assert _error(_alter(conn, "moves", 0, [node, node])) == (
            ErrorCode.invalid_replica_assignment, True)
        assert _error(_alter(conn, "moves", 0, [])) == (ErrorCode.invalid_replica_assignment, True)
        assert _error(_alter(conn, "moves", 0, None)) == (ErrorCode.no_reassignment_in_progress,
                                                           False)
        assert _error(_alter(conn, "moves", 5, [node]))[0] == ErrorCode.unknown_topic_or_partition
        assert _error(_alter(conn, "nope", 0, [node]))[0] == ErrorCode.unknown_topic_or_partition
        listed = conn.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30000,
                                                                    "topics": None})
        assert (listed["error_code"], listed["topics"]) == (ErrorCode.none, [])
        listed = conn.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {
            "timeout": 30000, "topics": [{"name": "moves", "partition_indexes": [0, 1]}]})
        assert listed["topics"] == []
    finally:
        conn.close()
