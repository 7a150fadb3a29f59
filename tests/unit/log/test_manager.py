from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from exactly.log import ConfigEntry, LogConfig, LogManager, TopicInfo
from exactly.log.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tests.helpers.log.log_helpers import FakeClock, batch, offsets_of


@pytest.fixture
def manager(tmp_path: Path):
    managers: list[LogManager] = []

    def _open(config: LogConfig | None = None) -> LogManager:
        m = LogManager(tmp_path / "data", config or LogConfig(), clock=FakeClock())
        managers.append(m)
        return m

    yield _open
    for m in managers:
        m.close()


def test_create_topic_and_write(manager, tmp_path):
    m = manager()
    info = m.create_topic("orders", 3)
    assert isinstance(info, TopicInfo) and isinstance(info.topic_id, uuid.UUID)
    assert (info.name, info.num_partitions, info.configs, info.internal) == ("orders", 3, {}, False)
    for p in range(3):
        assert (tmp_path / "data" / f"orders-{p}").is_dir()
    plog = m.get_log("orders", 2)
    assert (plog.topic, plog.partition) == ("orders", 2)
    plog.append(batch(2))
    assert m.topic("orders") is info
    assert m.topic_by_id(info.topic_id) is info
    assert [t.name for t in m.topics()] == ["orders"]
    with pytest.raises(UnknownTopicOrPartitionError) as exc:
        m.get_log("orders", 3)
    assert exc.value.error_code == ErrorCode.unknown_topic_or_partition
    with pytest.raises(UnknownTopicOrPartitionError):
        m.get_log("nope", 0)


def test_topics_survive_reopen(manager):
    m = manager()
    a = m.create_topic("a.b-c_d", 2, {"retention.ms": "1000", "cleanup.policy": "compact"})
    b = m.create_topic("__consumer_offsets", 1, internal=True)
    m.get_log("a.b-c_d", 1).append(batch(3))
    m.close()
    m = manager()
    assert {t.name for t in m.topics()} == {"a.b-c_d", "__consumer_offsets"}
    a2 = m.topic("a.b-c_d")
    assert a2 is not None
    assert (a2.topic_id, a2.num_partitions, a2.configs) == (a.topic_id, 2, a.configs)
    b2 = m.topic("__consumer_offsets")
    assert b2 is not None and b2.internal and b2.topic_id == b.topic_id
    plog = m.get_log("a.b-c_d", 1)
    assert plog.log_end_offset == 3 and offsets_of(plog.read(0, 1000)) == [0, 1, 2]
    assert plog.config.retention_ms == 1000 and plog.config.cleanup_policy == "compact"


def test_duplicate_topic(manager):
    m = manager()
    m.create_topic("t", 1)
    with pytest.raises(TopicAlreadyExistsError) as exc:
        m.create_topic("t", 1)
    assert exc.value.error_code == ErrorCode.topic_already_exists
    m.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        m.create_topic("a_b", 1)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/", "ümlaut", "a:b"])
def test_invalid_topic_names(manager, name):
    m = manager()
    with pytest.raises(InvalidTopicError) as exc:
        m.create_topic(name, 1)
    assert exc.value.error_code == ErrorCode.invalid_topic_exception
    assert m.topics() == []


def test_longest_legal_name(manager):
    m = manager()
    m.create_topic("x" * 249, 1)


@pytest.mark.parametrize("count", [0, -2, 10_001])
def test_invalid_partition_counts(manager, count):
    m = manager()
    with pytest.raises(InvalidPartitionsError) as exc:
        m.create_topic("t", count)
    assert exc.value.error_code == ErrorCode.invalid_partitions


def test_default_partition_count(tmp_path):
    m = LogManager(tmp_path / "d", LogConfig(), default_partitions=4)
    assert m.create_topic("t", -1).num_partitions == 4
    m.close()


@pytest.mark.parametrize("configs, key", [
    ({"retention.ms": "soon"}, "retention.ms"),
    ({"segment.bytes": "1"}, "segment.bytes"),
    ({"cleanup.policy": "shred"}, "cleanup.policy"),
    ({"min.insync.replicas": "0"}, "min.insync.replicas"),
    ({"no.such.key": "1"}, "no.such.key"),
    ({"preallocate": "yes"}, "preallocate"),
    ({"max.message.bytes": str(2**31)}, "max.message.bytes"),
])
def test_invalid_configs(manager, tmp_path, configs, key):
    m = manager()
    with pytest.raises(InvalidConfigError) as exc:
        m.create_topic("t", 1, configs)
    assert exc.value.error_code == ErrorCode.invalid_config
    assert key in str(exc.value)
    assert m.topic("t") is None
    assert not (tmp_path / "data" / "t-0").exists()


def test_validate_only_creates_nothing(manager, tmp_path):
    m = manager()
    info = m.create_topic("t", 2, {"retention.ms": "5"}, validate_only=True)
    assert info.num_partitions == 2
    assert m.topic("t") is None and not (tmp_path / "data" / "t-0").exists()


