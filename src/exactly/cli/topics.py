"""`exactly topics ...`: create, list, describe, alter (add partitions) and delete topics, as
Kafka's kafka-topics does.

Uses Exactly's own Admin client (so `--command-config` reaches SASL and TLS listeners the same
way `exactly transactions` does). The topic is a positional argument or `--topic`, as
kafka-topics.sh takes it.
"""

from __future__ import annotations

from typing import Any

import click

from exactly.cli.common import (
    admin_call,
    connection_options,
    fail,
    open_admin,
    parse_pairs,
    topic_name,
    topic_options,
)


def _admin(bootstrap: str, command_config: str | None, timeout_ms: int) -> Any:
    return open_admin(bootstrap, command_config, "exactly-topics", timeout_ms)


@click.group()
def topics() -> None:
    """Create, list, describe, alter (add partitions) and delete topics."""


@topics.command()
@topic_options
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
@connection_options
def create(
    topic: str | None,
    topic_option: str | None,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    bootstrap: str,
    command_config: str | None,
    timeout_ms: int,
) -> None:
    """Create TOPIC."""
    from exactly.client import NewTopic

    name = topic_name(topic, topic_option, required=True)
    assert name is not None
    new = NewTopic(name, -1 if partitions is None else partitions,
                   -1 if replication_factor is None else replication_factor,
                   parse_pairs(configs, "--config"))
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        admin_call(f"create topic {name!r}", lambda: admin.create_topics([new]))
    click.echo(f"Created topic {name}.")


@topics.command("list")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (__*).")
@connection_options
def list_(exclude_internal: bool, bootstrap: str, command_config: str | None,
          timeout_ms: int) -> None:
    """List the topics, one per line."""
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        names = admin_call("list topics", lambda: admin.list_topics(include_internal=True))
    for name in names:
        if not (exclude_internal and name.startswith("__")):
            click.echo(name)


@topics.command()
@topic_options
@connection_options
def describe(topic: str | None, topic_option: str | None, bootstrap: str,
             command_config: str | None, timeout_ms: int) -> None:
    """Describe TOPIC (or every topic): partitions, leader, replicas, configs."""
    from exactly.client import KafkaError
    from exactly.protocol.errors import ErrorCode

    name = topic_name(topic, topic_option, required=False)
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        names = [name] if name else admin_call("list topics",
                                               lambda: admin.list_topics(include_internal=True))

        def describe_or_missing() -> dict[str, Any]:
            try:
                return admin.describe_topics(names)  # type: ignore[no-any-return]
            except KafkaError as exc:
                if exc.code == ErrorCode.unknown_topic_or_partition and name:
                    fail(f"topic {name!r} does not exist")
                raise

        described = admin_call("describe topics", describe_or_missing)
        for t in (described[n] for n in names if n in described):
            configs = _non_default_configs(admin, t.name)
            rf = len(t.partitions[0].replicas) if t.partitions else 0
            click.echo(f"Topic: {t.name}\tPartitionCount: {len(t.partitions)}\t"
                       f"ReplicationFactor: {rf}\tConfigs: {configs}")
            for p in t.partitions:
                click.echo(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                           f"Replicas: {','.join(map(str, p.replicas))}\t"
                           f"Isr: {','.join(map(str, p.isr))}")


def _non_default_configs(admin: Any, topic: str) -> str:
    """ "k=v,..." for the topic's own configs; "" when the broker cannot say."""
    from exactly.client import KafkaError

    try:
        entries = admin.describe_configs(topic)
    except KafkaError:  # a broker without DescribeConfigs, or no right to it: no configs
        return ""
    return ",".join(sorted(f"{e.name}={e.value}" for e in entries.values()
                           if e.source == "TOPIC_CONFIG" and not e.is_sensitive))


@topics.command()
@topic_options
@connection_options
def delete(topic: str | None, topic_option: str | None, bootstrap: str,
           command_config: str | None, timeout_ms: int) -> None:
    """Delete TOPIC."""
    name = topic_name(topic, topic_option, required=True)
    assert name is not None
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        admin_call(f"delete topic {name!r}", lambda: admin.delete_topics([name]))
    click.echo(f"Deleted topic {name}.")


@topics.command()
@topic_options
@click.option("--partitions", type=click.IntRange(min=1), required=True,
              help="The new number of partitions; more than now (partitions are only added).")
@connection_options
def alter(topic: str | None, topic_option: str | None, partitions: int, bootstrap: str,
          command_config: str | None, timeout_ms: int) -> None:
    """Add partitions to TOPIC, up to --partitions in all (kafka-topics.sh --alter). Records
    with a key may go to another partition from now on."""
    name = topic_name(topic, topic_option, required=True)
    assert name is not None
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        described = admin_call(f"describe topic {name!r}", lambda: admin.describe_topics([name]))
        now = len(described[name].partitions)
        # Checked here, in Kafka's controller's words: Exactly's broker words its refusal else.
        if partitions == now:
            fail(f"Topic already has {now} partition(s).")
        if partitions < now:
            fail(f"The topic {name} currently has {now} partition(s); {partitions} would not be "
                 "an increase.")
        admin_call(f"create partitions of {name!r}",
                   lambda: admin.create_partitions({name: partitions}))
    click.echo(f"Altered topic {name}: {now} -> {partitions} partitions.")
