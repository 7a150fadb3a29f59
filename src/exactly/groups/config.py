"""Settings of the group coordinator, and the broker keys that give them (`group.*`,
`offsets.*`), declared here as Kafka's `GroupCoordinatorConfig` declares them; the broker's config
(exactly/server/config.py) gathers `GROUP_KEYS` and builds a GroupConfig with `group_config`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exactly.configdef import (
    MINUTE_MS,
    ConfigError,
    Key,
    int_range,
    long_range,
    one_of,
    split_list,
)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_segment_bytes: int = 262_144  # offsets.topic.segment.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes, in ms
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    group_max_size: int = 2**31 - 1  # group.max.size
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs (KIP-394): a new member that joined but
    # vanished before the rebalance completed is dropped after this long.
    new_member_join_timeout_ms: int = 300_000
    # KIP-848 consumer groups (Kafka's group.consumer.* keys).
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    # The bounds of the group configs consumer.session.timeout.ms / .heartbeat.interval.ms.
    consumer_min_session_timeout_ms: int = 45_000  # group.consumer.min.session.timeout.ms
    consumer_max_session_timeout_ms: int = 60_000  # group.consumer.max.session.timeout.ms
    consumer_min_heartbeat_interval_ms: int = 5_000  # group.consumer.min.heartbeat.interval.ms
    consumer_max_heartbeat_interval_ms: int = 15_000  # group.consumer.max.heartbeat.interval.ms
    consumer_max_size: int = 2**31 - 1  # group.consumer.max.size
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    consumer_migration_policy: str = "bidirectional"  # group.consumer.migration.policy


GROUP_KEYS: tuple[Key, ...] = (
    Key(
        "offsets.topic.num.partitions",
        "INT",
        50,
        int_range(1),
        "Partitions of __consumer_offsets (fixed once the topic exists).",
    ),
    Key(
        "offsets.topic.segment.bytes",
        "INT",
        262144,
        int_range(1),
        "segment.bytes of __consumer_offsets, set when the topic is created: the log cleaner "
        "compacts the segments before the active one.",
    ),
    Key(
        "offsets.retention.minutes",
        "INT",
        10080,
        int_range(1),
        "How long committed offsets of an empty group are kept.",
    ),
    Key(
        "offsets.retention.check.interval.ms",
        "LONG",
        600000,
        long_range(1),
        "How often the expired offsets of empty groups are looked for.",
    ),
    Key(
        "offsets.commit.timeout.ms",
        "INT",
        5000,
        int_range(1),
        "Accepted for compatibility with Kafka's config files; no effect: Kafka waits this long "
        "for __consumer_offsets' replicas to acknowledge a commit, and here the one replica's "
        "write is the commit.",
    ),
    Key(
        "group.initial.rebalance.delay.ms",
        "INT",
        3000,
        int_range(0),
        "How long a new group waits for more members before its first rebalance.",
    ),
    Key(
        "group.min.session.timeout.ms",
        "INT",
        6000,
        int_range(0),
        "Smallest session timeout allowed.",
    ),
    Key(
        "group.max.session.timeout.ms",
        "INT",
        1800000,
        int_range(0),
        "Largest session timeout allowed.",
    ),
    Key(
        "group.consumer.session.timeout.ms",
        "INT",
        45000,
        int_range(1),
        "Session timeout of consumer-protocol (KIP-848) members: a member that sends no "
        "heartbeat for this long is removed from its group.",
    ),
    Key(
        "group.consumer.min.session.timeout.ms",
        "INT",
        45000,
        int_range(1),
        "Smallest group.consumer.session.timeout.ms allowed.",
    ),
    Key(
        "group.consumer.max.session.timeout.ms",
        "INT",
        60000,
        int_range(1),
        "Largest group.consumer.session.timeout.ms allowed.",
    ),
    Key(
        "group.consumer.heartbeat.interval.ms",
        "INT",
        5000,
        int_range(1),
        "How often consumer-protocol members are told to heartbeat.",
    ),
    Key(
        "group.consumer.min.heartbeat.interval.ms",
        "INT",
        5000,
        int_range(1),
        "Smallest group.consumer.heartbeat.interval.ms allowed.",
    ),
    Key(
        "group.consumer.max.heartbeat.interval.ms",
        "INT",
        15000,
        int_range(1),
        "Largest group.consumer.heartbeat.interval.ms allowed.",
    ),
    Key(
        "group.consumer.max.size",
        "INT",
        2147483647,
        int_range(1),
        "Most members a consumer-protocol group may have.",
    ),
    Key(
        "group.consumer.assignors",
        "LIST",
        "uniform,range",
        lambda text: _assignors(split_list(text)),
        "Server-side assignors of consumer-protocol groups (uniform, range, or Kafka's class "
        "names of them); the first is used when a member names none.",
    ),
    Key(
        "group.consumer.migration.policy",
        "STRING",
        "bidirectional",
        one_of(("disabled", "upgrade", "downgrade", "bidirectional")),
        "Whether an empty classic group becomes a consumer group when a consumer-protocol "
        "member joins (upgrade), the other way round (downgrade), both, or neither.",
    ),
)

# Kafka's class names of its assignors, accepted for the short names.
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignors(names: tuple[str, ...]) -> tuple[str, ...]:
    short = tuple(_ASSIGNOR_CLASSES.get(n, n) for n in names)
    unknown = [n for n in short if n not in ("uniform", "range")]
    if unknown or not short:
        raise ValueError("must list one or more of uniform, range (or Kafka's "
                         "UniformAssignor/RangeAssignor class names)")
    return short


def check_group_keys(values: Mapping[str, Any]) -> None:
    """What the keys above cannot check one by one."""
    lo = values["group.min.session.timeout.ms"]
    hi = values["group.max.session.timeout.ms"]
    if lo > hi:
        raise ConfigError(
            f"group.min.session.timeout.ms={lo} is above group.max.session.timeout.ms={hi}: "
            "the minimum must not exceed the maximum"
        )
    for name in ("session.timeout.ms", "heartbeat.interval.ms"):
        lo = values[f"group.consumer.min.{name}"]
        hi = values[f"group.consumer.max.{name}"]
        value = values[f"group.consumer.{name}"]
        if not lo <= value <= hi:
            raise ConfigError(
                f"group.consumer.{name}={value} is outside group.consumer.min.{name}={lo} .. "
                f"group.consumer.max.{name}={hi}: set it (or the bounds) so that it lies within"
            )
    session = values["group.consumer.session.timeout.ms"]
    interval = values["group.consumer.heartbeat.interval.ms"]
    if interval >= session:
        raise ConfigError(
            f"group.consumer.heartbeat.interval.ms={interval} must be below "
            f"group.consumer.session.timeout.ms={session}: members would time out between beats"
        )


def group_config(values: Mapping[str, Any]) -> GroupConfig:
    """The GroupConfig of the typed values of the keys above (the rest keeps its defaults)."""
    return GroupConfig(
        initial_rebalance_delay_ms=values["group.initial.rebalance.delay.ms"],
        min_session_timeout_ms=values["group.min.session.timeout.ms"],
        max_session_timeout_ms=values["group.max.session.timeout.ms"],
        offsets_topic_num_partitions=values["offsets.topic.num.partitions"],
        offsets_topic_segment_bytes=values["offsets.topic.segment.bytes"],
        offsets_retention_ms=values["offsets.retention.minutes"] * MINUTE_MS,
        offsets_retention_check_interval_ms=values["offsets.retention.check.interval.ms"],
        consumer_session_timeout_ms=values["group.consumer.session.timeout.ms"],
        consumer_heartbeat_interval_ms=values["group.consumer.heartbeat.interval.ms"],
        consumer_min_session_timeout_ms=values["group.consumer.min.session.timeout.ms"],
        consumer_max_session_timeout_ms=values["group.consumer.max.session.timeout.ms"],
        consumer_min_heartbeat_interval_ms=values["group.consumer.min.heartbeat.interval.ms"],
        consumer_max_heartbeat_interval_ms=values["group.consumer.max.heartbeat.interval.ms"],
        consumer_max_size=values["group.consumer.max.size"],
        consumer_assignors=values["group.consumer.assignors"],
        consumer_migration_policy=values["group.consumer.migration.policy"],
    )
