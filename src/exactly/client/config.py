"""Client configuration with Kafka's client keys. Values may be given as Python values or as the
strings a properties file holds; an unknown key or a bad value raises ConfigError naming it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exactly.client.errors import ConfigError

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise TypeError("a number is needed, not a boolean")
        number = int(value)
        if lo is not None and number < lo:
            raise ValueError(f"must be at least {lo}")
        if hi is not None and number > hi:
            raise ValueError(f"must be at most {hi}")
        return number
    return parse


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError("must be true or false")


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip()
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text
    return parse


def _acks(value: Any) -> int:
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ValueError("must be all, -1, 0 or 1")


def _str(value: Any) -> str:
    return str(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class _Key:
    parse: Callable[[Any], Any]
    default: Any


_KEYS: dict[str, _Key] = {
    "bootstrap.servers": _Key(_str, None),
    "client.id": _Key(_str, "exactly"),
    "request.timeout.ms": _Key(_int(1), 30_000),
    "socket.connection.setup.timeout.ms": _Key(_int(1), 10_000),
    "metadata.max.age.ms": _Key(_int(0), 300_000),
    "retries": _Key(_int(0), 2_147_483_647),
    "retry.backoff.ms": _Key(_int(0), 100),
    "reconnect.backoff.ms": _Key(_int(0), 50),
    # producer
    "acks": _Key(_acks, -1),
    "enable.idempotence": _Key(_bool, True),
    "linger.ms": _Key(_int(0), 5),
    "batch.size": _Key(_int(1), 65_536),
    "max.request.size": _Key(_int(1), 1_048_576),
    "max.in.flight.requests.per.connection": _Key(_int(1, 5), 5),
    "delivery.timeout.ms": _Key(_int(1), 120_000),
    "compression.type": _Key(_choice(*COMPRESSION_TYPES), "none"),
    "buffer.memory": _Key(_int(1), 33_554_432),
    # transactions
    "transactional.id": _Key(_optional_str, None),
    "transaction.timeout.ms": _Key(_int(1), 60_000),
    "transaction.two.phase.commit.enable": _Key(_bool, False),
    # KIP-1309 (TransactionSession): 0 / -1 leave heartbeats off; see session_state.heartbeat_timing
    "transaction.heartbeat.interval.ms": _Key(_int(0), 0),
    "transaction.session.timeout.ms": _Key(_int(-1), -1),
    # consumer
    "group.id": _Key(_optional_str, None),
    "group.instance.id": _Key(_optional_str, None),
    "session.timeout.ms": _Key(_int(1), 45_000),
    "heartbeat.interval.ms": _Key(_int(1), 3_000),
    "max.poll.interval.ms": _Key(_int(1), 300_000),
    "max.poll.records": _Key(_int(1), 500),
    "auto.offset.reset": _Key(_choice("earliest", "latest", "none"), "latest"),
    "enable.auto.commit": _Key(_bool, True),
    "auto.commit.interval.ms": _Key(_int(0), 5_000),
    "isolation.level": _Key(_choice("read_committed", "read_uncommitted"), "read_committed"),
    "fetch.min.bytes": _Key(_int(0), 1),
    "fetch.max.bytes": _Key(_int(1), 52_428_800),
    "fetch.max.wait.ms": _Key(_int(0), 500),
    "max.partition.fetch.bytes": _Key(_int(1), 1_048_576),
    "partition.assignment.strategy": _Key(_choice("range", "roundrobin"), "range"),
    # share consumer (KIP-932): implicit accepts what was delivered on the next poll
    "share.acknowledgement.mode": _Key(_choice("implicit", "explicit"), "implicit"),
    # security: TLS and SASL (librdkafka's key names; Java's truststore name is accepted too)
    "security.protocol": _Key(_choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
                              "PLAINTEXT"),
    "sasl.mechanism": _Key(_choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), "PLAIN"),
    "sasl.username": _Key(_optional_str, None),
    "sasl.password": _Key(_optional_str, None),
    "ssl.ca.location": _Key(_optional_str, None),
    "ssl.truststore.location": _Key(_optional_str, None),
    # "none" (librdkafka) or "" (Java) turn off the host name check
    "ssl.endpoint.identification.algorithm": _Key(
        lambda v: "none" if str(v).strip() == "" else _choice("https", "none")(v), "https"),
    "enable.ssl.certificate.verification": _Key(_bool, True),
    "ssl.certificate.location": _Key(_optional_str, None),
    "ssl.key.location": _Key(_optional_str, None),
    "ssl.key.password": _Key(_optional_str, None),
}


class ClientConfig:
    """Typed, checked client settings: `config["linger.ms"]` is an int, and so on."""

    def __init__(self, values: Mapping[str, Any] | None = None, **overrides: Any) -> None:
        merged = {**(values or {}), **{k.replace("_", "."): v for k, v in overrides.items()}}
        self._values: dict[str, Any] = {name: key.default for name, key in _KEYS.items()}
        for name, raw in merged.items():
            key = _KEYS.get(name)
            if key is None:
                raise ConfigError(f"unknown client config key {name!r}; known keys: "
                                  f"{', '.join(sorted(_KEYS))}")
            try:
                self._values[name] = key.parse(raw)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"bad value {raw!r} for {name}: {exc}") from None
        if not self._values["bootstrap.servers"]:
            raise ConfigError("bootstrap.servers is required, e.g. 'localhost:9092'")
        if self._values["transaction.two.phase.commit.enable"] and not self._values["transactional.id"]:
            raise ConfigError("transaction.two.phase.commit.enable needs a transactional.id")

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def with_overrides(self, **values: Any) -> ClientConfig:
        return ClientConfig({**self._values, **{k.replace("_", "."): v for k, v in values.items()}})

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        """bootstrap.servers as (host, port) pairs."""
        out = []
        for item in str(self._values["bootstrap.servers"]).split(","):
            item = item.strip()
            if "://" in item:
                item = item.split("://", 1)[1]
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"bad bootstrap.servers entry {item!r}: expected HOST:PORT")
            out.append((host.strip("[]"), int(port)))
        return out


def as_config(config: ClientConfig | Mapping[str, Any]) -> ClientConfig:
    return config if isinstance(config, ClientConfig) else ClientConfig(config)
