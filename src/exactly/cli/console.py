"""`exactly produce` and `exactly consume`: lines in, lines out, as Kafka's console tools
(kafka-console-producer.sh, kafka-console-consumer.sh), on Exactly's own client, so that the
command needs no C client library (issue 18).

Settings come as Kafka's tools take them: a properties file (--producer.config/--consumer.config),
then --property (whose reader/formatter keys, parse.key/print.key/key.separator, the tool itself
takes), then --producer-property/--consumer-property. A key Exactly's client does not know is
skipped with a warning, as Kafka's clients warn about a configuration "supplied but not used";
a known key with a bad value is an error naming it. The client's log lines stay off: every
failure that matters reaches the command through an exception or a record's result.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from exactly.cli.common import (
    admin_call,
    bootstrap_option,
    client_settings,
    fail,
    parse_pairs,
    require_broker,
    required_topic,
    timeout_option,
    topic_options,
)

if TYPE_CHECKING:
    from exactly.client import ClientConfig  # imported when a command runs: --help stays quick

# A large produce from a pipe or file says how far it got every this many records (stderr);
# a smaller one, or one typed at a terminal, says nothing until the end.
PROGRESS_EVERY = 100_000


def _true(text: str, option: str) -> bool:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise click.BadParameter(f"{text!r} must be true or false", param_hint=option)


def _config_file_option(kind: str) -> Any:
    # --command-config is Kafka 4.2's name for the same file (KIP-1147), as the other tools take.
    return click.option(
        f"--{kind}.config", "--command-config", f"{kind}_config", type=click.Path(dir_okay=False),
        default=None, metavar="FILE", help=f"A properties file of {kind} configs, as Kafka's "
        "console tools take (sasl.jaas.config gives sasl.username/sasl.password); "
        f"--{kind}-property and --property win over it.")


def _client_config(kind: str, bootstrap: str, config_file: str | None,
                   defaults: Mapping[str, Any], layers: Mapping[str, Mapping[str, str]]
                   ) -> ClientConfig:
    """The checked ClientConfig: `defaults`, then the file, then each of `layers` (option name
    -> pairs) in order. Unknown keys are skipped with a warning; a bad value exits 2."""
    from exactly.client import ClientConfig, ConfigError
    from exactly.client.config import _KEYS as CLIENT_KEYS

    settings = {**defaults, **client_settings(bootstrap, config_file, f"exactly-console-{kind}")}
    for option, pairs in layers.items():
        for key, value in pairs.items():
            if key in CLIENT_KEYS:
                settings[key] = value
            else:
                click.echo(f"warning: {option}: {key} is not a setting of Exactly's client; "
                           "ignored", err=True)
    try:
        return ClientConfig(settings)
    except ConfigError as exc:
        fail(f"bad {kind} settings: {exc}", 2)


def _quiet_client_logs() -> None:
    """No client log lines on the terminal: without a handler of its own, Python would print
    the client's warnings (a reconnect, a commit retried) through its last-resort handler."""
    logging.getLogger("exactly").addHandler(logging.NullHandler())


class _Tally:
    """Delivered and failed records, counted per batch (a batch's records succeed or fail
    together), so that a large produce keeps no future per record."""

    def __init__(self) -> None:
        self.pending: dict[int, Any] = {}  # id(batch) -> batch not yet counted
        self.delivered = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def add(self, future: Any) -> None:
        batch = future.batch
        self.pending[id(batch)] = batch
        if len(self.pending) > 1000:
            self.settle()

    def settle(self) -> None:
        """Count the batches that are done."""
        for key, batch in list(self.pending.items()):
            if not batch.done:
                continue
            del self.pending[key]
            if batch.error is None:
                self.delivered += batch.count
            else:
                self.failed += batch.count
                self.first_error = self.first_error or batch.error

    @property
    def undelivered(self) -> int:
        return sum(batch.count for batch in self.pending.values())


