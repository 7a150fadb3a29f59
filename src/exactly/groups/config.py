"""Settings of the group coordinator. Field names follow Kafka's broker keys (`group.*`, `offsets.*`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes, in ms
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    group_max_size: int = 2**31 - 1  # group.max.size
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs (KIP-394): a new member that joined but
    # vanished before the rebalance completed is dropped after this long.
    new_member_join_timeout_ms: int = 300_000
