"""Broker configuration: Kafka's own broker config keys, read from a Java-style properties file,
then `--set key=value` overrides, then the command line's explicit options.

Each package declares its own keys, as Kafka's `TransactionLogConfig` and
`GroupCoordinatorConfig` do (the `Key` type and the value parsers are in exactly/configdef.py):
`log.*` in exactly/log/config.py, the transaction keys in exactly/txn/config.py, `group.*` and
`offsets.*` in exactly/groups/config.py, `sasl.*`/`ssl.*` in exactly/server/auth/config.py, the
authorizer's in exactly/server/acl/config.py. This module declares the listener, network and
broker-identity keys, gathers every package's keys into `KEYS` (in the order DescribeConfigs
lists them), and keeps meta.properties.

An unknown key or a bad value is a `ConfigError` that names the key, the value, where it came
from and what is allowed: a broker that starts with a typo in its config is worse than one that
refuses to start.

To add a key, add one `Key(...)` line to the tuple of the package it configures (and a line to
the README's table).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ConfigError is defined in configdef; callers keep importing it from here.
from exactly.configdef import ConfigError, Key, int_range, long_range, parse_bool, render
from exactly.groups.config import GROUP_KEYS, GroupConfig, check_group_keys, group_config
from exactly.log.config import (
    CLEANER_KEYS,
    LOG_DIRS_KEY,
    LOG_KEYS,
    CleanerConfig,
    LogConfig,
    cleaner_config,
    log_config,
    retention_ms,
    roll_ms,
)
from exactly.log.files import write_atomically
from exactly.server.acl.config import ACL_KEYS
from exactly.server.auth.config import AUTH_KEYS, plain_users
from exactly.server.connection_limits import parse_overrides
from exactly.server.kafka_keys import default_only, ignored_reason, refused_reason
from exactly.share.config import SHARE_KEYS, ShareConfig, check_share_keys, share_config
from exactly.txn.config import TXN_KEYS, txn_config
from exactly.txn.state import TxnConfig

# DescribeConfigs wire values (org.apache.kafka.common.requests.DescribeConfigsResponse).
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
CONFIG_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
                   "LIST": 7, "CLASS": 8, "PASSWORD": 9}

_log = logging.getLogger("exactly.config")

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


# -- the properties file format --------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"{where}: malformed \\uXXXX escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _ends_with_continuation(line: str) -> bool:
    """An odd number of trailing backslashes continues the line (an even number is escaped)."""
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def parse_properties(text: str, source: str = "<properties>") -> dict[str, tuple[str, str]]:
    """Parse Java properties text: {key: (value, "source:line")}. A later duplicate wins, as in
    java.util.Properties."""
    result: dict[str, tuple[str, str]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        where = f"{source}:{lineno}"
        # The key ends at the first unescaped '=', ':' or whitespace.
        j = 0
        while j < len(line):
            c = line[j]
            if c == "\\":
                j += 2
                continue
            if c in "=: \t\f":
                break
            j += 1
        raw_key, rest = line[:j], line[j:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        key = _unescape(raw_key, where)
        result[key] = (_unescape(rest, where), where)
    return result


def read_properties_file(path: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} not found") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (byte {exc.start})") from None
    return parse_properties(text, str(p))


# -- the listener, network and broker-identity keys ----------------------------------------


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER_RE = re.compile(
    r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>[0-9]+)"
)


def parse_queued_bytes(text: str) -> int:
    """`queued.max.request.bytes`: a positive byte count, or -1 for no bound."""
    value = long_range(-1)(text)
    if value == 0:
        raise ValueError("0 would let no request in; use -1 for no bound")
    return value


CONTROLLER_LISTENER = "CONTROLLER"


def parse_listeners(text: str) -> tuple[Listener, ...]:
    listeners: list[Listener] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = _LISTENER_RE.fullmatch(part)
        if m is None:
            raise ValueError(
                f"{part!r} is not a listener; write NAME://HOST:PORT, e.g. PLAINTEXT://127.0.0.1:9092"
            )
        name = m["name"].upper()
        if name == CONTROLLER_LISTENER:
            # Kafka's KRaft controller listener (controller.listener.names' default name): there
            # is no controller here, so a file copied from Kafka loads without it.
            _log.warning("ignoring the listener %s: Exactly is one node without a KRaft "
                         "controller", part)
            continue
        if name not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"listener name {m['name']!r} is not supported; use PLAINTEXT, SSL, "
                "SASL_PLAINTEXT or SASL_SSL (listener.security.protocol.map is not supported)"
            )
        if any(existing.name == name for existing in listeners):
            raise ValueError(
                f"each listener needs a different name and {name} appears twice; "
                "Exactly serves at most one listener per security protocol"
            )
        port = int(m["port"])
        if port > 65535:
            raise ValueError(f"port {port} is not between 0 and 65535")
        host = m["host"]
        if host.startswith("["):
            host = host[1:-1]
        listeners.append(Listener(name, host, port))
    if not listeners:
        raise ValueError("must name at least one listener, e.g. PLAINTEXT://127.0.0.1:9092")
    return tuple(listeners)


def _parse_advertised(text: str) -> tuple[Listener, ...]:
    listeners = parse_listeners(text)
    for lst in listeners:
        if lst.host in WILDCARD_HOSTS:
            raise ValueError(
                f"{lst} cannot be advertised: clients cannot connect to "
                f"{lst.host or 'an empty host'}; name the host clients should use"
            )
    return listeners


_CLUSTER_ID_RE = re.compile(r"[A-Za-z0-9_\-]{1,255}")


def _parse_cluster_id(text: str) -> str:
    if not _CLUSTER_ID_RE.fullmatch(text):
        raise ValueError("must be 1 to 255 characters of A-Z, a-z, 0-9, '_' and '-'")
    return text


def _parse_replication_factor(text: str) -> int:
    value = int_range()(text)
    if value != 1:
        raise ValueError("must be 1: Exactly is a single broker (use Apache Kafka for replication)")
    return value


def _parse_metrics_listen(text: str) -> str:
    text = text.strip()
    if text:
        _host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise ValueError("must be HOST:PORT (port 0 picks a free port), or empty for none")
    return text


# -- every key, in the order DescribeConfigs lists them --------------------------------------

_KEYS: tuple[Key, ...] = (
    Key(
        "node.id",
        "INT",
        1,
        int_range(0),
        "The id of this broker. Alias: broker.id.",
        ("broker.id",),
    ),
    Key(
        "listeners",
        "LIST",
        "PLAINTEXT://127.0.0.1:9092",
        parse_listeners,
        "Where the broker listens, NAME://HOST:PORT. Only PLAINTEXT for now; port 0 picks a free "
        "port; an empty host or 0.0.0.0 listens on every interface.",
    ),
    Key(
        "advertised.listeners",
        "LIST",
        None,
        _parse_advertised,
        "What the broker tells clients to connect to; default: the bound listener.",
    ),
    LOG_DIRS_KEY,
    Key("num.partitions", "INT", 1, int_range(1), "Partitions of an auto-created topic."),
    Key(
        "default.replication.factor",
        "INT",
        1,
        _parse_replication_factor,
        "Must be 1: a single broker keeps one copy.",
    ),
    Key(
        "auto.create.topics.enable",
        "BOOLEAN",
        True,
        parse_bool,
        "Create a topic when a client asks for metadata of an unknown one.",
    ),
    Key("delete.topic.enable", "BOOLEAN", True, parse_bool, "Allow DeleteTopics."),
    *LOG_KEYS,
    *CLEANER_KEYS,
    Key("socket.request.max.bytes", "INT", 104857600, int_range(1), "Largest request accepted."),
    Key("fetch.max.bytes", "INT", 57671680, int_range(1024),
        "Most record bytes one Fetch answer carries, whatever the request's max_bytes (the first "
        "batch excepted, KIP-74)."),
    Key("queued.max.request.bytes", "LONG", 104857600, parse_queued_bytes,
        "Bytes of requests waiting for their answers, in total, before connections stop reading "
        "more (back-pressure); -1: no bound."),
    Key("max.connections", "INT", 2147483647, int_range(0),
        "Most client connections at once (bounded anyway by the descriptor limit, less a reserve "
        "for the broker's own files); more are closed as they come."),
    Key("max.connections.per.ip", "INT", 2147483647, int_range(0),
        "Most client connections from one address."),
    Key("max.connections.per.ip.overrides", "STRING", "", parse_overrides,
        "Per-address exceptions to max.connections.per.ip: HOST:COUNT, comma-separated."),
    Key("connections.max.idle.ms", "LONG", 600000, long_range(1),
        "A connection with no request for this long is closed."),
    *GROUP_KEYS,
    *SHARE_KEYS,
    *TXN_KEYS,
    Key(
        "metrics.listen",
        "STRING",
        "",
        _parse_metrics_listen,
        "Where to serve Prometheus metrics over HTTP (GET /metrics), HOST:PORT; port 0 picks a "
        "free port; empty (the default): no metrics endpoint.",
    ),
    Key(
        "cluster.id",
        "STRING",
        None,
        _parse_cluster_id,
        "The cluster id; default: generated once and kept in meta.properties of the log dir.",
    ),
    *AUTH_KEYS,
    *ACL_KEYS,
    # Kafka's sample server.properties sets these two; Exactly runs one event loop, so they are
    # accepted (and checked) to let such a file load, and change nothing.
    Key("num.network.threads", "INT", 3, int_range(1), "Accepted for compatibility; no effect."),
    Key("num.io.threads", "INT", 8, int_range(1), "Accepted for compatibility; no effect."),
)

KEYS: dict[str, Key] = {k.name: k for k in _KEYS}
ALIASES: dict[str, str] = {alias: k.name for k in _KEYS for alias in k.aliases}


def _known_keys_hint(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(KEYS) + list(ALIASES), n=1)
    if close:
        return f"did you mean {close[0]!r}? (the known keys are listed in the README)"
    return "the known keys are listed in the README"


# -- the config ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One key as DescribeConfigs reports it."""

    name: str
    value: str | None
    is_default: bool
    source: int  # CONFIG_SOURCE_STATIC_BROKER or CONFIG_SOURCE_DEFAULT
    config_type: int  # CONFIG_TYPE_IDS value
    documentation: str
    read_only: bool = True  # nothing can be changed at run time yet
    is_sensitive: bool = False


