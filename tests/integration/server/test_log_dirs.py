"""DescribeLogDirs (KIP-113, issue 17) on the wire, every version: one log directory (the broker's data
directory) holding every partition, each with its size on disk and offset lag 0, and from v4 the
volume's total and usable bytes."""

from __future__ import annotations

import shutil
from importlib import import_module
from typing import Any

from exactly.protocol.apis import SUPPORTED, ApiKey
from exactly.protocol.errors import ErrorCode
from tests.rawclient import RawConnection
from tests.support import create_topic, produce_confluent


def _describe(conn: RawConnection, version: int, topics: dict[str, tuple[int, ...]] | None) -> Any:
    schema = import_module(f"kio.schema.describe_log_dirs.v{version}.request")
    wanted = None if topics is None else tuple(
        schema.DescribableLogDirTopic(topic=name, partitions=parts) for name, parts in topics.items())
    return conn.request(ApiKey.DESCRIBE_LOG_DIRS, version, topics=wanted)


def test_one_log_dir_with_every_partition_and_its_size(broker) -> None:
    create_topic(broker.bootstrap, "sized", partitions=2)
    produce_confluent(broker.bootstrap, "sized", [b"x" * 1000] * 20, keys=[b"k"] * 20)
    host, port = broker.bootstrap.split(":")
    low, high = SUPPORTED[ApiKey.DESCRIBE_LOG_DIRS]
    for version in range(low, high + 1):
        conn = RawConnection(host, int(port))
        try:
            everything = _describe(conn, version, None)
            some = _describe(conn, version, {"sized": (0, 1, 9), "nope": (0,)})
        finally:
            conn.close()
        _check(broker, version, everything, some)


def _check(broker: Any, version: int, everything: Any, some: Any) -> None:
    assert getattr(everything, "error_code", ErrorCode.none) == ErrorCode.none
    (result,) = everything.results
    assert result.error_code == ErrorCode.none
    assert result.log_dir.startswith(str(broker.data_dir.resolve()))
    topics = {t.name: {p.partition_index: p for p in t.partitions} for t in result.topics}
    assert "__consumer_offsets" in topics and set(topics["sized"]) == {0, 1}
    sizes = [p.partition_size for p in topics["sized"].values()]
    # One key: all 20 records in one partition, the other empty.
    assert min(sizes) == 0 and max(sizes) > 20_000
    assert all(p.offset_lag == 0 and not p.is_future_key for p in topics["sized"].values())
    if version >= 4:
        usage = shutil.disk_usage(broker.data_dir)
        assert result.total_bytes == usage.total and 0 < result.usable_bytes <= usage.total
    # Asked for: only what exists (no partition 9, no topic "nope").
    (asked,) = some.results
    assert [(t.name, sorted(p.partition_index for p in t.partitions))
            for t in asked.topics] == [("sized", [0, 1])]
