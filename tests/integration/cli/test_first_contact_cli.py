"""Issue 18's findings in the command-line tools, each over TCP as a user meets it: with no broker
every command says "no broker at HOST:PORT" at once (exit 1, no librdkafka lines);
force-terminate and abort check the transaction exists before acting; `--topic`,
`topics --command-config` and `--producer.config`/`--consumer.config` are accepted as Kafka's
tools take them; every option has help text; `exactly demo --help` needs no pyspark."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from exactly.cli.main import cli
from exactly.client import Admin, NewTopic
from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly, table
from tests.integration.cli.test_acls_users_cli import (  # noqa: F401 (fixtures)
    admin_config,
    sasl_broker,
)


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BROKER_COMMANDS = [
    ("topics", "list"),
    ("topics", "create", "--topic", "t"),
    ("topics", "describe", "t"),
    ("topics", "delete", "--topic", "t"),
    ("consume", "t", "--timeout-ms", "3000"),
    ("produce", "t"),
    ("transactions", "list"),
    ("transactions", "describe", "--transactional-id", "x"),
    ("transactions", "find-hanging", "--topic", "t"),
    ("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "0"),
    ("transactions", "force-terminate", "--transactional-id", "x"),
    ("acls", "list"),
    ("users", "describe"),
]


@pytest.mark.parametrize("args", BROKER_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_no_broker_is_said_at_once(args: tuple[str, ...]) -> None:
    where = f"127.0.0.1:{_closed_port()}"
    # A hang (produce waited minutes, consume 30 s) fails here by the subprocess timeout.
    proc = exactly(*args, "--bootstrap-server", where, "--timeout", "5000", check=False,
                   timeout=20, input="a line\n")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()  # one line: no client log lines
    assert line.startswith(f"error: no broker at {where} ("), line


def test_timeout_takes_ms_or_seconds() -> None:
    where = f"127.0.0.1:{_closed_port()}"
    for value in ("2500", "2.5s", "2500ms"):
        proc = exactly("topics", "list", "--bootstrap-server", where, "--timeout", value,
                       check=False)
        assert proc.returncode == 1 and "no broker at" in proc.stderr
    proc = exactly("topics", "list", "--bootstrap-server", where, "--timeout", "soon",
                   check=False)
    assert proc.returncode == 2 and "'soon' is not a duration" in proc.stderr


def _options(group: click.Group, path: str = "exactly") -> Iterator[tuple[str, click.Option]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # also the commands the group imports when asked
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _options(command, f"{path} {name}")
            continue
        for param in command.params:
            if isinstance(param, click.Option):
                yield f"{path} {name}", param


def test_every_option_has_help_text() -> None:
    options = list(_options(cli))
    assert len(options) > 50  # the walk reaches every command
    missing = [f"{where} {opt.opts[0]}" for where, opt in options if not (opt.help or "").strip()]
    assert missing == []


def test_the_broker_command_does_not_import_the_client() -> None:
    """`exactly broker` answers sooner without the client's 0.3 s of imports: the admin and
    client commands are imported only when one of them runs."""
    code = ("import sys, exactly.cli.main, exactly.server.config, exactly.server.broker; "
            "print(sorted(m for m in sys.modules if m.startswith('exactly.client')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_demo_help_needs_no_pyspark() -> None:
    # As after `pip install exactly` without the [spark] extra: pyspark and pyarrow absent.
    code = ("import sys; sys.modules['pyspark'] = sys.modules['pyarrow'] = None; "
            "from exactly.cli.main import main; main()")
    run = [sys.executable, "-c", code, "demo"]
    proc = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    for option in ("--crashes", "--seconds", "--rate", "--seed", "--delivery", "--cluster",
                   "--master"):
        assert option in proc.stdout
    proc = subprocess.run([*run, "--seconds", "1"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 1
    assert proc.stderr == ("error: exactly demo needs pyspark and pyarrow: "
                           "pip install 'exactly[spark]'\n")


# -- against a broker ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def test_topic_option_beside_the_argument(broker: EmbeddedBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    exactly("topics", "create", "--topic", "cli-opt", "--partitions", "2", *bs)
    out = exactly("topics", "describe", "--topic", "cli-opt", *bs).stdout
    assert "Topic: cli-opt\tPartitionCount: 2\tReplicationFactor: 1" in out
    proc = exactly("topics", "describe", "cli-opt", "--topic", "other", *bs, check=False)
    assert proc.returncode == 2 and "two topics given" in proc.stderr
    proc = exactly("topics", "delete", *bs, check=False)
    assert proc.returncode == 2 and "--topic TOPIC" in proc.stderr
    exactly("topics", "delete", "--topic", "cli-opt", *bs)
    assert "cli-opt" not in exactly("topics", "list", *bs).stdout.split()


def test_force_terminate_an_unknown_id_fails_and_creates_nothing(broker: EmbeddedBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    proc = exactly("transactions", "force-terminate", *bs, "--transactional-id", "cli-nosuch",
                   check=False)
    assert proc.returncode == 1
    assert "transactional id 'cli-nosuch' does not exist" in proc.stderr
    assert "cli-nosuch" not in exactly("transactions", "list", *bs).stdout


def _high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_abort_checks_the_producer_has_that_transaction_open(broker: EmbeddedBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    topic = "cli-abort-check"
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    plain.produce(topic, b"committed", partition=0)
    assert plain.flush(10) == 0
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-abort-txn"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    assert txn.flush(10) == 0
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        states = admin.describe_producers([(topic, 0)])[(topic, 0)]
    (closed,) = [s for s in states if s.current_txn_start_offset < 0]
    (opened,) = [s for s in states if s.current_txn_start_offset >= 0]
    end = _high_watermark(broker.bootstrap, topic)

    def abort(producer_id: int, epoch: int) -> subprocess.CompletedProcess[str]:
        return exactly("transactions", "abort", *bs, "--topic", topic, "--partition", "0",
                       "--producer-id", str(producer_id), "--producer-epoch", str(epoch),
                       "--coordinator-epoch", "-1", check=False)

    proc = abort(closed.producer_id, closed.producer_epoch)
    assert proc.returncode == 1
    assert f"producer {closed.producer_id} has no open transaction on {topic}-0" in proc.stderr
    proc = abort(opened.producer_id, opened.producer_epoch + 1)
    assert proc.returncode == 1
    assert f"has epoch {opened.producer_epoch}, not {opened.producer_epoch + 1}" in proc.stderr
    assert _high_watermark(broker.bootstrap, topic) == end  # no stray marker written
    txn.abort_transaction(10)


# -- properties files over a SASL listener ---------------------------------------------------


def test_command_config_and_console_config_files(sasl_broker: EmbeddedBroker,  # noqa: F811
                                                 admin_config: Path) -> None:  # noqa: F811
    # admin_config spells the credentials as a Java client's file does: a sasl.jaas.config line.
    props = admin_config
    bs = ("--bootstrap-server", sasl_broker.bootstrap)
    cc = ("--command-config", str(props))
    exactly("topics", "create", "cli-sasl", "--partitions", "1", *bs, *cc)
    assert "cli-sasl" in exactly("topics", "list", *bs, *cc).stdout.split()
    assert "PartitionCount: 1" in exactly("topics", "describe", "cli-sasl", *bs, *cc).stdout
    # Without the file the listener refuses the admin.
    assert exactly("topics", "list", *bs, "--timeout", "3000", check=False).returncode == 1

    produced = exactly("produce", "cli-sasl", *bs, "--producer.config", str(props),
                       input="one\ntwo\n")
    assert "Produced 2 record(s)" in produced.stderr
    consumed = exactly("consume", "cli-sasl", *bs, "--consumer.config", str(props),
                       "--from-beginning", "--max-messages", "2")
    assert consumed.stdout.splitlines() == ["one", "two"]
    assert table(exactly("transactions", "list", *bs, *cc).stdout) == []
