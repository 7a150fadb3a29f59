"""Settings of share groups (KIP-932): the broker keys, with Kafka's names and defaults, and the
group-level configs (ConfigResource type GROUP) that override some of them per group.

The broker keys bound what a group config may say, as Kafka's `GroupConfig` validation does
(KIP-1240): `share.record.lock.duration.ms` must lie within `group.share.min/max.record.lock.
duration.ms`, and so on. `ShareConfig` is what exactly/server/config.py builds from the keys;
`GroupSettings` is one group's values in force (its overrides, else the broker's defaults).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exactly.configdef import ConfigError, Key, int_range, one_of


@dataclass(frozen=True, slots=True)
class ShareConfig:
    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    min_record_lock_duration_ms: int = 15_000  # group.share.min.record.lock.duration.ms
    max_record_lock_duration_ms: int = 60_000  # group.share.max.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    min_delivery_count_limit: int = 2  # group.share.min.delivery.count.limit
    max_delivery_count_limit: int = 10  # group.share.max.delivery.count.limit
    partition_max_record_locks: int = 2000  # group.share.partition.max.record.locks
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    min_session_timeout_ms: int = 45_000  # group.share.min.session.timeout.ms
    max_session_timeout_ms: int = 60_000  # group.share.max.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    min_heartbeat_interval_ms: int = 5_000  # group.share.min.heartbeat.interval.ms
    max_heartbeat_interval_ms: int = 15_000  # group.share.max.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size: members per share group
    max_share_sessions: int = 2000  # group.share.max.share.sessions
    state_topic_num_partitions: int = 50  # share.coordinator.state.topic.num.partitions
    state_topic_segment_bytes: int = 262_144  # share.coordinator.state.topic.segment.bytes
    updates_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot


def _ms(name: str, default: int, doc: str, minimum: int = 1) -> Key:
    return Key(name, "INT", default, int_range(minimum), doc)


SHARE_KEYS: tuple[Key, ...] = (
    _ms("group.share.record.lock.duration.ms", 30000,
        "How long a share consumer holds acquired records before they are released (KIP-932).",
        1000),
    _ms("group.share.min.record.lock.duration.ms", 15000,
        "Smallest share.record.lock.duration.ms a share group may set.", 1000),
    _ms("group.share.max.record.lock.duration.ms", 60000,
        "Largest share.record.lock.duration.ms a share group may set.", 1000),
    _ms("group.share.delivery.count.limit", 5,
        "Deliveries of a record to share consumers before it is archived.", 2),
    _ms("group.share.min.delivery.count.limit", 2,
        "Smallest share.delivery.count.limit a share group may set.", 2),
    _ms("group.share.max.delivery.count.limit", 10,
        "Largest share.delivery.count.limit a share group may set.", 2),
    _ms("group.share.partition.max.record.locks", 2000,
        "Records in flight (acquired or awaiting earlier ones) per share-partition.", 100),
    _ms("group.share.session.timeout.ms", 45000,
        "A share-group member without a heartbeat for this long is removed."),
    _ms("group.share.min.session.timeout.ms", 45000,
        "Smallest share.session.timeout.ms a share group may set."),
    _ms("group.share.max.session.timeout.ms", 60000,
        "Largest share.session.timeout.ms a share group may set."),
    _ms("group.share.heartbeat.interval.ms", 5000,
        "The heartbeat interval given to share-group members."),
    _ms("group.share.min.heartbeat.interval.ms", 5000,
        "Smallest share.heartbeat.interval.ms a share group may set."),
    _ms("group.share.max.heartbeat.interval.ms", 15000,
        "Largest share.heartbeat.interval.ms a share group may set."),
    _ms("group.share.max.size", 200, "Most members of one share group."),
    _ms("group.share.max.share.sessions", 2000,
        "Most share sessions (one per share consumer and broker) the broker keeps."),
    _ms("share.coordinator.state.topic.num.partitions", 50,
        "Partitions of __share_group_state (fixed once the topic exists)."),
    _ms("share.coordinator.state.topic.segment.bytes", 262144,
        "segment.bytes of __share_group_state, set when the topic is created."),
    _ms("share.coordinator.snapshot.update.records.per.snapshot", 500,
        "ShareUpdate records written for a share-partition before the next ShareSnapshot."),
)

_BOUNDED = (("record.lock.duration.ms", "record_lock_duration_ms"),
            ("delivery.count.limit", "delivery_count_limit"),
            ("session.timeout.ms", "session_timeout_ms"),
            ("heartbeat.interval.ms", "heartbeat_interval_ms"))


def check_share_keys(values: Mapping[str, Any]) -> None:
    """Each default must lie within its min and max, as Kafka's GroupCoordinatorConfig checks."""
    for suffix, _ in _BOUNDED:
        lo, hi = values[f"group.share.min.{suffix}"], values[f"group.share.max.{suffix}"]
        value = values[f"group.share.{suffix}"]
        if not lo <= value <= hi:
            raise ConfigError(f"group.share.{suffix}={value} is outside group.share.min.{suffix}="
                              f"{lo} .. group.share.max.{suffix}={hi}: set it within them")