class BrokerConfig:
    """The broker's typed, checked configuration.

    `config[key]` gives the typed value of a known key (an alias works too): ints, bools, strs;
    `listeners`, `advertised.listeners` and `log.dirs` give tuples. The derived keys give the
    value in force: `log.retention.ms` after Kafka's ms > minutes > hours precedence,
    `log.roll.ms` after ms > hours, `advertised.listeners` falls back to `listeners`.
    `cluster.id` is None unless configured.
    """

    def __init__(self, values: Mapping[str, Any], explicit: Iterable[str] = ()) -> None:
        self._values = dict(values)
        self._explicit = frozenset(explicit)
        self._check_together()

    # -- building --

    @classmethod
    def from_sources(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        """Properties file first, then `overrides` in their order (later wins).

        The CLI puts the `--set` pairs first in `overrides` and its explicit options
        (`--data-dir`, `--listen`) after them, so those win.
        """
        sources: list[dict[str, tuple[str, str]]] = []
        if path is not None:
            sources.append(read_properties_file(path))
        if overrides:
            sources.append({k: (v, "command line") for k, v in overrides.items()})
        raw: dict[str, tuple[str, str, str]] = {}
        for source in sources:
            raw.update(_canonical(source))
        values = {name: key.typed_default() for name, key in KEYS.items()}
        for name, (text, where, given) in raw.items():
            text = text.strip()
            try:
                values[name] = KEYS[name].parse(text)
            except ValueError as exc:
                raise ConfigError(f"{given}={text!r} ({where}): {exc}") from None
        return cls(values, raw.keys())

    @classmethod
    def defaults(cls) -> BrokerConfig:
        return cls.from_sources(None, {})

    def _check_together(self) -> None:
        check_group_keys(self._values)
        check_share_keys(self._values)
        listeners = self._values["listeners"]
        if any(lst.name in ("SSL", "SASL_SSL") for lst in listeners) and not (
            self._values["ssl.keystore.location"]
            or (self._values["ssl.keystore.certificate.chain"] and self._values["ssl.keystore.key"])
        ):
            raise ConfigError(
                f"listeners={render(listeners)!r} has a TLS listener but no server certificate: "
                "set ssl.keystore.location (PEM with the certificate chain and private key)"
            )
        if any(lst.name.startswith("SASL_") for lst in listeners) and not self._values[
            "sasl.enabled.mechanisms"
        ]:
            raise ConfigError("a SASL listener needs sasl.enabled.mechanisms (e.g. SCRAM-SHA-512)")
        ports = [lst.port for lst in listeners if lst.port != 0]
        if len(ports) != len(set(ports)):
            raise ConfigError(f"listeners={render(listeners)!r}: two listeners share a port")
        advertised = self._values["advertised.listeners"]
        if advertised is not None:
            names = {lst.name for lst in self._values["listeners"]}
            for lst in advertised:
                if lst.name not in names:
                    raise ConfigError(
                        f"advertised.listeners={render(advertised)!r}: listener {lst.name} is "
                        f"not in listeners={render(self._values['listeners'])!r}"
                    )

    # -- typed access --

    def __getitem__(self, key: str) -> Any:
        name = ALIASES.get(key, key)
        if name not in KEYS:
            raise KeyError(key)
        if name == "log.retention.ms":
            return self.log_retention_ms
        if name == "log.roll.ms":
            return self.log_roll_ms
        if name == "advertised.listeners" and self._values[name] is None:
            return self._values["listeners"]
        return self._values[name]

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self:
            return default
        value = self[key]
        return default if value is None else value

    def __iter__(self) -> Iterator[str]:
        return iter(KEYS)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and ALIASES.get(key, key) in KEYS

    def is_set(self, key: str) -> bool:
        """Whether the key was given (in the file or as an override), not defaulted."""
        return ALIASES.get(key, key) in self._explicit

    @property
    def log_retention_ms(self) -> int:
        return retention_ms(self._values)

    @property
    def log_roll_ms(self) -> int:
        return roll_ms(self._values)

    @property
    def listeners(self) -> tuple[Listener, ...]:
        result: tuple[Listener, ...] = self._values["listeners"]
        return result

    @property
    def listener(self) -> tuple[str, int]:
        """(host, port) to bind: the first listener. Port 0: pick a free port. Host "" or
        0.0.0.0: every interface."""
        first = self.listeners[0]
        return first.host, first.port

    @property
    def advertised_listener(self) -> tuple[str, int] | None:
        """(host, port) to tell clients when advertised.listeners is set, else None: advertise
        what was bound (with a wildcard host replaced by a reachable one)."""
        advertised = self._values["advertised.listeners"]
        if advertised is None:
            return None
        return advertised[0].host, advertised[0].port

    def advertised_for(self, name: str) -> tuple[str, int] | None:
        """(host, port) advertised.listeners gives for listener `name`, else None."""
        for lst in self._values["advertised.listeners"] or ():
            if lst.name == name:
                return lst.host, lst.port
        return None

    @property
    def plain_users(self) -> dict[str, str]:
        """sasl.plain.users as {user: password}."""
        return plain_users(self._values)

    @property
    def log_dir(self) -> Path:
        return Path(self._values["log.dirs"][0])

    def log_config(self) -> LogConfig:
        """The broker-wide defaults of every partition log (topic configs override them)."""
        return log_config(self._values)

    def cleaner_config(self) -> CleanerConfig:
        """The log cleaner's settings (log.cleaner.*)."""
        return cleaner_config(self._values)

    def txn_config(self) -> TxnConfig:
        """The transaction coordinator's settings."""
        return txn_config(self._values)

    def group_config(self) -> GroupConfig:
        """The group coordinator's settings."""
        return group_config(self._values)

    def share_config(self) -> ShareConfig:
        """The share coordinator's settings (KIP-932)."""
        return share_config(self._values)

    def items(self) -> list[ConfigEntry]:
        """Every known key as DescribeConfigs reports it (aliases not repeated)."""
        out = []
        for name, key in KEYS.items():
            explicit = name in self._explicit
            if name in ("log.retention.ms", "log.roll.ms", "advertised.listeners"):
                value = render(self[name]) if explicit else None
            else:
                value = render(self._values[name])
            if key.sensitive:
                value = None
            out.append(
                ConfigEntry(
                    name=name,
                    value=value,
                    is_default=not explicit,
                    source=CONFIG_SOURCE_STATIC_BROKER if explicit else CONFIG_SOURCE_DEFAULT,
                    config_type=CONFIG_TYPE_IDS[key.type],
                    documentation=key.doc,
                    is_sensitive=key.sensitive,
                )
            )
        return out

    def with_overrides(self, overrides: Mapping[str, str]) -> BrokerConfig:
        """This config with `overrides` (canonical key -> text) on top: what the dynamic broker
        configs make of it (server/dynamic_config.py). A bad value is a ConfigError."""
        values = dict(self._values)
        for name, text in overrides.items():
            try:
                values[name] = KEYS[name].parse(text.strip())
            except ValueError as exc:
                raise ConfigError(f"{name}={text!r}: {exc}") from None
        return BrokerConfig(values, self._explicit | overrides.keys())

    def as_strings(self) -> dict[str, str | None]:
        """{key: value as text} with the values in force (derived keys resolved)."""
        return {name: render(self[name]) for name in KEYS}

    def __repr__(self) -> str:
        given = {name: render(self._values[name]) for name in sorted(self._explicit)}
        return f"BrokerConfig({given})"


def _canonical(source: Mapping[str, tuple[str, str]]) -> dict[str, tuple[str, str, str]]:
    """{key as given: (value, where)} -> {canonical key: (value, where, key as given)}, within
    one source; rejects unknown keys and an alias that disagrees with its key."""
    out: dict[str, tuple[str, str, str]] = {}
    for name, (value, where) in source.items():
        if name in KEYS:
            canonical = name
        elif name in ALIASES:
            canonical = ALIASES[name]
        elif (refused := refused_reason(name)) is not None:
            raise ConfigError(f"{name} ({where}) is a Kafka setting Exactly does not take: "
                              f"{refused}")
        elif (not_default := default_only(name, value)) is not None:
            raise ConfigError(f"{name}={value.strip()!r} ({where}): {not_default}")
        elif (ignored := ignored_reason(name)) is not None:
            # Kafka's key, with nothing to act on here (server/kafka_keys.py): a file copied from
            # Kafka loads, and the log says what was left out.
            _log.warning("ignoring %s=%s (%s): %s", name, value.strip(), where, ignored)
            continue
        else:
            raise ConfigError(f"unknown config key {name!r} ({where}): {_known_keys_hint(name)}")
        previous = out.get(canonical)
        if previous is not None:
            prev_value, prev_where, prev_name = previous
            if canonical == "log.dirs":
                # Kafka: log.dirs wins over log.dir.
                if name == "log.dirs":
                    out[canonical] = (value, where, name)
                continue
            if prev_value.strip() != value.strip():
                raise ConfigError(
                    f"{prev_name}={prev_value!r} ({prev_where}) and {name}={value!r} ({where}) "
                    "are the same setting with different values: keep one"
                )
            continue
        out[canonical] = (value, where, name)
    return out


# -- meta.properties -------------------------------------------------------------------------


def new_cluster_id() -> str:
    """Like Kafka's Uuid.randomUuid().toString(): 16 random bytes, URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_meta(config: BrokerConfig) -> str:
    """The cluster id of the log dir, kept in meta.properties as Kafka does: written once, when
    the directory is first used; checked against cluster.id and node.id afterwards."""
    meta = config.log_dir / "meta.properties"
    configured: str | None = config["cluster.id"]
    node_id: int = config["node.id"]
    if meta.exists():
        stored = {k: v for k, (v, _) in read_properties_file(meta).items()}
        stored_id = stored.get("cluster.id")
        if stored_id and configured and stored_id != configured:
            raise ConfigError(
                f"cluster.id={configured!r} but {meta} says cluster.id={stored_id}: this data "
                "belongs to another cluster; remove cluster.id or use another log.dirs"
            )
        stored_node = stored.get("node.id")
        if stored_node is not None and stored_node != str(node_id):
            raise ConfigError(
                f"node.id={node_id} but {meta} says node.id={stored_node}: this data belongs to "
                "another broker; set node.id to match or use another log.dirs"
            )
        if stored_id:
            return stored_id
    cluster_id = configured or new_cluster_id()
    config.log_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(meta, f"#\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")
    return cluster_id