def test_delete_topic(manager, tmp_path):
    m = manager()
    info = m.create_topic("gone", 2)
    m.get_log("gone", 0).append(batch(1))
    assert m.delete_topic("gone") is info
    assert m.topic("gone") is None and m.topic_by_id(info.topic_id) is None
    assert not (tmp_path / "data" / "gone-0").exists()
    assert not (tmp_path / "data" / "gone-1").exists()
    with pytest.raises(UnknownTopicOrPartitionError):
        m.delete_topic("gone")
    m.close()
    m = manager()
    assert m.topics() == []
    again = m.create_topic("gone", 1)
    assert again.topic_id != info.topic_id
    assert m.get_log("gone", 0).log_end_offset == 0


def test_create_partitions(manager, tmp_path):
    m = manager()
    m.create_topic("t", 2)
    with pytest.raises(InvalidPartitionsError):
        m.create_partitions("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        m.create_partitions("nope", 5)
    m.create_partitions("t", 4, validate_only=True)
    assert m.topic("t").num_partitions == 2
    m.create_partitions("t", 4)
    assert m.get_log("t", 3).log_end_offset == 0
    m.close()
    m = manager()
    assert m.topic("t").num_partitions == 4
    m.get_log("t", 3)


def test_orphan_partition_dirs_removed(manager, tmp_path):
    m = manager()
    m.create_topic("t", 1)
    m.close()
    orphan = tmp_path / "data" / "ghost-0"
    orphan.mkdir()
    extra = tmp_path / "data" / "t-5"
    extra.mkdir()
    m = manager()
    assert not orphan.exists() and not extra.exists()
    assert (tmp_path / "data" / "t-0").exists()


def test_missing_metadata_with_data_refuses_to_start(manager, tmp_path):
    m = manager()
    m.create_topic("t", 1)
    m.close()
    (tmp_path / "data" / "topics.json").unlink()
    with pytest.raises(StorageError):
        manager()
    assert (tmp_path / "data" / "t-0").exists()


def test_metadata_file_is_json(manager, tmp_path):
    m = manager()
    m.create_topic("t", 1, {"segment.ms": "1000"})
    doc = json.loads((tmp_path / "data" / "topics.json").read_text())
    assert doc["topics"][0]["configs"] == {"segment.ms": "1000"}
    assert not (tmp_path / "data" / "topics.json.tmp").exists()


def test_describe_and_alter_configs(manager):
    m = manager(LogConfig(retention_ms=123))
    m.create_topic("t", 2, {"segment.bytes": "2048"})
    entries = {e.name: e for e in m.describe_topic_configs("t")}
    for key in ("cleanup.policy", "compression.type", "segment.bytes", "segment.ms", "retention.ms",
                "retention.bytes", "max.message.bytes", "index.interval.bytes",
                "segment.index.bytes", "message.timestamp.type", "min.insync.replicas"):
        assert key in entries
    assert entries["segment.bytes"] == ConfigEntry("segment.bytes", "2048", "TOPIC_CONFIG", False, False)
    assert entries["retention.ms"] == ConfigEntry("retention.ms", "123", "DEFAULT_CONFIG", False, False)
    assert entries["cleanup.policy"].value == "delete"

    m.alter_topic_configs("t", {"retention.ms": "5000", "message.timestamp.type": "LogAppendTime"},
                          ["segment.bytes"])
    entries = {e.name: e for e in m.describe_topic_configs("t")}
    assert entries["retention.ms"].value == "5000" and entries["retention.ms"].source == "TOPIC_CONFIG"
    assert entries["segment.bytes"].source == "DEFAULT_CONFIG"
    assert entries["segment.bytes"].value == str(LogConfig().segment_bytes)
    for p in range(2):
        cfg = m.get_log("t", p).config
        assert cfg.retention_ms == 5000 and cfg.message_timestamp_type == "LogAppendTime"
        assert cfg.segment_bytes == LogConfig().segment_bytes
    assert m.log_config("t").retention_ms == 5000

    with pytest.raises(InvalidConfigError, match="retention.bytes"):
        m.alter_topic_configs("t", {"retention.bytes": "-5"}, [])
    with pytest.raises(InvalidConfigError, match="bogus"):
        m.alter_topic_configs("t", {}, ["bogus"])
    m.alter_topic_configs("t", {"retention.ms": "1"}, [], validate_only=True)
    assert m.topic("t").configs["retention.ms"] == "5000"
    m.close()
    m = manager(LogConfig(retention_ms=123))
    assert m.topic("t").configs == {"retention.ms": "5000", "message.timestamp.type": "LogAppendTime"}
    assert m.get_log("t", 1).config.retention_ms == 5000


def test_manager_retention_and_flush(manager):
    m = manager(LogConfig(segment_bytes=300))
    m.create_topic("t", 1, {"retention.bytes": "0"})
    plog = m.get_log("t", 0)
    for _ in range(4):
        plog.append(batch(1, value_size=150))
    m.flush_all()
    assert plog.flushed_offset == 4
    assert m.apply_retention(0) == 3
    assert plog.log_start_offset == 3
