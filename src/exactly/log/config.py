"""Settings of one partition log. Broker-level `log.*` keys give the defaults, topic-level keys
(`segment.bytes`, `retention.ms`, ...) override them per topic."""

from __future__ import annotations

from dataclasses import dataclass

FLUSH_POLICIES = ("fsync", "os")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024  # log.segment.bytes / segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # log.roll.ms / segment.ms
    retention_ms: int = 7 * 24 * 3600 * 1000  # log.retention.ms / retention.ms (-1: keep forever)
    retention_bytes: int = -1  # log.retention.bytes / retention.bytes (-1: no size limit)
    index_interval_bytes: int = 4096  # log.index.interval.bytes / index.interval.bytes
    segment_index_bytes: int = 10 * 1024 * 1024  # log.index.size.max.bytes / segment.index.bytes
    max_message_bytes: int = 1024 * 1024 + 12  # message.max.bytes / max.message.bytes
    flush_policy: str = "fsync"  # log.flush.policy: fsync | os
    cleanup_policy: str = "delete"  # log.cleanup.policy / cleanup.policy: retention runs only with "delete"
    message_timestamp_type: str = "CreateTime"  # log.message.timestamp.type / message.timestamp.type