def share_config(values: Mapping[str, Any]) -> ShareConfig:
    """The ShareConfig of the typed values of the keys above."""
    def v(name: str) -> int:
        return int(values[name])
    return ShareConfig(
        record_lock_duration_ms=v("group.share.record.lock.duration.ms"),
        min_record_lock_duration_ms=v("group.share.min.record.lock.duration.ms"),
        max_record_lock_duration_ms=v("group.share.max.record.lock.duration.ms"),
        delivery_count_limit=v("group.share.delivery.count.limit"),
        min_delivery_count_limit=v("group.share.min.delivery.count.limit"),
        max_delivery_count_limit=v("group.share.max.delivery.count.limit"),
        partition_max_record_locks=v("group.share.partition.max.record.locks"),
        session_timeout_ms=v("group.share.session.timeout.ms"),
        min_session_timeout_ms=v("group.share.min.session.timeout.ms"),
        max_session_timeout_ms=v("group.share.max.session.timeout.ms"),
        heartbeat_interval_ms=v("group.share.heartbeat.interval.ms"),
        min_heartbeat_interval_ms=v("group.share.min.heartbeat.interval.ms"),
        max_heartbeat_interval_ms=v("group.share.max.heartbeat.interval.ms"),
        max_size=v("group.share.max.size"),
        max_share_sessions=v("group.share.max.share.sessions"),
        state_topic_num_partitions=v("share.coordinator.state.topic.num.partitions"),
        state_topic_segment_bytes=v("share.coordinator.state.topic.segment.bytes"),
        updates_per_snapshot=v("share.coordinator.snapshot.update.records.per.snapshot"),
    )


# -- group configs (ConfigResource GROUP, KIP-848/KIP-932) ------------------------------------

LATEST, EARLIEST = "latest", "earliest"
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE)


def parse_by_duration(text: str) -> int:
    """`by_duration:PnDTnHnMn.nS` (ISO 8601, never negative) -> milliseconds."""
    spec = text[len("by_duration:"):]
    match = _DURATION.fullmatch(spec)
    if not match or spec.upper() in ("P", "PT") or spec.upper().endswith("T"):
        raise ValueError(f"{text!r}: the duration must be ISO 8601, PnDTnHnMn.nS, e.g. "
                         "by_duration:PT1H")
    delta = datetime.timedelta(days=int(match["d"] or 0), hours=int(match["h"] or 0),
                               minutes=int(match["m"] or 0), seconds=float(match["s"] or 0))
    return int(delta.total_seconds() * 1000)


def _auto_offset_reset(text: str) -> str:
    value = text.strip().lower()
    if value in (LATEST, EARLIEST):
        return value
    if value.startswith("by_duration:"):
        parse_by_duration(value)
        return value
    raise ValueError("must be latest, earliest or by_duration:PnDTnHnMn.nS")


# Kafka's group config name -> (the ShareConfig field with the broker's default and min/max,
# None for a string config; its parser).
GROUP_CONFIG_KEYS: dict[str, tuple[str | None, Callable[[str], Any]]] = {
    "share.record.lock.duration.ms": ("record_lock_duration_ms", int_range(1)),
    "share.delivery.count.limit": ("delivery_count_limit", int_range(1)),
    "share.session.timeout.ms": ("session_timeout_ms", int_range(1)),
    "share.heartbeat.interval.ms": ("heartbeat_interval_ms", int_range(1)),
    "share.auto.offset.reset": (None, _auto_offset_reset),
    "share.isolation.level": (None, one_of((READ_UNCOMMITTED, READ_COMMITTED))),
}
_STRING_DEFAULTS = {"share.auto.offset.reset": LATEST, "share.isolation.level": READ_UNCOMMITTED}


def validate_group_config(config: ShareConfig, name: str, text: str) -> Any:
    """The typed value of a group config, or ValueError saying what is allowed."""
    spec = GROUP_CONFIG_KEYS.get(name)
    if spec is None:
        raise ValueError(f"{name} is not a share-group config; known: "
                         f"{', '.join(sorted(GROUP_CONFIG_KEYS))}")
    field_name, parse = spec
    value = parse(text.strip())
    if field_name is not None:
        lo = getattr(config, f"min_{field_name}")
        hi = getattr(config, f"max_{field_name}")
        if not lo <= value <= hi:
            raise ValueError(f"{name}={value} is outside the broker's bounds {lo}..{hi} "
                             f"(group.share.min/max.{name.removeprefix('share.')})")
    return value


def group_config_default(config: ShareConfig, name: str) -> str:
    field_name = GROUP_CONFIG_KEYS[name][0]
    return str(getattr(config, field_name)) if field_name else _STRING_DEFAULTS[name]


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """One share group's values in force."""

    record_lock_duration_ms: int
    delivery_count_limit: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    auto_offset_reset: str
    isolation_level: str
    max_record_locks: int

    @classmethod
    def of(cls, config: ShareConfig, overrides: Mapping[str, str]) -> GroupSettings:
        def get(name: str) -> Any:
            text = overrides.get(name)
            if text is None:
                return GROUP_CONFIG_KEYS[name][1](group_config_default(config, name))
            try:
                return validate_group_config(config, name, text)
            except ValueError:  # the broker's bounds changed since: its default applies
                return GROUP_CONFIG_KEYS[name][1](group_config_default(config, name))
        return cls(record_lock_duration_ms=get("share.record.lock.duration.ms"),
                   delivery_count_limit=get("share.delivery.count.limit"),
                   session_timeout_ms=get("share.session.timeout.ms"),
                   heartbeat_interval_ms=get("share.heartbeat.interval.ms"),
                   auto_offset_reset=get("share.auto.offset.reset"),
                   isolation_level=get("share.isolation.level"),
                   max_record_locks=config.partition_max_record_locks)
