"""Small helpers shared by the commands."""

from __future__ import annotations

import re
import socket
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, TypeVar

import click

T = TypeVar("T")

DEFAULT_BOOTSTRAP = "localhost:9092"

bootstrap_option = click.option(
    "--bootstrap-server",
    "bootstrap",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    metavar="HOST:PORT",
    help="The broker to connect to.",
)


class TimeoutType(click.ParamType):
    """A duration in milliseconds, as Kafka's tools take it; `30s` and `500ms` are accepted too."""

    name = "ms"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        scale, number = (1000, text[:-1]) if text.endswith("s") and not text.endswith("ms") else (
            1, text.removesuffix("ms"))
        try:
            ms = round(float(number) * scale)
        except ValueError:
            self.fail(f"{value!r} is not a duration in ms (e.g. 5000, or 5s)", param, ctx)
        if ms < 1:
            self.fail(f"{value!r} must be at least 1 ms", param, ctx)
        return ms


timeout_option = click.option(
    "--timeout",
    "timeout_ms",
    type=TimeoutType(),
    default=30_000,
    show_default=True,
    metavar="MS",
    help="How long to wait for the broker, in ms (5s also works). With no broker there, "
    "the command says so within it.",
)


def topic_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """TOPIC as an argument or as --topic (Kafka's tools' spelling); see topic_name."""
    func = click.option("--topic", "topic_option", default=None, metavar="TOPIC",
                        help="The topic (the same as the TOPIC argument, as Kafka's tools "
                        "take it).")(func)
    return click.argument("topic", required=False)(func)


def topic_name(argument: str | None, option: str | None, required: bool) -> str | None:
    if argument is not None and option is not None and argument != option:
        raise click.UsageError(f"two topics given: {argument!r} and --topic {option!r}; give one")
    topic = argument if argument is not None else option
    if topic is None and required:
        raise click.UsageError("give the topic: TOPIC or --topic TOPIC")
    return topic


def required_topic(argument: str | None, option: str | None) -> str:
    name = topic_name(argument, option, required=True)
    assert name is not None
    return name


def require_broker(bootstrap: str, timeout_ms: int) -> None:
    """Exit with "no broker at HOST:PORT (why)" unless one of the bootstrap servers accepts a
    TCP connection within `timeout_ms`. Checked before any client starts, so that a broker that
    is down is said in one line, at once, rather than by a client retrying (and logging) until
    its own timeouts run out."""
    deadline = time.monotonic() + timeout_ms / 1000
    reasons: list[str] = []
    for server in (s.strip() for s in bootstrap.split(",") if s.strip()):
        host, sep, port = server.rpartition(":")
        if not sep or not port.isdigit():
            fail(f"{server!r} is not HOST:PORT", 2)
        left = deadline - time.monotonic()
        if left <= 0:
            reasons.append(f"{server}: no answer in {timeout_ms} ms")
            continue
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=left).close()
            return
        except TimeoutError:
            reasons.append(f"{server}: no answer in {timeout_ms} ms")
        except OSError as exc:
            reasons.append(f"{server}: {exc.strerror or exc}")
    fail(f"no broker at {bootstrap} ({'; '.join(reasons) or 'no server given'}); start one with "
         "`exactly broker` or give --bootstrap-server HOST:PORT")


def parse_pairs(pairs: Iterable[str], option: str) -> dict[str, str]:
    """["k=v", ...] -> {k: v}, in order; a later pair wins."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=option)
        out[key.strip()] = value
    return out


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def kafka_error_text(exc: BaseException) -> str:
    """A KafkaException's message without the KafkaError(...) wrapping."""
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "str"):
        err = args[0]
        return f"{err.str()} ({err.name()})"
    return str(exc)


# -- the commands that use Exactly's own admin client ------------------------------------------

command_config_option = click.option(
    "--command-config",
    "command_config",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="A properties file of client settings (security.protocol, sasl.mechanism, "
    "sasl.username, sasl.password or sasl.jaas.config, ...), as Kafka's tools take.",
)

def connection_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--bootstrap-server`, `--command-config` and `--timeout`: what every command that talks to
    the broker takes, in this order in its help."""
    return bootstrap_option(command_config_option(timeout_option(func)))


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def read_client_properties(path: str) -> dict[str, str]:
    """A client properties file (--command-config, --producer.config, --consumer.config) as
    key -> value; Kafka's sasl.jaas.config becomes sasl.username and sasl.password, the names
    Exactly's client and librdkafka take. A file that cannot be read exits with status 2."""
    from exactly.server.config import ConfigError, read_properties_file

    try:
        props = {k: v for k, (v, _where) in read_properties_file(path).items()}
    except ConfigError as exc:
        fail(str(exc), 2)
    jaas = props.pop("sasl.jaas.config", None)
    if jaas is not None:
        options = dict(_JAAS_OPTION.findall(jaas))
        for name in ("username", "password"):
            if name in options:
                props.setdefault(f"sasl.{name}", options[name].replace('\\"', '"'))
    return props


def client_settings(bootstrap: str, command_config: str | None, client_id: str) -> dict[str, Any]:
    """bootstrap.servers and the command config's settings that Exactly's client knows; other
    (Java-only) keys are skipped with a warning, as Kafka's tools warn about unused settings."""
    from exactly.client.config import _KEYS as CLIENT_KEYS

    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": client_id}
    if command_config is None:
        return settings
    props = read_client_properties(command_config)
    for key in sorted(props):
        if key == "bootstrap.servers":
            continue  # --bootstrap-server wins, as in Kafka's tools
        if key in CLIENT_KEYS:
            settings[key] = props[key]
        else:
            click.echo(f"warning: {command_config}: {key} is not a setting of Exactly's client; "
                       "ignored", err=True)
    return settings


def open_admin(bootstrap: str, command_config: str | None, client_id: str,
               timeout_ms: int) -> Any:
    """Exactly's blocking Admin client, its requests bounded by `timeout_ms`; a clean exit on a
    bad setting or when no broker is there."""
    from exactly.client import Admin, ConfigError

    settings = client_settings(bootstrap, command_config, client_id)
    settings["request.timeout.ms"] = timeout_ms
    settings["socket.connection.setup.timeout.ms"] = timeout_ms
    require_broker(bootstrap, timeout_ms)
    try:
        return Admin(settings)
    except ConfigError as exc:
        fail(f"bad client settings: {exc}", 2)


def admin_call(what: str, call: Callable[[], T]) -> T:
    """`call()`'s result; a clean exit naming `what` if the broker refused it or cannot be
    reached. The admin client's errors often name the same action already ("describe
    transaction 'x': ..."): that prefix is not added twice."""
    from exactly.client import KafkaError

    try:
        return call()
    except KafkaError as exc:
        message = str(exc)
        fail(message if message.startswith(f"{what}:") else f"{what}: {message}")
    except (OSError, TimeoutError) as exc:
        fail(f"{what}: cannot reach the broker: {exc}")


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Columns separated by two spaces and padded, headers first, as kafka-transactions.sh."""
    table = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    for r in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
