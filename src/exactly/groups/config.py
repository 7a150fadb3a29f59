"""Settings of the group coordinator, and the broker keys that give them (`group.*`,
`offsets.*`), declared here as Kafka's `GroupCoordinatorConfig` declares them; the broker's config
(exactly/server/config.py) gathers `GROUP_KEYS` and builds a GroupConfig with `group_config`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exactly.configdef import MINUTE_MS, ConfigError, Key, int_range


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
)


def check_group_keys(values: Mapping[str, Any]) -> None:
    """What the keys above cannot check one by one."""
    lo = values["group.min.session.timeout.ms"]
    hi = values["group.max.session.timeout.ms"]
    if lo > hi:
        raise ConfigError(
            f"group.min.session.timeout.ms={lo} is above group.max.session.timeout.ms={hi}: "
            "the minimum must not exceed the maximum"
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
    )
