"""Broker configuration: Kafka's own broker config keys, read from a Java-style properties file,
then `--set key=value` overrides, then the command line's explicit options.

An unknown key or a bad value is a `ConfigError` that names the key, the value, where it came
from and what is allowed: a broker that starts with a typo in its config is worse than one that
refuses to start.

To add a key, add one `Key(...)` line to `KEYS` (and a line to the README's table).
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactly.log.config import FLUSH_POLICIES, LogConfig
from exactly.log.files import write_atomically

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
HOUR_MS = 3_600_000
MINUTE_MS = 60_000

# DescribeConfigs wire values (org.apache.kafka.common.requests.DescribeConfigsResponse).
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
CONFIG_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "LIST": 7}

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Keys whose values DescribeConfigs hides, as Kafka hides PASSWORD keys.
SENSITIVE_KEYS = frozenset({"sasl.plain.users", "ssl.key.password", "ssl.keystore.key"})


class ConfigError(ValueError):
    """A broker configuration that cannot be used. The message is meant for the operator."""


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


# -- value types -----------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")


def _parse_int(lo: int, hi: int, minimum: int | None, maximum: int | None) -> Callable[[str], int]:
    low = lo if minimum is None else max(lo, minimum)
    high = hi if maximum is None else min(hi, maximum)

    def parse(text: str) -> int:
        if not _INT_RE.fullmatch(text):
            raise ValueError(f"must be a whole number from {low} to {high}")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be a whole number from {low} to {high}")
        return value

    return parse


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError("must be true or false")


def _parse_str(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def _parse_enum(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


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


def _parse_dirs(text: str) -> tuple[str, ...]:
    dirs = tuple(d.strip() for d in text.split(",") if d.strip())
    if not dirs:
        raise ValueError("must name at least one directory")
    return dirs


_CLUSTER_ID_RE = re.compile(r"[A-Za-z0-9_\-]{1,255}")


def _parse_cluster_id(text: str) -> str:
    if not _CLUSTER_ID_RE.fullmatch(text):
        raise ValueError("must be 1 to 255 characters of A-Z, a-z, 0-9, '_' and '-'")
    return text


def _parse_mechanisms(text: str) -> tuple[str, ...]:
    mechanisms = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    for m in mechanisms:
        if m not in SASL_MECHANISMS:
            raise ValueError(f"mechanism {m} is not supported; use {', '.join(SASL_MECHANISMS)}")
    return mechanisms


def _parse_plain_users(text: str) -> tuple[str, ...]:
    users = tuple(item.strip() for item in text.split(",") if item.strip())
    for item in users:
        user, sep, _ = item.partition(":")
        if not sep or not user:
            raise ValueError("must be USER:PASSWORD pairs separated by commas, e.g. alice:secret")
    return users


def _parse_optional_str(text: str) -> str | None:
    return text or None


def _parse_replication_factor(text: str) -> int:
    value = _parse_int(INT_MIN, INT_MAX, None, None)(text)
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


# -- the keys --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    type: str  # INT, LONG, BOOLEAN, STRING, LIST: what DescribeConfigs reports
    default: Any  # the typed default; None: unset (derived from another key, or optional)
    parse: Callable[[str], Any]
    doc: str
    aliases: tuple[str, ...] = ()


def _int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    return _parse_int(INT_MIN, INT_MAX, minimum, maximum)


def _long(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    return _parse_int(LONG_MIN, LONG_MAX, minimum, maximum)


def _parse_authorizer(text: str) -> str:
    from exactly.server.acl import AUTHORIZER_CLASS_NAMES

    if text and text not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"must be empty (no authorization) or {AUTHORIZER_CLASS_NAMES[0]}")
    return text


def _parse_super_users(text: str) -> str:
    from exactly.server.acl import parse_super_users

    parse_super_users(text)
    return text


_KEYS: tuple[Key, ...] = (
    Key("node.id", "INT", 1, _int(0), "The id of this broker. Alias: broker.id.", ("broker.id",)),
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
    Key(
        "log.dirs",
        "LIST",
        "./data",
        _parse_dirs,
        "The data directory (comma list accepted; the first is used). Alias: log.dir.",
        ("log.dir",),
    ),
    Key("num.partitions", "INT", 1, _int(1), "Partitions of an auto-created topic."),
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
        _parse_bool,
        "Create a topic when a client asks for metadata of an unknown one.",
    ),
    Key("delete.topic.enable", "BOOLEAN", True, _parse_bool, "Allow DeleteTopics."),
    Key("log.segment.bytes", "INT", 1073741824, _int(14), "Size at which a segment is rolled."),
    Key(
        "log.roll.ms",
        "LONG",
        None,
        _long(1),
        "Age at which a segment is rolled; default log.roll.hours.",
    ),
    Key("log.roll.hours", "INT", 168, _int(1), "Age at which a segment is rolled, in hours."),
    Key(
        "log.retention.ms",
        "LONG",
        None,
        _long(-1),
        "How long to keep a segment (-1: forever). Wins over log.retention.minutes and .hours.",
    ),
    Key(
        "log.retention.minutes",
        "INT",
        None,
        _int(-1),
        "How long to keep a segment, in minutes. Wins over log.retention.hours.",
    ),
    Key("log.retention.hours", "INT", 168, _int(-1), "How long to keep a segment, in hours."),
    Key(
        "log.retention.bytes",
        "LONG",
        -1,
        _long(-1),
        "Size above which a partition's oldest segments are deleted (-1: no limit).",
    ),
    Key(
        "log.retention.check.interval.ms",
        "LONG",
        300000,
        _long(1),
        "How often retention is applied.",
    ),
    Key(
        "log.index.interval.bytes",
        "INT",
        4096,
        _int(0),
        "Bytes between two entries of the offset index.",
    ),
    Key("log.index.size.max.bytes", "INT", 10485760, _int(4), "Maximum size of an index file."),
    Key("message.max.bytes", "INT", 1048588, _int(0), "Largest record batch accepted."),
    Key(
        "log.flush.policy",
        "STRING",
        "fsync",
        _parse_enum(FLUSH_POLICIES),
        "Exactly's own key. fsync: a write is acknowledged once it is on disk (survives a power "
        "cut); os: once the OS has it (survives a crash of the broker, not of the machine).",
    ),
    Key("socket.request.max.bytes", "INT", 104857600, _int(1), "Largest request accepted."),
    Key(
        "offsets.topic.num.partitions",
        "INT",
        50,
        _int(1),
        "Partitions of __consumer_offsets (fixed once the topic exists).",
    ),
    Key(
        "offsets.retention.minutes",
        "INT",
        10080,
        _int(1),
        "How long committed offsets of an empty group are kept.",
    ),
    Key(
        "group.initial.rebalance.delay.ms",
        "INT",
        3000,
        _int(0),
        "How long a new group waits for more members before its first rebalance.",
    ),
    Key("group.min.session.timeout.ms", "INT", 6000, _int(0), "Smallest session timeout allowed."),
    Key(
        "group.max.session.timeout.ms", "INT", 1800000, _int(0), "Largest session timeout allowed."
    ),
    Key(
        "transaction.state.log.num.partitions",
        "INT",
        50,
        _int(1),
        "Partitions of __transaction_state (fixed once the topic exists).",
    ),
    Key(
        "transaction.max.timeout.ms",
        "INT",
        900000,
        _int(1),
        "Largest transaction timeout a producer may ask for.",
    ),
    Key(
        "transactional.id.expiration.ms",
        "INT",
        604800000,
        _int(1),
        "How long an idle transactional id is remembered.",
    ),
    Key(
        "producer.id.expiration.ms",
        "INT",
        86400000,
        _int(1),
        "How long an idle idempotent producer's state is kept.",
    ),
    Key(
        "producer.id.expiration.check.interval.ms",
        "INT",
        600000,
        _int(1),
        "How often idle producer ids are looked for.",
    ),
    Key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "INT",
        10000,
        _int(1),
        "How often transactions past their timeout are looked for and aborted.",
    ),
    Key(
        "transaction.partition.verification.enable",
        "BOOLEAN",
        True,
        _parse_bool,
        "KIP-890: check with the coordinator that a transaction is ongoing and holds the partition "
        "before writing an older client's transactional batch to it.",
    ),
    Key(
        "transaction.two.phase.commit.enable",
        "BOOLEAN",
        False,
        _parse_bool,
        "KIP-939: let transactional producers take part in two-phase commit (InitProducerId with "
        "Enable2Pc: their transactions never time out). When false such a request gets "
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED.",
    ),
    Key(
        "transaction.version",
        "SHORT",
        2,
        _int(0, 2),
        "Exactly's key for Kafka's transaction.version feature (KIP-890), finalized at this level: "
        "2 bumps the epoch on every commit/abort and adds partitions implicitly on produce for "
        "clients that support it; 0 and 1 keep the original protocol.",
    ),
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
    # -- authentication (TLS and SASL listeners) --
    Key(
        "sasl.enabled.mechanisms",
        "LIST",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        _parse_mechanisms,
        "SASL mechanisms offered on SASL_PLAINTEXT and SASL_SSL listeners: PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512.",
    ),
    Key(
        "sasl.plain.users",
        "LIST",
        "",
        _parse_plain_users,
        "Exactly's own key (Kafka puts these in a JAAS file): the SASL/PLAIN users, "
        "USER:PASSWORD pairs separated by commas, e.g. alice:secret,bob:pw. SCRAM users are "
        "managed with AlterUserScramCredentials (`exactly users add-scram`) instead.",
    ),
    Key("ssl.keystore.type", "STRING", "PEM", _parse_enum(("PEM",)), "Only PEM is supported."),
    Key(
        "ssl.keystore.location",
        "STRING",
        None,
        _parse_optional_str,
        "PEM file with the server's certificate chain and private key, for SSL and SASL_SSL "
        "listeners.",
    ),
    Key(
        "ssl.keystore.certificate.chain",
        "STRING",
        None,
        _parse_optional_str,
        "The server's certificate chain in PEM, inline (instead of ssl.keystore.location).",
    ),
    Key(
        "ssl.keystore.key",
        "STRING",
        None,
        _parse_optional_str,
        "The server's private key in PEM, inline (with ssl.keystore.certificate.chain).",
    ),
    Key("ssl.key.password", "STRING", None, _parse_optional_str,
        "Password of an encrypted private key."),
    Key("ssl.truststore.type", "STRING", "PEM", _parse_enum(("PEM",)), "Only PEM is supported."),
    Key(
        "ssl.truststore.location",
        "STRING",
        None,
        _parse_optional_str,
        "PEM file with the CA certificates that client certificates must be signed by.",
    ),
    Key(
        "ssl.client.auth",
        "STRING",
        "none",
        _parse_enum(("none", "requested", "required")),
        "Whether TLS clients must present a certificate; its subject becomes the principal "
        "(User:CN=...,O=...) on an SSL listener.",
    ),
    # -- authorization (ACLs) --
    Key(
        "authorizer.class.name",
        "STRING",
        "",
        _parse_authorizer,
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer: check every request against "
        "the ACLs (kept in acls.json in the log dir, changed with CreateAcls/DeleteAcls); empty "
        "(the default): no authorization, every request is allowed.",
    ),
    Key(
        "super.users",
        "STRING",
        "",
        _parse_super_users,
        "Principals allowed everything, separated by semicolons, e.g. User:admin;User:ops.",
    ),
    Key(
        "allow.everyone.if.no.acl.found",
        "BOOLEAN",
        False,
        _parse_bool,
        "Allow a request on a resource that no ACL covers (else it is denied).",
    ),
    # Kafka's sample server.properties sets these two; Exactly runs one event loop, so they are
    # accepted (and checked) to let such a file load, and change nothing.
    Key("num.network.threads", "INT", 3, _int(1), "Accepted for compatibility; no effect."),
    Key("num.io.threads", "INT", 8, _int(1), "Accepted for compatibility; no effect."),
)

KEYS: dict[str, Key] = {k.name: k for k in _KEYS}


def _default(key: Key) -> Any:
    # List defaults are written as text, the way a user would write them.
    if key.type == "LIST" and isinstance(key.default, str):
        return key.parse(key.default)
    return key.default


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


def _render(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


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
        values = {name: _default(key) for name, key in KEYS.items()}
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
        lo = self._values["group.min.session.timeout.ms"]
        hi = self._values["group.max.session.timeout.ms"]
        if lo > hi:
            raise ConfigError(
                f"group.min.session.timeout.ms={lo} is above group.max.session.timeout.ms={hi}: "
                "the minimum must not exceed the maximum"
            )
        listeners = self._values["listeners"]
        if any(lst.name in ("SSL", "SASL_SSL") for lst in listeners) and not (
            self._values["ssl.keystore.location"]
            or (self._values["ssl.keystore.certificate.chain"] and self._values["ssl.keystore.key"])
        ):
            raise ConfigError(
                f"listeners={_render(listeners)!r} has a TLS listener but no server certificate: "
                "set ssl.keystore.location (PEM with the certificate chain and private key)"
            )
        if any(lst.name.startswith("SASL_") for lst in listeners) and not self._values[
            "sasl.enabled.mechanisms"
        ]:
            raise ConfigError("a SASL listener needs sasl.enabled.mechanisms (e.g. SCRAM-SHA-512)")
        ports = [lst.port for lst in listeners if lst.port != 0]
        if len(ports) != len(set(ports)):
            raise ConfigError(f"listeners={_render(listeners)!r}: two listeners share a port")
        advertised = self._values["advertised.listeners"]
        if advertised is not None:
            names = {lst.name for lst in self._values["listeners"]}
            for lst in advertised:
                if lst.name not in names:
                    raise ConfigError(
                        f"advertised.listeners={_render(advertised)!r}: listener {lst.name} is "
                        f"not in listeners={_render(self._values['listeners'])!r}"
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
        v = self._values
        if v["log.retention.ms"] is not None:
            ms: int = v["log.retention.ms"]
            return ms
        if v["log.retention.minutes"] is not None:
            minutes: int = v["log.retention.minutes"]
            return -1 if minutes < 0 else minutes * MINUTE_MS
        hours: int = v["log.retention.hours"]
        return -1 if hours < 0 else hours * HOUR_MS

    @property
    def log_roll_ms(self) -> int:
        ms = self._values["log.roll.ms"]
        if ms is not None:
            return int(ms)
        return int(self._values["log.roll.hours"]) * HOUR_MS

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
        return dict(item.partition(":")[::2] for item in self._values["sasl.plain.users"])

    @property
    def log_dir(self) -> Path:
        return Path(self._values["log.dirs"][0])

    def log_config(self) -> LogConfig:
        return LogConfig(
            segment_bytes=self._values["log.segment.bytes"],
            segment_ms=self.log_roll_ms,
            retention_ms=self.log_retention_ms,
            retention_bytes=self._values["log.retention.bytes"],
            index_interval_bytes=self._values["log.index.interval.bytes"],
            segment_index_bytes=self._values["log.index.size.max.bytes"],
            max_message_bytes=self._values["message.max.bytes"],
            flush_policy=self._values["log.flush.policy"],
        )

    def items(self) -> list[ConfigEntry]:
        """Every known key as DescribeConfigs reports it (aliases not repeated)."""
        out = []
        for name, key in KEYS.items():
            explicit = name in self._explicit
            if name in ("log.retention.ms", "log.roll.ms", "advertised.listeners"):
                value = _render(self[name]) if explicit else None
            else:
                value = _render(self._values[name])
            if name in SENSITIVE_KEYS:
                value = None
            out.append(
                ConfigEntry(
                    name=name,
                    value=value,
                    is_default=not explicit,
                    source=CONFIG_SOURCE_STATIC_BROKER if explicit else CONFIG_SOURCE_DEFAULT,
                    config_type=CONFIG_TYPE_IDS[key.type],
                    documentation=key.doc,
                    is_sensitive=name in SENSITIVE_KEYS,
                )
            )
        return out

    def as_strings(self) -> dict[str, str | None]:
        """{key: value as text} with the values in force (derived keys resolved)."""
        return {name: _render(self[name]) for name in KEYS}

    def __repr__(self) -> str:
        given = {name: _render(self._values[name]) for name in sorted(self._explicit)}
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
