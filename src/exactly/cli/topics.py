"""`exactly topics ...`: create, list, describe and delete topics, as Kafka's kafka-topics does.

These use confluent-kafka's AdminClient until the project's own admin client arrives.
"""

from __future__ import annotations

from typing import Any

import click

from exactly.cli.common import bootstrap_option, fail, kafka_error_text, parse_pairs

timeout_option = click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the broker.",
)


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    # No auto-creation: describing a topic that does not exist must not create it.
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "exactly-topics",
            "allow.auto.create.topics": False,
        }
    )


def _metadata(admin: Any, timeout: float, topic: str | None = None) -> Any:
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        fail(f"cannot get metadata: {kafka_error_text(exc)}")


@click.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command()
@click.argument("topic")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="Number of partitions (default: the broker's num.partitions).",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=None,
    help="Copies of each partition (default: the broker's).",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A topic config, e.g. retention.ms=60000. Repeatable.",
)
@bootstrap_option
@timeout_option
def create(
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    bootstrap: str,
    timeout: float,
) -> None:
    """Create TOPIC."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    new = NewTopic(
        topic,
        num_partitions=-1 if partitions is None else partitions,
        replication_factor=-1 if replication_factor is None else replication_factor,
        config=parse_pairs(configs, "--config"),
    )
    admin = _admin(bootstrap)  # keep a reference: the futures die with the client
    futures = admin.create_topics([new], request_timeout=timeout)
    try:
        futures[topic].result(timeout=timeout + 5)
    except KafkaException as exc:
        fail(f"cannot create topic {topic!r}: {kafka_error_text(exc)}")
    except TimeoutError:
        fail(f"cannot create topic {topic!r}: no answer from {bootstrap} in {timeout:g}s")
    click.echo(f"Created topic {topic}.")


@topics.command("list")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (__*).")
@bootstrap_option
@timeout_option
def list_(exclude_internal: bool, bootstrap: str, timeout: float) -> None:
    """List the topics, one per line."""
    admin = _admin(bootstrap)
    md = _metadata(admin, timeout)
    for name in sorted(md.topics):
        if exclude_internal and name.startswith("__"):
            continue
        click.echo(name)


@topics.command()
@click.argument("topic", required=False)
@bootstrap_option
@timeout_option
def describe(topic: str | None, bootstrap: str, timeout: float) -> None:
    """Describe TOPIC (or every topic): partitions, leader, replicas, configs."""
    from confluent_kafka import KafkaError

    admin = _admin(bootstrap)
    md = _metadata(admin, timeout, topic)
    names = [topic] if topic else sorted(md.topics)
    for name in names:
        t = md.topics.get(name)
        if t is None or (
            t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            fail(f"topic {name!r} does not exist")
        if t.error is not None:
            fail(f"cannot describe topic {name!r}: {t.error.str()} ({t.error.name()})")
        parts = [t.partitions[p] for p in sorted(t.partitions)]
        rf = len(parts[0].replicas) if parts else 0
        configs = _non_default_configs(admin, name, timeout)
        click.echo(
            f"Topic: {name}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\t"
            f"Configs: {configs}"
        )
        for p in parts:
            line = (
                f"\tTopic: {name}\tPartition: {p.id}\tLeader: {p.leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}"
            )
            if p.error is not None:
                line += f"\tError: {p.error.name()}"
            click.echo(line)


def _non_default_configs(admin: Any, topic: str, timeout: float) -> str:
    """ "k=v,..." for the topic's non-default configs; "" when the broker cannot say."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ConfigSource

    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        result = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout=timeout
        )
    except (KafkaException, TimeoutError):  # a broker without DescribeConfigs: no configs
        return ""
    pairs = [
        f"{e.name}={e.value}"
        for e in result.values()
        if getattr(e.source, "value", e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        and not e.is_sensitive
    ]
    return ",".join(sorted(pairs))


@topics.command()
@click.argument("topic")
@bootstrap_option
@timeout_option
def delete(topic: str, bootstrap: str, timeout: float) -> None:
    """Delete TOPIC."""
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap)  # keep a reference: the futures die with the client
    futures = admin.delete_topics([topic], request_timeout=timeout)
    try:
        futures[topic].result(timeout=timeout + 5)
    except KafkaException as exc:
        fail(f"cannot delete topic {topic!r}: {kafka_error_text(exc)}")
    except TimeoutError:
        fail(f"cannot delete topic {topic!r}: no answer from {bootstrap} in {timeout:g}s")
    click.echo(f"Deleted topic {topic}.")
