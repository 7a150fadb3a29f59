"""Topic-level configuration: the keys Kafka users know, their validation, defaults and mapping onto
LogConfig. Keys that do not change this broker's behaviour (single node: replication, ISR) are
still accepted, validated and described, so tools that set them keep working."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from exactly.log.config import LogConfig
from exactly.log.errors import InvalidConfigError

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

ConfigSource = Literal["TOPIC_CONFIG", "DEFAULT_CONFIG"]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    sensitive: bool = False


Parser = Callable[[str], str]


def _integer(low: int, high: int) -> Parser:
    def parse(raw: str) -> str:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"{raw!r} is not an integer") from None
        if not low <= value <= high:
            raise ValueError(f"{value} is outside [{low}, {high}]")
        return str(value)
    return parse


def _double(low: float, high: float) -> Parser:
    def parse(raw: str) -> str:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
        if not low <= value <= high:
            raise ValueError(f"{value} is outside [{low}, {high}]")
        return raw.strip()
    return parse


def _boolean(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{raw!r} is not true or false")
    return value


def _one_of(*choices: str, ignore_case: bool = False) -> Parser:
    def parse(raw: str) -> str:
        value = raw.strip()
        for choice in choices:
            if value == choice or (ignore_case and value.lower() == choice.lower()):
                return choice
        raise ValueError(f"{raw!r} is not one of {', '.join(choices)}")
    return parse


def _list_of(*choices: str, allow_empty: bool = False) -> Parser:
    def parse(raw: str) -> str:
        if allow_empty and not raw.strip():
            return ""
        items = [item.strip().lower() for item in raw.split(",") if item.strip()]
        bad = [item for item in items if item not in choices]
        if bad or not items:
            raise ValueError(f"{raw!r} must be a comma-separated list of {', '.join(choices)}")
        return ",".join(items)
    parse.is_list = True  # type: ignore[attr-defined]
    return parse


def _any_list(raw: str) -> str:
    return ",".join(item.strip() for item in raw.split(",") if item.strip())


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    parse: Parser
    default: str  # Kafka's default, used unless `field` maps it onto the broker's LogConfig
    field: str | None = None  # LogConfig attribute this key overrides

    @property
    def is_list(self) -> bool:
        """A comma-separated list: IncrementalAlterConfigs may APPEND to it and SUBTRACT from it."""
        return self.parse is _any_list or getattr(self.parse, "is_list", False)


# Kafka 4.0 removed message.downconversion.enable (KIP-724) and
# message.timestamp.difference.max.ms (KIP-937): refused as unknown, as Kafka 4.4 refuses them.
_KEYS = [
    # As Kafka 4.4: an empty policy is allowed (neither retention nor compaction runs); a list
    # with empty items is not.
    ConfigKey("cleanup.policy", _list_of("delete", "compact", allow_empty=True), "delete",
              "cleanup_policy"),
    ConfigKey("compression.type",
              _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "producer"),
    ConfigKey("delete.retention.ms", _integer(0, _LONG_MAX), "86400000", "delete_retention_ms"),
    ConfigKey("file.delete.delay.ms", _integer(0, _LONG_MAX), "60000"),
    ConfigKey("flush.messages", _integer(1, _LONG_MAX), str(_LONG_MAX)),
    ConfigKey("flush.ms", _integer(0, _LONG_MAX), str(_LONG_MAX)),
    ConfigKey("follower.replication.throttled.replicas", _any_list, ""),
    ConfigKey("index.interval.bytes", _integer(0, _INT_MAX), "4096", "index_interval_bytes"),
    ConfigKey("leader.replication.throttled.replicas", _any_list, ""),
    ConfigKey("max.compaction.lag.ms", _integer(1, _LONG_MAX), str(_LONG_MAX),
              "max_compaction_lag_ms"),
    ConfigKey("max.message.bytes", _integer(0, _INT_MAX), "1048588", "max_message_bytes"),
    ConfigKey("message.timestamp.after.max.ms", _integer(0, _LONG_MAX), str(_LONG_MAX)),
    ConfigKey("message.timestamp.before.max.ms", _integer(0, _LONG_MAX), str(_LONG_MAX)),
    ConfigKey("message.timestamp.type", _one_of("CreateTime", "LogAppendTime", ignore_case=True),
              "CreateTime", "message_timestamp_type"),
    ConfigKey("min.cleanable.dirty.ratio", _double(0.0, 1.0), "0.5", "min_cleanable_dirty_ratio"),
    ConfigKey("min.compaction.lag.ms", _integer(0, _LONG_MAX), "0", "min_compaction_lag_ms"),
    ConfigKey("min.insync.replicas", _integer(1, _INT_MAX), "1"),
    ConfigKey("preallocate", _boolean, "false"),
    ConfigKey("retention.bytes", _integer(-1, _LONG_MAX), "-1", "retention_bytes"),
    ConfigKey("retention.ms", _integer(-1, _LONG_MAX), "604800000", "retention_ms"),
    # Kafka's floor for segment.bytes is 14 bytes; a batch that does not fit gets RECORD_LIST_TOO_LARGE.
    ConfigKey("segment.bytes", _integer(14, _INT_MAX), "1073741824", "segment_bytes"),
    ConfigKey("segment.index.bytes", _integer(4, _INT_MAX), "10485760", "segment_index_bytes"),
    ConfigKey("segment.jitter.ms", _integer(0, _LONG_MAX), "0"),
    ConfigKey("segment.ms", _integer(1, _LONG_MAX), "604800000", "segment_ms"),
    ConfigKey("unclean.leader.election.enable", _boolean, "false"),
]

TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {key.name: key for key in _KEYS}


def validate_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Normalized overrides; InvalidConfigError names the first unknown key or bad value."""
    out: dict[str, str] = {}
    for name, raw in configs.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise InvalidConfigError(f"unknown topic config {name!r}; known keys: "
                                     f"{', '.join(sorted(TOPIC_CONFIG_KEYS))}")
        if raw is None:
            raise InvalidConfigError(f"topic config {name!r} needs a value")
        try:
            out[name] = key.parse(str(raw))
        except ValueError as exc:
            raise InvalidConfigError(f"invalid value for topic config {name!r}: {exc}") from None
    return out


