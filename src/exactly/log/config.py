"""Settings of one partition log. Broker-level `log.*` keys give the defaults, topic-level keys
(`segment.bytes`, `retention.ms`, ...) override them per topic.

The broker-level keys are declared here (`LOG_DIRS_KEY`, `LOG_KEYS`), as Kafka's
`ServerLogConfigs` declares them; exactly/server/config.py gathers them into the broker's config.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exactly.configdef import (
    HOUR_MS,
    LONG_MAX,
    MINUTE_MS,
    Key,
    int_range,
    long_range,
    one_of,
    parse_bool,
    split_list,
)

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
    # Compaction (log/cleaner.py); broker keys log.cleaner.*, topic keys in parentheses.
    min_cleanable_dirty_ratio: float = 0.5  # (min.cleanable.dirty.ratio)
    min_compaction_lag_ms: int = 0  # (min.compaction.lag.ms)
    max_compaction_lag_ms: int = LONG_MAX  # (max.compaction.lag.ms)
    delete_retention_ms: int = 24 * 3600 * 1000  # (delete.retention.ms): tombstones and markers


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log cleaner (log.cleaner.*): one thread, as Kafka's default."""

    enable: bool = True  # log.cleaner.enable
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms: sleep when no log needs cleaning
    io_max_bytes_per_second: float = sys.float_info.max  # log.cleaner.io.max.bytes.per.second


# -- the broker's keys -------------------------------------------------------------------------

def _parse_dirs(text: str) -> tuple[str, ...]:
    dirs = split_list(text)
    if not dirs:
        raise ValueError("must name at least one directory")
    return dirs


# The data directory of the whole broker (logs, meta.properties, ACLs, SCRAM credentials).
LOG_DIRS_KEY = Key(
    "log.dirs",
    "LIST",
    "./data",
    _parse_dirs,
    "The data directory (comma list accepted; the first is used). Alias: log.dir.",
    ("log.dir",),
)

def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("must be a number from 0 to 1") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be a number from 0 to 1")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("must be a positive number of bytes per second") from None
    if not value > 0:
        raise ValueError("must be a positive number of bytes per second")
    return value


CLEANER_KEYS: tuple[Key, ...] = (
    Key("log.cleaner.enable", "BOOLEAN", True, parse_bool,
        "Run the log cleaner, which compacts logs with cleanup.policy=compact."),
    Key("log.cleaner.backoff.ms", "LONG", 15000, long_range(0),
        "How long the cleaner sleeps when no log needs cleaning."),
    Key("log.cleaner.io.max.bytes.per.second", "DOUBLE", sys.float_info.max, _rate,
        "The cleaner reads and writes at most this many bytes per second."),
    Key("log.cleaner.min.cleanable.ratio", "DOUBLE", 0.5, _ratio,
        "Default min.cleanable.dirty.ratio: the share of a log not yet cleaned above which it "
        "is cleaned."),
    Key("log.cleaner.min.compaction.lag.ms", "LONG", 0, long_range(0),
        "Default min.compaction.lag.ms: a record stays uncompacted at least this long."),
    Key("log.cleaner.max.compaction.lag.ms", "LONG", LONG_MAX, long_range(1),
        "Default max.compaction.lag.ms: a record is compacted at most this long after it was "
        "written, whatever the dirty ratio (once its segment rolled)."),
    Key("log.cleaner.delete.retention.ms", "LONG", 86400000, long_range(0),
        "Default delete.retention.ms: how long tombstones and transaction markers are kept "
        "after the records they delete or end are gone."),
)