@click.command()
@topic_options
@bootstrap_option
@click.option(
    "--key-separator",
    default=None,
    metavar="SEP",
    help="Split each line at the first SEP into key and value.",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="parse.key=true / key.separator=SEP as in Kafka's console producer; any other "
    "key is a producer config (Kafka's name). Repeatable.",
)
@click.option(
    "--producer-property",
    "producer_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A producer config (Kafka's name, e.g. linger.ms=20). Repeatable.",
)
@_config_file_option("producer")
@timeout_option
def produce(
    topic: str | None,
    topic_option: str | None,
    bootstrap: str,
    key_separator: str | None,
    properties: tuple[str, ...],
    producer_properties: tuple[str, ...],
    producer_config: str | None,
    timeout_ms: int,
) -> None:
    """Write each line of stdin to TOPIC as one record (idempotent, acks=all)."""
    from exactly.client import ConfigError, KafkaError, Producer

    topic = required_topic(topic, topic_option)

    props = parse_pairs(properties, "--property")
    parse_key = key_separator is not None
    if "parse.key" in props:
        parse_key = _true(props.pop("parse.key"), "--property")
    separator = key_separator if key_separator is not None else "\t"
    if "key.separator" in props:
        separator = props.pop("key.separator")
    if parse_key and not separator:
        raise click.BadParameter(
            "the key separator must not be empty", param_hint="--key-separator"
        )
    sep = separator.encode()

    config = _client_config("producer", bootstrap, producer_config, {
        "enable.idempotence": True,
        "acks": "all",
        # A broker that goes away fails the run within --timeout, not the client's 2 minutes.
        "delivery.timeout.ms": timeout_ms,
        "request.timeout.ms": timeout_ms,
        "socket.connection.setup.timeout.ms": timeout_ms,
    }, {"--property": props,
        "--producer-property": parse_pairs(producer_properties, "--producer-property")})
    require_broker(config["bootstrap.servers"], timeout_ms)
    _quiet_client_logs()
    try:
        producer = Producer(config)
    except ConfigError as exc:
        fail(f"bad producer settings: {exc}", 2)

    tally = _Tally()
    progress = not sys.stdin.isatty()
    problem: str | None = None
    lineno = 0
    interrupted = False
    try:
        for raw in stdin_lines(sys.stdin.buffer):
            lineno += 1
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            key: bytes | None = None
            value = line
            if parse_key:
                key, found, value = line.partition(sep)
                if not found:
                    problem = (f"line {lineno} has no key separator {separator!r}: "
                               f"{line[:80].decode(errors='replace')!r}")
                    break
            tally.add(producer.send(topic, value, key))
            if progress and lineno % PROGRESS_EVERY == 0:
                click.echo(f"sent {lineno} records", err=True)
    except KeyboardInterrupt:
        interrupted = True
    except (KafkaError, OSError, TimeoutError) as exc:
        problem = f"cannot produce to {topic!r}: {exc}"
    # Whatever was sent before a problem is delivered (or fails) before the command says so.
    producer.close(config["delivery.timeout.ms"] / 1000 + 5)
    tally.settle()
    click.echo(f"Produced {tally.delivered} record(s) to {topic}.", err=True)
    if problem is not None:
        fail(problem)
    if tally.failed or tally.undelivered:
        first = tally.first_error or "not acknowledged in time"
        fail(f"{tally.failed + tally.undelivered} record(s) not acknowledged; the first "
             f"error: {first}")
    if interrupted:
        sys.exit(130)


STDIN_WAIT_S = 0.5  # the longest a Ctrl-C waits for the producer's read of stdin to notice it
STDIN_CHUNK = 65536


def stdin_lines(stream: Any) -> Iterator[bytes]:
    """The lines of `stream` (each with its b"\\n", the last one perhaps without), read as they
    come. The main thread waits for input in select() with a timeout, not in a blocking read:
    Python runs a signal's handler (Ctrl-C's KeyboardInterrupt) only when the system call it
    waits in returns, and a signal that arrives after Python's check of pending signals but
    before the read() itself has started (a thread preempted in between, on a loaded machine)
    leaves that read waiting for input that may never come. A select() returns within
    STDIN_WAIT_S whatever happens. Where select() cannot wait on a pipe (Windows), the stream
    is read as it is."""
    if os.name == "nt":
        yield from stream
        return
    fd = stream.fileno()
    pending = b""
    while True:
        if not select.select([fd], [], [], STDIN_WAIT_S)[0]:
            continue
        chunk = os.read(fd, STDIN_CHUNK)
        if not chunk:
            if pending:
                yield pending
            return
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line + b"\n"


