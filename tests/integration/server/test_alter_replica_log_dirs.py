"""AlterReplicaLogDirs (KIP-113) as Kafka 4.4 answers it on one node with one log directory:
a move to that directory is done already, any other is LOG_DIR_NOT_FOUND."""

from __future__ import annotations

from typing import Any

from exactly.protocol.apis import SUPPORTED, ApiKey
from exactly.protocol.errors import ErrorCode
from tests.helpers.conformance.harness import Connection, Target
from tests.support import create_topic


def _move(conn: Connection, path: str, topics: dict[str, list[int]],
          version: int = 2) -> dict[tuple[str, int], int]:
    answer: dict[str, Any] = conn.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, {"dirs": [{
        "path": path, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]})
    return {(t["topic_name"], p["partition_index"]): p["error_code"]
            for t in answer["results"] for p in t["partitions"]}


def test_advertised() -> None:
    assert SUPPORTED[ApiKey.ALTER_REPLICA_LOG_DIRS] == (1, 2)


def test_moves_on_one_log_dir(broker) -> None:
    create_topic(broker.bootstrap, "dirs", partitions=2)
    conn = Connection(Target("exactly", broker.host, broker.port))
    try:
        log_dir = conn.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})["results"][0]["log_dir"]
        for version in (1, 2):
            assert _move(conn, log_dir, {"dirs": [0, 1]}, version) == {
                ("dirs", 0): ErrorCode.none, ("dirs", 1): ErrorCode.none}
        assert _move(conn, "/no/such/dir", {"dirs": [0]}) == {
            ("dirs", 0): ErrorCode.log_dir_not_found}
        assert _move(conn, log_dir, {"dirs": [7], "nope": [0]}) == {
            ("dirs", 7): ErrorCode.unknown_topic_or_partition,
            ("nope", 0): ErrorCode.unknown_topic_or_partition}
    finally:
        conn.close()
