"""`exactly produce` and `exactly consume`: lines in, lines out, as Kafka's console tools.

These use confluent-kafka until the project's own client arrives. librdkafka's own log lines
are turned off (log_level 0): with a broker down it logs each reconnect, hundreds of lines, and
every failure that matters reaches us through delivery reports, poll or exceptions anyway.
"""

from __future__ import annotations

import signal
import sys
import time
import uuid
from types import FrameType
from typing import Any

import click

from exactly.cli.common import (
    bootstrap_option,
    fail,
    kafka_error_text,
    parse_pairs,
    read_client_properties,
    require_broker,
    timeout_option,
)

# Kafka's console tools take their reader/formatter settings with --property; anything else
# given there goes to the client's config.
_PRODUCE_READER_KEYS = ("parse.key", "key.separator")
_CONSUME_FORMATTER_KEYS = ("print.key", "key.separator")


def _true(text: str, option: str) -> bool:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise click.BadParameter(f"{text!r} must be true or false", param_hint=option)


def _config_file_option(kind: str) -> Any:
    return click.option(
        f"--{kind}.config", f"{kind}_config", type=click.Path(dir_okay=False), default=None,
        metavar="FILE", help=f"A properties file of {kind} configs, as Kafka's console tools take "
        f"(sasl.jaas.config gives sasl.username/sasl.password); --{kind}-property and "
        "--property win over it.")


@click.command()
@click.argument("topic")
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
    "key is a producer config (librdkafka name). Repeatable.",
)
@click.option(
    "--producer-property",
    "producer_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A producer config (librdkafka name). Repeatable.",
)
@_config_file_option("producer")
@timeout_option
def produce(
    topic: str,
    bootstrap: str,
    key_separator: str | None,
    properties: tuple[str, ...],
    producer_properties: tuple[str, ...],
    producer_config: str | None,
    timeout_ms: int,
) -> None:
    """Write each line of stdin to TOPIC as one record (idempotent, acks=all)."""
    from confluent_kafka import KafkaException, Producer

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

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "exactly-console-producer",
        "enable.idempotence": True,
        "acks": "all",
        # A broker that goes away fails the run within --timeout instead of librdkafka's 5 min.
        "message.timeout.ms": timeout_ms,
        "linger.ms": 5,
        "log_level": 0,
    }
    if producer_config is not None:
        config.update(read_client_properties(producer_config))
    config.update(props)
    config.update(parse_pairs(producer_properties, "--producer-property"))
    require_broker(str(config["bootstrap.servers"]), timeout_ms)
    try:
        producer = Producer(config)
    except KafkaException as exc:
        fail(f"cannot create the producer: {kafka_error_text(exc)}", 2)

    delivered = 0
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failed.append(f"{err.str()} ({err.name()})")

    lineno = 0
    interrupted = False
    try:
        for raw in sys.stdin.buffer:
            lineno += 1
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            key: bytes | None = None
            value = line
            if parse_key:
                key, found, value = line.partition(sep)
                if not found:
                    producer.flush(30)
                    fail(
                        f"line {lineno} has no key separator {separator!r}: "
                        f"{line[:80].decode(errors='replace')!r}"
                    )
            while True:
                try:
                    producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
    except KeyboardInterrupt:
        interrupted = True
    try:
        flush_s = int(config["message.timeout.ms"]) / 1000 + 5
    except (KeyError, ValueError):
        flush_s = 305.0  # librdkafka's default message timeout, and some
    remaining = producer.flush(flush_s)
    if remaining:
        failed.append(f"{remaining} record(s) still undelivered")
    click.echo(f"Produced {delivered} record(s) to {topic}.", err=True)
    if failed:
        fail(f"{len(failed)} record(s) failed, first: {failed[0]}")
    if interrupted:
        sys.exit(130)


@click.command()
@click.argument("topic")
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
    "key is a consumer config (librdkafka name). Repeatable.",
)
@click.option(
    "--consumer-property",
    "consumer_properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A consumer config (librdkafka name). Repeatable.",
)
@_config_file_option("consumer")
@timeout_option
def consume(
    topic: str,
    bootstrap: str,
    from_beginning: bool,
    group: str | None,
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
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    props = parse_pairs(properties, "--property")
    if "print.key" in props:
        print_key = _true(props.pop("print.key"), "--property")
    separator = props.pop("key.separator", "\t").encode()

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "exactly-console-consumer",
        "isolation.level": isolation_level,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": False,
        "log_level": 0,
    }
    if group is None:
        # librdkafka needs a group id even for a consumer that only assigns; this one is never
        # joined and nothing is committed under it.
        config["group.id"] = f"exactly-console-consumer-{uuid.uuid4().hex[:12]}"
        config["enable.auto.commit"] = False
    else:
        config["group.id"] = group
    if consumer_config is not None:
        config.update(read_client_properties(consumer_config))
    config.update(props)
    config.update(parse_pairs(consumer_properties, "--consumer-property"))
    require_broker(str(config["bootstrap.servers"]), timeout_ms)
    try:
        consumer = Consumer(config)
    except KafkaException as exc:
        fail(f"cannot create the consumer: {kafka_error_text(exc)}", 2)

    stop = False

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)

    if group is None:
        try:
            md = consumer.list_topics(topic, timeout=timeout_ms / 1000)
        except KafkaException as exc:
            consumer.close()
            fail(f"cannot read topic {topic!r} from {bootstrap}: {kafka_error_text(exc)}")
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            consumer.close()
            reason = (
                "does not exist"
                if t is None
                or t.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
                else f"cannot be read: {t.error.str()}"
            )
            fail(f"topic {topic!r} {reason}")
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in sorted(t.partitions)])
    else:
        consumer.subscribe([topic])

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
            msg = consumer.poll(wait)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                click.echo(f"error: {err.str()} ({err.name()})", err=True)
                if err.fatal() or err.code() in (
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError.TOPIC_AUTHORIZATION_FAILED,
                ):
                    code = 1
                    break
                continue
            last = time.monotonic()
            value = msg.value()
            line = b"null" if value is None else value
            if print_key:
                key = msg.key()
                line = (b"null" if key is None else key) + separator + line
            out.write(line + b"\n")
            out.flush()
            count += 1
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `exactly consume ... | head`
        pass
    finally:
        consumer.close()
    click.echo(f"Processed a total of {count} messages", err=True)
    sys.exit(code)
