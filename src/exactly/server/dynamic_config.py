"""Dynamic broker configs (KIP-226): broker keys changed at run time by IncrementalAlterConfigs or
AlterConfigs on a BROKER resource, kept in the data directory and applied without a restart.

Two scopes, as Kafka has: this broker's own (resource name = its node id; DescribeConfigs source
DYNAMIC_BROKER_CONFIG) and the cluster-wide default (resource name ""; source
DYNAMIC_DEFAULT_BROKER_CONFIG). A key's value in force is the first found of: this broker's dynamic
value, the dynamic default, the static config (properties file, --set), the built-in default.

Only the keys Kafka treats as dynamic *and* that this broker honours at run time are accepted
(DYNAMIC_KEYS): the log defaults every topic without its own override takes at once (retention,
segment size and age, index interval, message.max.bytes, the compaction settings), the log
cleaner's pace (log.cleaner.backoff.ms, log.cleaner.io.max.bytes.per.second), and the connection
limits (max.connections, max.connections.per.ip, max.connections.per.ip.overrides; connections
already open stay). Any other key is refused with INVALID_REQUEST, "Cannot update these configs
dynamically", as Kafka's broker refuses its read-only keys. A key that is no config of this
broker at all is taken and ignored (logged), as Kafka takes it as a custom config.

Kept in `<data dir>/dynamic-broker-configs.json` (replaced atomically, fsynced) before the change
is applied or answered; read on start. Kafka keeps them in its metadata log instead.

As in Kafka, log.retention.minutes/.hours and log.roll.hours are static: a dynamic
log.retention.ms or log.roll.ms overrides whatever they say.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from exactly.log.files import write_atomically
from exactly.protocol.errors import ErrorCode
from exactly.server.config import KEYS, BrokerConfig, ConfigError
from exactly.server.connection_limits import ConnectionLimits
from exactly.server.kafka_keys import ignored_reason

if TYPE_CHECKING:
    from exactly.log import LogManager
    from exactly.server.log_cleaning import CleanerService

log = logging.getLogger(__name__)

FILE_NAME = "dynamic-broker-configs.json"
_VERSION = 1
BROKER, DEFAULT = "broker", "default"  # this broker's scope, the cluster-wide default scope

LOG_DEFAULT_KEYS = frozenset({
    # As Kafka (DynamicLogConfig): the keys topics take their defaults from; the coarser
    # log.retention.minutes/.hours and log.roll.hours are static there, and here.
    "log.segment.bytes", "log.roll.ms", "log.retention.ms", "log.retention.bytes",
    "log.index.interval.bytes", "message.max.bytes", "log.cleaner.min.cleanable.ratio",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.delete.retention.ms",
})
CLEANER_KEYS = frozenset({"log.cleaner.backoff.ms", "log.cleaner.io.max.bytes.per.second"})
CONNECTION_KEYS = frozenset({"max.connections", "max.connections.per.ip",
                             "max.connections.per.ip.overrides"})
DYNAMIC_KEYS = LOG_DEFAULT_KEYS | CLEANER_KEYS | CONNECTION_KEYS

# (name, value, source, read_only, sensitive), as handlers/configs.py lists a resource's configs.
Described = tuple[str, str | None, str, bool, bool]


class DynamicConfigError(Exception):
    """A change the broker refuses; nothing was changed. Kafka answers INVALID_REQUEST."""

    error_code = ErrorCode.invalid_request


class DynamicBrokerConfig:
    """The two scopes of dynamic values over the static config, and the config in force."""

    def __init__(self, static: BrokerConfig, directory: Path) -> None:
        self.static = static
        self.path = Path(directory) / FILE_NAME
        self._scopes: dict[str, dict[str, str]] = {BROKER: {}, DEFAULT: {}}
        self._on_change: list[Callable[[BrokerConfig], None]] = []
        self._load()
        self.effective = self._merge(self._scopes)

    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.path} is unreadable ({exc}); fix or remove it (it holds "
                              "the dynamic broker configs; removing it restores the static ones)")
        for scope in (BROKER, DEFAULT):
            for name, value in dict(doc.get(scope, {})).items():
                if name in DYNAMIC_KEYS:
                    self._scopes[scope][str(name)] = str(value)
                else:
                    log.warning("event=dynamic_config_ignored key=%s reason=not_dynamic", name)

    def _merge(self, scopes: Mapping[str, Mapping[str, str]]) -> BrokerConfig:
        return self.static.with_overrides({**scopes[DEFAULT], **scopes[BROKER]})

    def on_change(self, apply: Callable[[BrokerConfig], None]) -> None:
        """Call `apply` with the config in force after every change."""
        self._on_change.append(apply)

    def overrides(self, scope: str) -> dict[str, str]:
        return dict(self._scopes[scope])

    def alter(self, scope: str, set: Mapping[str, str], delete: Iterable[str] = (), *,
              replace: bool = False, validate_only: bool = False) -> None:
        """Set and delete keys of a scope (`replace`: the scope becomes exactly `set`, as the
        legacy AlterConfigs does). All or nothing; durable before it applies."""
        delete = list(delete)
        unknown = sorted(k for k in [*set, *delete] if k not in KEYS)
        if unknown:
            # As Kafka: a key that is no config of this broker is taken (Kafka keeps it as a
            # custom config for plugins, e.g. sasl.kerberos.min.time.before.relogin for a
            # Kerberos login Exactly does not have); nothing here reads it, so it is not kept.
            for k in unknown:
                log.warning("event=dynamic_config_ignored key=%s reason=%s", k,
                            ignored_reason(k) or "not a config of this broker")
            set = {k: v for k, v in set.items() if k in KEYS}
            delete = [k for k in delete if k in KEYS]
        fixed = sorted(k for k in [*set, *delete] if k not in DYNAMIC_KEYS)
        if fixed:
            raise DynamicConfigError(
                f"Cannot update these configs dynamically: {fixed}; set them in the broker's "
                f"config and restart (the dynamic keys are {sorted(DYNAMIC_KEYS)})")
        current = {} if replace else dict(self._scopes[scope])
        for name in delete:
            current.pop(name, None)
        current.update(set)
        scopes = {**self._scopes, scope: current}
        try:
            effective = self._merge(scopes)
        except ConfigError as exc:
            raise DynamicConfigError(f"Invalid config value: {exc}") from None
        if validate_only:
            return
        write_atomically(self.path, json.dumps({"version": _VERSION, **scopes}, indent=1))
        self._scopes, self.effective = scopes, effective
        log.info("event=dynamic_config_changed scope=%s values=%s", scope, current)
        for apply in self._on_change:
            apply(effective)

    def describe(self, scope: str) -> list[Described]:
        """A BROKER resource's configs: every key with its value in force (this broker's scope),
        or the dynamic defaults alone (the default scope), as Kafka lists them."""
        if scope == DEFAULT:
            return [(name, value, "DYNAMIC_DEFAULT_BROKER_CONFIG", False, False)
                    for name, value in sorted(self._scopes[DEFAULT].items())]
        described: list[Described] = []
        for e in self.effective.items():
            if e.name in self._scopes[BROKER]:
                source = "DYNAMIC_BROKER_CONFIG"
            elif e.name in self._scopes[DEFAULT]:
                source = "DYNAMIC_DEFAULT_BROKER_CONFIG"
            elif self.static.is_set(e.name):
                source = "STATIC_BROKER_CONFIG"
            else:
                source = "DEFAULT_CONFIG"
            described.append((e.name, e.value, source, e.name not in DYNAMIC_KEYS,
                              e.is_sensitive))
        return described


def apply_to(logs: LogManager, cleaning: CleanerService,
             limits: ConnectionLimits) -> Callable[[BrokerConfig], None]:
    """What a change does at run time: new log defaults for every topic, the cleaner's pace,
    the connection limits (for connections opened from now on)."""

    def apply(config: BrokerConfig) -> None:
        logs.set_default_config(config.log_config())
        cleaning.config = config.cleaner_config()
        fresh = ConnectionLimits.from_config(config)
        limits.max_connections, limits.per_ip = fresh.max_connections, fresh.per_ip
        limits.overrides = fresh.overrides

    return apply