LOG_KEYS: tuple[Key, ...] = (
    Key(
        "log.segment.bytes",
        "INT",
        1073741824,
        int_range(14),
        "Size at which a segment is rolled.",
    ),
    Key(
        "log.roll.ms",
        "LONG",
        None,
        long_range(1),
        "Age at which a segment is rolled; default log.roll.hours.",
    ),
    Key("log.roll.hours", "INT", 168, int_range(1), "Age at which a segment is rolled, in hours."),
    Key(
        "log.retention.ms",
        "LONG",
        None,
        long_range(-1),
        "How long to keep a segment (-1: forever). Wins over log.retention.minutes and .hours.",
    ),
    Key(
        "log.retention.minutes",
        "INT",
        None,
        int_range(-1),
        "How long to keep a segment, in minutes. Wins over log.retention.hours.",
    ),
    Key("log.retention.hours", "INT", 168, int_range(-1), "How long to keep a segment, in hours."),
    Key(
        "log.retention.bytes",
        "LONG",
        -1,
        long_range(-1),
        "Size above which a partition's oldest segments are deleted (-1: no limit).",
    ),
    Key(
        "log.retention.check.interval.ms",
        "LONG",
        300000,
        long_range(1),
        "How often retention is applied.",
    ),
    Key(
        "log.index.interval.bytes",
        "INT",
        4096,
        int_range(0),
        "Bytes between two entries of the offset index.",
    ),
    Key(
        "log.index.size.max.bytes", "INT", 10485760, int_range(4), "Maximum size of an index file."
    ),
    Key("message.max.bytes", "INT", 1048588, int_range(0), "Largest record batch accepted."),
    Key(
        "log.flush.policy",
        "STRING",
        "fsync",
        one_of(FLUSH_POLICIES),
        "Exactly's own key. fsync: a write is acknowledged once it is on disk (survives a power "
        "cut); os: once the OS has it (survives a crash of the broker, not of the machine).",
    ),
    Key(
        "log.flush.offset.checkpoint.interval.ms",
        "INT",
        60000,
        int_range(1),
        "How often the recovery point of every partition (how far its log is fsynced) is written "
        "to recovery-point-offset-checkpoint; after a crash only the log after it is validated.",
    ),
)


def retention_ms(values: Mapping[str, Any]) -> int:
    """The retention in force, after Kafka's log.retention.ms > .minutes > .hours precedence."""
    if values["log.retention.ms"] is not None:
        ms: int = values["log.retention.ms"]
        return ms
    if values["log.retention.minutes"] is not None:
        minutes: int = values["log.retention.minutes"]
        return -1 if minutes < 0 else minutes * MINUTE_MS
    hours: int = values["log.retention.hours"]
    return -1 if hours < 0 else hours * HOUR_MS


def roll_ms(values: Mapping[str, Any]) -> int:
    """The segment age in force, after Kafka's log.roll.ms > log.roll.hours precedence."""
    ms = values["log.roll.ms"]
    if ms is not None:
        return int(ms)
    return int(values["log.roll.hours"]) * HOUR_MS


def log_config(values: Mapping[str, Any]) -> LogConfig:
    """The broker-wide LogConfig from the typed values of the keys above."""
    return LogConfig(
        segment_bytes=values["log.segment.bytes"],
        segment_ms=roll_ms(values),
        retention_ms=retention_ms(values),
        retention_bytes=values["log.retention.bytes"],
        index_interval_bytes=values["log.index.interval.bytes"],
        segment_index_bytes=values["log.index.size.max.bytes"],
        max_message_bytes=values["message.max.bytes"],
        flush_policy=values["log.flush.policy"],
        min_cleanable_dirty_ratio=values["log.cleaner.min.cleanable.ratio"],
        min_compaction_lag_ms=values["log.cleaner.min.compaction.lag.ms"],
        max_compaction_lag_ms=values["log.cleaner.max.compaction.lag.ms"],
        delete_retention_ms=values["log.cleaner.delete.retention.ms"],
    )


def cleaner_config(values: Mapping[str, Any]) -> CleanerConfig:
    return CleanerConfig(enable=values["log.cleaner.enable"],
                         backoff_ms=values["log.cleaner.backoff.ms"],
                         io_max_bytes_per_second=values["log.cleaner.io.max.bytes.per.second"])