@click.command()
@topic_options
@bootstrap_option
@click.option(
    "--from-beginning",
    is_flag=True,
    help="Start at the earliest offset when there is no committed offset.",
)
@click.option(
    "--group",
    default=None,
    help="Consumer group (subscribes and commits). Without it, every partition is "
    "read directly and nothing is committed.",
)
@click.option(
    "--partition",
    type=click.IntRange(min=0),
    default=None,
    help="Read only this partition (directly, without a group).",
)
@click.option(
    "--offset",
    default=None,
    metavar="OFFSET",
    help="With --partition: where to start, an offset or earliest/latest [latest].",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: only records of committed transactions.",
)
@click.option(
    "--max-messages", type=click.IntRange(min=1), default=None, help="Exit after this many records."
)
@click.option(
    "--timeout-ms",
    "idle_timeout_ms",
    type=click.IntRange(min=1),
    default=None,
    help="Exit when no record arrives for this long.",
)
@click.option("--print-key", is_flag=True, help="Print KEY<TAB>VALUE (key.separator changes TAB).")
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="print.key=true / key.separator=SEP as in Kafka's console consumer; any other "
    "key is a consumer config (Kafka's name). Repeatable.",
)
@click.option(
    "--consumer-property",
    "consumer_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A consumer config (Kafka's name, e.g. fetch.max.wait.ms=100). Repeatable.",
)
@_config_file_option("consumer")
@timeout_option
def consume(
    topic: str | None,
    topic_option: str | None,
    bootstrap: str,
    from_beginning: bool,
    group: str | None,
    partition: int | None,
    offset: str | None,
    isolation_level: str,
    max_messages: int | None,
    idle_timeout_ms: int | None,
    print_key: bool,
    properties: tuple[str, ...],
    consumer_properties: tuple[str, ...],
    consumer_config: str | None,
    timeout_ms: int,
) -> None:
    """Print the values of TOPIC's records, one per line."""
    from exactly.client import Admin, Consumer, KafkaError
    from exactly.protocol.errors import ErrorCode

    topic = required_topic(topic, topic_option)

    start = _start_offset(offset, partition, group, from_beginning)
    props = parse_pairs(properties, "--property")
    if "print.key" in props:
        print_key = _true(props.pop("print.key"), "--property")
    separator = props.pop("key.separator", "\t").encode()

    defaults: dict[str, Any] = {
        "isolation.level": isolation_level,
        "auto.offset.reset": "earliest" if from_beginning or start == "earliest" else "latest",
        "socket.connection.setup.timeout.ms": timeout_ms,
    }
    if group is not None:
        defaults["group.id"] = group
    config = _client_config("consumer", bootstrap, consumer_config, defaults, {
        "--property": props,
        "--consumer-property": parse_pairs(consumer_properties, "--consumer-property")})
    require_broker(config["bootstrap.servers"], timeout_ms)
    _quiet_client_logs()

    def describe() -> Any:
        with Admin(config.with_overrides(request_timeout_ms=timeout_ms)) as admin:
            try:
                return admin.describe_topics([topic])[topic]
            except KafkaError as exc:
                if exc.code == ErrorCode.unknown_topic_or_partition:
                    fail(f"topic {topic!r} does not exist")
                raise

    partitions = [p.partition for p in admin_call(f"read topic {topic!r}", describe).partitions]
    if partition is not None and partition not in partitions:
        fail(f"topic {topic!r} has no partition {partition} (it has {len(partitions)})")

    consumer = Consumer(config)
    stop = False

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    if group is not None:
        consumer.subscribe([topic])
    elif partition is not None:
        consumer.assign([(topic, partition)])
        if isinstance(start, int):
            consumer.seek((topic, partition), start)
    else:
        consumer.assign([(topic, p) for p in partitions])

    out = sys.stdout.buffer
    count = 0
    last = time.monotonic()
    code = 0
    try:
        while not stop and (max_messages is None or count < max_messages):
            wait = 0.5
            if idle_timeout_ms is not None:
                left = idle_timeout_ms / 1000 - (time.monotonic() - last)
                if left <= 0:
                    break
                wait = min(wait, left)
            # No more records than are still wanted: what poll returns is consumed (committed
            # with --group), and counted before it is printed, which a Ctrl-C may cut short.
            limit = 500 if max_messages is None else min(500, max_messages - count)
            records = consumer.poll(wait * 1000, max_records=limit)
            if not records:
                continue
            count += len(records)
            last = time.monotonic()
            lines = []
            for record in records:
                value = b"null" if record.value is None else record.value
                if print_key:
                    value = (b"null" if record.key is None else record.key) + separator + value
                lines.append(value)
            out.write(b"\n".join(lines) + b"\n")  # one write a poll, even when unbuffered (-u)
            out.flush()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `exactly consume ... | head`: stop quietly, and at exit too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (KafkaError, OSError, TimeoutError) as exc:
        click.echo(f"error: reading {topic!r}: {exc}", err=True)
        code = 1
    finally:
        consumer.close()
    click.echo(f"Processed a total of {count} messages", err=True)
    sys.exit(code)


def _start_offset(offset: str | None, partition: int | None, group: str | None,
                  from_beginning: bool) -> int | str | None:
    """--offset as an int or earliest/latest, checked against the options it goes with, as
    kafka-console-consumer.sh checks them."""
    if partition is not None and group is not None:
        raise click.UsageError("--partition reads one partition without a group: leave out "
                               "--group, or --partition")
    if offset is None:
        return None
    if partition is None:
        raise click.UsageError("--offset needs --partition")
    if from_beginning:
        raise click.UsageError("--offset and --from-beginning cannot be given together")
    if offset.lower() in ("earliest", "latest"):
        return offset.lower()
    try:
        number = int(offset)
    except ValueError:
        number = -1
    if number < 0:
        raise click.BadParameter(f"{offset!r} is not an offset (a number >= 0), earliest or "
                                 "latest", param_hint="--offset")
    return number
