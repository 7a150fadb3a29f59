"""`exactly configs` (kafka-configs.sh's shape) and `exactly topics alter --partitions`
(kafka-topics.sh --alter), run as subprocesses against a real broker over TCP: topic, broker
(its own and the cluster-wide default) and group configs described and altered, Kafka's output
lines, the broker's refusals said and exit 1; partitions added, and a decrease refused in
Kafka's words. What the command changed is read back with Exactly's Admin, not with the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from exactly.cli.configs import parse_add_config
from exactly.client import Admin, NewTopic
from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly
from tests.integration.cli.test_first_contact_cli import _closed_port


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture()
def admin(broker: EmbeddedBroker) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        yield a


def _bs(broker: EmbeddedBroker) -> tuple[str, str]:
    return ("--bootstrap-server", broker.bootstrap)


def test_add_config_takes_kafkas_syntax() -> None:
    assert parse_add_config("retention.ms=1000, cleanup.policy=[compact,delete],a.b = c") == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete", "a.b": "c"}
    assert parse_add_config("k=[x=1,y=2]") == {"k": "x=1,y=2"}
    for bad in ("k", "k=v=w", "=v", "k=v,,j=w"):
        with pytest.raises(click.BadParameter, match='"key=val" or "key=\\[val1,val2\\]"'):
            parse_add_config(bad)


def test_topic_configs(broker: EmbeddedBroker, admin: Admin, tmp_path: Path) -> None:
    admin.create_topics([NewTopic("cfg-topic", 1)])
    out = exactly("configs", *_bs(broker), "--alter", "--topic", "cfg-topic", "--add-config",
                  "retention.ms=3600000,cleanup.policy=[compact,delete]").stdout
    assert out == "Completed updating config for topic cfg-topic.\n"
    configs = admin.describe_configs("cfg-topic")
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact,delete"

    out = exactly("configs", *_bs(broker), "--describe", "--entity-type", "topics",
                  "--entity-name", "cfg-topic").stdout
    assert out.splitlines() == [
        "Dynamic configs for topic cfg-topic are:",
        ("  cleanup.policy=compact,delete sensitive=false "
         "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}"),
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}",
    ]
    everything = exactly("configs", *_bs(broker), "--describe", "--topic", "cfg-topic",
                         "--all").stdout.splitlines()
    assert everything[0] == "All configs for topic cfg-topic are:"
    assert ("  compression.type=producer sensitive=false "
            "synonyms={DEFAULT_CONFIG:compression.type=producer}") in everything
    assert len(everything) - 1 == len(configs)

    exactly("configs", *_bs(broker), "--alter", "--topic", "cfg-topic", "--delete-config",
            "retention.ms")
    assert admin.describe_configs("cfg-topic")["retention.ms"].source == "DEFAULT_CONFIG"
    (tmp_path / "topic.properties").write_text("# as --add-config-file takes it\nsegment.ms=600000\n")
    exactly("configs", *_bs(broker), "--alter", "--topic", "cfg-topic", "--add-config-file",
            str(tmp_path / "topic.properties"))
    assert admin.describe_configs("cfg-topic")["segment.ms"].value == "600000"
    proc = exactly("configs", *_bs(broker), "--alter", "--topic", "cfg-topic",
                   "--add-config-file", str(tmp_path / "missing.properties"), check=False)
    assert proc.returncode == 2 and "not found" in proc.stderr
    # As kafka-configs.sh: deleting what is not set is an error, and nothing is sent.
    proc = exactly("configs", *_bs(broker), "--alter", "--topic", "cfg-topic", "--delete-config",
                   "retention.ms", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: Invalid config(s): retention.ms (not set on topic "
                                  "cfg-topic;")


def test_bad_key_bad_value_and_unknown_topic_are_the_brokers_error(broker: EmbeddedBroker,
                                                                  admin: Admin) -> None:
    admin.create_topics([NewTopic("cfg-bad", 1)])
    alter = ("configs", *_bs(broker), "--alter", "--topic")
    proc = exactly(*alter, "cfg-bad", "--add-config", "no.such.key=1", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: alter configs of 'cfg-bad': INVALID_CONFIG (unknown "
                                  "topic config 'no.such.key'")
    proc = exactly(*alter, "cfg-bad", "--add-config", "retention.ms=soon", check=False)
    assert proc.returncode == 1
    assert "'soon' is not an integer" in proc.stderr
    assert admin.describe_configs("cfg-bad")["retention.ms"].source == "DEFAULT_CONFIG"
    proc = exactly(*alter, "cfg-none", "--add-config", "retention.ms=1", check=False)
    assert proc.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in proc.stderr
    proc = exactly("configs", *_bs(broker), "--describe", "--topic", "cfg-none", check=False)
    assert proc.returncode == 1 and "topic 'cfg-none' does not exist" in proc.stderr


def test_broker_and_cluster_default_configs(broker: EmbeddedBroker, admin: Admin) -> None:
    (node,) = admin.describe_cluster().brokers
    me = str(node.node_id)
    # Keys that change nothing the other tests of this module see.
    exactly("configs", *_bs(broker), "--alter", "--broker", me, "--add-config",
            "log.index.interval.bytes=8192")
    assert admin.describe_broker_configs(node.node_id)["log.index.interval.bytes"].source == \
        "DYNAMIC_BROKER_CONFIG"
    out = exactly("configs", *_bs(broker), "--alter", "--entity-type", "brokers",
                  "--entity-default", "--add-config", "log.cleaner.backoff.ms=20000").stdout
    assert out == "Completed updating default config for brokers in the cluster.\n"
    assert admin.describe_broker_configs(None)["log.cleaner.backoff.ms"].value == "20000"

    # No name: every broker, as Kafka's tool describes them.
    out = exactly("configs", *_bs(broker), "--describe", "--entity-type", "brokers").stdout
    assert out.splitlines() == [
        f"Dynamic configs for broker {me} are:",
        ("  log.index.interval.bytes=8192 sensitive=false "
         "synonyms={DYNAMIC_BROKER_CONFIG:log.index.interval.bytes=8192}")]
    out = exactly("configs", *_bs(broker), "--describe", "--broker-defaults").stdout
    assert out.splitlines() == [
        "Default configs for brokers in the cluster are:",
        ("  log.cleaner.backoff.ms=20000 sensitive=false "
         "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=20000}")]
    everything = exactly("configs", *_bs(broker), "--describe", "--broker", me, "--all").stdout
    assert "  log.cleaner.backoff.ms=20000 sensitive=false synonyms={" \
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=20000}" in everything.splitlines()

    proc = exactly("configs", *_bs(broker), "--alter", "--broker", me, "--add-config",
                   "num.partitions=3", check=False)
    assert proc.returncode == 1
    assert "INVALID_REQUEST" in proc.stderr
    assert "Cannot update these configs dynamically: ['num.partitions']" in proc.stderr
    proc = exactly("configs", *_bs(broker), "--describe", "--broker", "7", check=False)
    assert proc.returncode == 1 and "broker 7 is not in the cluster metadata" in proc.stderr
    proc = exactly("configs", *_bs(broker), "--describe", "--broker", "one", check=False)
    assert proc.returncode == 2 and "'one' is not a broker id" in proc.stderr

    exactly("configs", *_bs(broker), "--alter", "--broker", me, "--delete-config",
            "log.index.interval.bytes")
    exactly("configs", *_bs(broker), "--alter", "--broker-defaults", "--delete-config",
            "log.cleaner.backoff.ms")
    assert admin.describe_broker_configs(None) == {}
    assert admin.describe_broker_configs(node.node_id)["log.index.interval.bytes"].source in (
        "DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")


def test_group_configs(broker: EmbeddedBroker, admin: Admin) -> None:
    exactly("configs", *_bs(broker), "--alter", "--group", "cfg-group", "--add-config",
            "share.auto.offset.reset=earliest")
    assert admin.describe_group_configs("cfg-group")["share.auto.offset.reset"].value == "earliest"
    # The group's own value is shown: the client knows the GROUP_CONFIG source (it said UNKNOWN).
    out = exactly("configs", *_bs(broker), "--describe", "--entity-type", "groups",
                  "--entity-name", "cfg-group").stdout
    assert out.splitlines() == [
        "Dynamic configs for group cfg-group are:",
        ("  share.auto.offset.reset=earliest sensitive=false "
         "synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}")]
    proc = exactly("configs", *_bs(broker), "--alter", "--group", "cfg-group", "--add-config",
                   "share.auto.offset.reset=sometime", check=False)
    assert proc.returncode == 1
    assert "INVALID_CONFIG (must be latest, earliest or by_duration" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--describe", "--alter", "--topic", "t"), "give one of --describe and --alter"),
    (("--describe",), "give --entity-type"),
    (("--describe", "--topic", "t", "--group", "g"), "give one entity"),
    (("--alter", "--topic", "t"), "--alter needs --add-config"),
    (("--alter", "--entity-type", "topics", "--add-config", "a=1"), "--alter needs the entity"),
    (("--alter", "--topic", "t", "--add-config", "a=1", "--delete-config", "a"),
     "a both added and deleted"),
    (("--describe", "--entity-type", "topics", "--entity-default"),
     "--entity-default is for brokers"),
    (("--describe", "--group", "g", "--add-config", "a=1"), "go with --alter"),
    (("--describe", "--entity-type", "groups"), "give the group: --group NAME"),
])
def test_usage_errors(args: tuple[str, ...], message: str) -> None:
    # Said before any connection: no broker is needed.
    proc = exactly("configs", "--bootstrap-server", "127.0.0.1:1", *args, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_topics_alter_adds_partitions(broker: EmbeddedBroker, admin: Admin) -> None:
    admin.create_topics([NewTopic("cfg-grow", 1)])
    out = exactly("topics", "alter", "--topic", "cfg-grow", "--partitions", "3",
                  *_bs(broker)).stdout
    assert out == "Altered topic cfg-grow: 1 -> 3 partitions.\n"
    assert len(admin.describe_topics(["cfg-grow"])["cfg-grow"].partitions) == 3

    proc = exactly("topics", "alter", "cfg-grow", "--partitions", "2", *_bs(broker), check=False)
    assert proc.returncode == 1
    assert proc.stderr == ("error: The topic cfg-grow currently has 3 partition(s); 2 would not "
                           "be an increase.\n")
    proc = exactly("topics", "alter", "cfg-grow", "--partitions", "3", *_bs(broker), check=False)
    assert proc.returncode == 1
    assert proc.stderr == "error: Topic already has 3 partition(s).\n"
    assert len(admin.describe_topics(["cfg-grow"])["cfg-grow"].partitions) == 3
    proc = exactly("topics", "alter", "cfg-nosuch", "--partitions", "2", *_bs(broker),
                   check=False)
    assert proc.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in proc.stderr


@pytest.mark.parametrize("args", [
    ("configs", "--describe", "--topic", "t"),
    ("configs", "--alter", "--broker-defaults", "--add-config", "log.cleaner.backoff.ms=1"),
    ("topics", "alter", "--topic", "t", "--partitions", "2"),
    ("transactions", "describe-producers", "--topic", "t", "--partition", "0"),
], ids=lambda a: " ".join(a[:2]))
def test_no_broker_is_said_at_once(args: tuple[str, ...]) -> None:
    where = f"127.0.0.1:{_closed_port()}"
    proc = exactly(*args, "--bootstrap-server", where, "--timeout", "5000", check=False,
                   timeout=20)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: no broker at {where} ("), line
