"""ListConfigResources (KIP-1142) as Kafka 4.4 answers it on one node: v0 lists client metrics
resources only (none here), v1 the resources of the types asked for (none: every type)."""

from __future__ import annotations

from typing import Any

from exactly.protocol.apis import SUPPORTED, ApiKey
from exactly.protocol.errors import ErrorCode
from tests.helpers.conformance.harness import Connection, Target
from tests.support import create_topic

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


def _list(conn: Connection, types: list[int]) -> dict[str, Any]:
    return conn.call(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": types})


def test_advertised() -> None:
    assert SUPPORTED[ApiKey.LIST_CONFIG_RESOURCES] == (0, 1)


def test_resources_by_type(broker) -> None:
    create_topic(broker.bootstrap, "listed")
    conn = Connection(Target("exactly", broker.host, broker.port))
    try:
        node = str(conn.call(ApiKey.DESCRIBE_CLUSTER, 0, {
            "include_cluster_authorized_operations": False})["brokers"][0]["broker_id"])
        v0 = conn.call(ApiKey.LIST_CONFIG_RESOURCES, 0, {})
        assert (v0["error_code"], v0["config_resources"]) == (ErrorCode.none, [])
        topics = _list(conn, [TOPIC])["config_resources"]
        assert {"resource_name": "listed", "resource_type": TOPIC} in topics
        assert _list(conn, [BROKER])["config_resources"] == [
            {"resource_name": node, "resource_type": BROKER}]
        assert _list(conn, [BROKER_LOGGER])["config_resources"] == [
            {"resource_name": node, "resource_type": BROKER_LOGGER}]
        assert _list(conn, [GROUP, CLIENT_METRICS])["config_resources"] == []
        every = {(r["resource_name"], r["resource_type"])
                 for r in _list(conn, [])["config_resources"]}
        assert {(node, BROKER), (node, BROKER_LOGGER), ("listed", TOPIC)} <= every
        unknown = _list(conn, [99])
        assert (unknown["error_code"], unknown["config_resources"]) == (
            ErrorCode.unsupported_version, [])
    finally:
        conn.close()