def list_operation(name: str, current: str, values: str, *, append: bool) -> str:
    """Kafka's IncrementalAlterConfigs APPEND (the items of `values` not in `current`, added at
    its end) or SUBTRACT (the items of `values` taken out of `current`) on a list-typed key. The
    result is validated as a SET of it would be; a key that is not a list is INVALID_CONFIG."""
    key = TOPIC_CONFIG_KEYS.get(name)
    if key is None:
        raise InvalidConfigError(f"unknown topic config {name!r}; known keys: "
                                 f"{', '.join(sorted(TOPIC_CONFIG_KEYS))}")
    if not key.is_list:
        raise InvalidConfigError(f"config value {'append' if append else 'subtract'} is not "
                                 f"allowed for config key {name!r}: it is not a list")
    items = [item.strip() for item in current.split(",") if item.strip()]
    changes = [item.strip() for item in values.split(",") if item.strip()]
    if append:
        items += [item for item in dict.fromkeys(changes) if item not in items]
    else:
        items = [item for item in items if item not in changes]
    return ",".join(items)


def default_value(name: str, defaults: LogConfig) -> str:
    key = TOPIC_CONFIG_KEYS[name]
    if key.field is None:
        return key.default
    return str(getattr(defaults, key.field))


def log_config_for(defaults: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """The LogConfig of a topic: the broker defaults with the topic's overrides applied."""
    changes: dict[str, Any] = {}
    for name, value in overrides.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None or key.field is None:
            continue
        current = getattr(defaults, key.field)
        changes[key.field] = type(current)(value) if isinstance(current, (int, float)) else value
    return dataclasses.replace(defaults, **changes) if changes else defaults


def describe(defaults: LogConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    entries = []
    for name in TOPIC_CONFIG_KEYS:
        if name in overrides:
            entries.append(ConfigEntry(name, overrides[name], "TOPIC_CONFIG"))
        else:
            entries.append(ConfigEntry(name, default_value(name, defaults), "DEFAULT_CONFIG"))
    return entries
