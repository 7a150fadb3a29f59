"""`exactly consumer-groups` run as a subprocess against a real broker, as kafka-consumer-groups.sh
is used: groups listed (with states and types), described with lag, members of live classic and
KIP-848 groups, offsets reset with each --to-* option (a dry run changes nothing, --execute does,
offsets clamped to the log), resets refused while the group has members, groups and offsets
deleted, and clear errors for an unknown group, a bad command line, and no broker."""

from __future__ import annotations

import datetime
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from exactly.client import Admin, NewTopic
from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly, table

TOPIC = "cg-data"  # partition 0: 5 records, a second apart; partition 1: 3 records
WIDE = "cg-wide"  # more partitions than the reset's progress threshold
WIDE_PARTITIONS = 101
T0 = (int(time.time()) - 3600) * 1000  # the records' timestamps start an hour ago


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"group.initial.rebalance.delay.ms": "0"}) as b:
        with Admin({"bootstrap.servers": b.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 2), NewTopic(WIDE, WIDE_PARTITIONS)])
        producer = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(5):
            producer.produce(TOPIC, b"v", partition=0, timestamp=T0 + i * 1000)
        for i in range(3):
            producer.produce(TOPIC, b"v", partition=1, timestamp=T0 + i * 1000)
        assert producer.flush(10) == 0
        yield b


def _cli(broker: EmbeddedBroker, *args: str,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    return exactly("consumer-groups", "--bootstrap-server", broker.bootstrap, *args, check=check)


def _commit(broker: EmbeddedBroker, group: str, offsets: dict[int, int]) -> None:
    """Commit offsets of TOPIC for `group` as a consumer outside any group generation does."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _committed(broker: EmbeddedBroker, group: str) -> dict[int, int]:
    """The group's committed offsets of TOPIC by OffsetFetch (librdkafka's), -1001 for none."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=10)}
    finally:
        consumer.close()


def _member(broker: EmbeddedBroker, group: str, protocol: str) -> Consumer:
    """A live member of `group` (classic or KIP-848 consumer protocol) that owns TOPIC's
    partitions."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "client.id": f"{protocol}-client", "group.protocol": protocol,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 2:
        assert time.monotonic() < deadline, "the consumer got no assignment"
        consumer.poll(0.2)
    return consumer


def test_list_and_describe_lag(broker):
    _commit(broker, "cg-lag", {0: 2, 1: 3})

    assert "cg-lag" in _cli(broker, "--list").stdout.split()
    listed = {r["GROUP"]: r for r in table(_cli(broker, "--list", "--state").stdout)}
    assert listed["cg-lag"]["STATE"] == "Empty"
    assert "cg-lag" not in _cli(broker, "--list", "--state", "Stable").stdout
    assert "cg-lag" in _cli(broker, "--list", "--state", "stable,empty").stdout
    typed = {r["GROUP"]: r for r in table(_cli(broker, "--list", "--type").stdout)}
    assert typed["cg-lag"]["TYPE"] == "classic"
    assert "cg-lag" not in _cli(broker, "--list", "--type", "consumer").stdout

    for view in ((), ("--offsets",)):
        proc = _cli(broker, "--describe", "--group", "cg-lag", *view)
        rows = {r["PARTITION"]: r for r in table(proc.stdout)}
        assert (rows["0"]["CURRENT-OFFSET"], rows["0"]["LOG-END-OFFSET"], rows["0"]["LAG"]) == (
            "2", "5", "3")
        assert (rows["1"]["CURRENT-OFFSET"], rows["1"]["LOG-END-OFFSET"], rows["1"]["LAG"]) == (
            "3", "3", "0")
        assert rows["0"]["CONSUMER-ID"] == "-" and rows["0"]["GROUP"] == "cg-lag"
        assert "Consumer group 'cg-lag' has no active members." in proc.stderr

    (state,) = _cli(broker, "--describe", "--group", "cg-lag", "--state").stdout.splitlines()[1:]
    assert state.split()[0] == "cg-lag" and state.split()[-2:] == ["Empty", "0"]


@pytest.mark.parametrize(("protocol", "assignor"), [("classic", "range"),
                                                    ("consumer", "uniform")])
def test_a_live_group_is_described_and_not_reset(broker, protocol, assignor):
    group = f"cg-live-{protocol}"
    consumer = _member(broker, group, protocol)
    try:
        (member,) = table(_cli(broker, "--describe", "--members", "--group", group).stdout)
        assert member["CLIENT-ID"] == f"{protocol}-client" and member["#PARTITIONS"] == "2"
        assert member["HOST"] == "127.0.0.1"
        (verbose,) = table(_cli(broker, "--describe", "--members", "--verbose",
                                "--group", group).stdout)
        assert verbose["ASSIGNMENT"] == f"{TOPIC}(0,1)"
        assert verbose["CONSUMER-ID"] == member["CONSUMER-ID"]

        rows = table(_cli(broker, "--describe", "--group", group).stdout)
        assert sorted(r["PARTITION"] for r in rows) == ["0", "1"]
        assert {r["CONSUMER-ID"] for r in rows} == {member["CONSUMER-ID"]}
        assert {r["CURRENT-OFFSET"] for r in rows} == {"-"}  # nothing committed yet

        state = _cli(broker, "--describe", "--state", "--group", group).stdout
        assert state.splitlines()[1].split()[-3:] == [assignor, "Stable", "1"]
        typed = {r["GROUP"]: r for r in table(_cli(broker, "--list", "--type").stdout)}
        assert typed[group]["TYPE"] == protocol

        refused = _cli(broker, "--reset-offsets", "--group", group, "--all-topics",
                       "--to-earliest", "--execute", check=False)
        assert refused.returncode == 1
        assert (f"Assignments can only be reset if the group '{group}' is inactive, but the "
                "current state is Stable.") in refused.stderr
        deleted = _cli(broker, "--delete", "--group", group, check=False)
        assert deleted.returncode == 1 and "NON_EMPTY_GROUP" in deleted.stderr
        subscribed = _cli(broker, "--delete-offsets", "--group", group, "--topic", TOPIC,
                          check=False)
        assert subscribed.returncode == 1
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in subscribed.stdout
    finally:
        consumer.close()
    assert "Empty" in _cli(broker, "--describe", "--state", "--group", group).stdout


def _at(ms: int, zone: datetime.timezone) -> str:
    when = datetime.datetime.fromtimestamp(ms / 1000, zone)
    text = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    return text + ("Z" if zone is datetime.UTC else when.strftime("%z")[:3] + ":"
                   + when.strftime("%z")[3:])


# Committed before each reset: partition 0 at 2 (of 0..5), partition 1 at 1 (of 0..3).
RESETS = [
    ("earliest", ("--to-earliest",), {0: 0, 1: 0}),
    ("latest", ("--to-latest",), {0: 5, 1: 3}),
    ("current", ("--to-current",), {0: 2, 1: 1}),
    ("offset", ("--to-offset", "4"), {0: 4, 1: 3}),  # partition 1 clamped to its end
    ("shift-forward", ("--shift-by", "2"), {0: 4, 1: 3}),
    ("shift-back", ("--shift-by", "-2"), {0: 0, 1: 0}),  # partition 1 clamped to its start
    # The first record at or after T0+2.5s: offset 3 of partition 0; none in partition 1,
    # whose reset goes to its end as Kafka's does.
    ("datetime-utc", ("--to-datetime", _at(T0 + 2500, datetime.UTC)), {0: 3, 1: 3}),
    ("datetime-zone", ("--to-datetime",
                       _at(T0 + 1500, datetime.timezone(datetime.timedelta(hours=2)))),
     {0: 2, 1: 2}),
]


@pytest.mark.parametrize(("name", "option", "expected"), RESETS, ids=[r[0] for r in RESETS])
def test_reset_offsets(broker, name, option, expected):
    group = f"cg-reset-{name}"
    _commit(broker, group, {0: 2, 1: 1})
    scope = ("--all-topics",) if name.startswith("shift") else ("--topic", TOPIC)

    dry = _cli(broker, "--reset-offsets", "--group", group, *scope, *option, "--dry-run")
    plan = {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(dry.stdout)}
    assert plan == expected
    assert _committed(broker, group) == {0: 2, 1: 1}  # a dry run changes nothing

    done = _cli(broker, "--reset-offsets", "--group", group, *scope, *option, "--execute")
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(done.stdout)} == expected
    assert _committed(broker, group) == expected
    clamped = any(line.startswith("New offset") for line in done.stderr.splitlines())
    assert clamped == (name in ("offset", "shift-back"))
    assert "partitions..." not in done.stderr  # no progress lines for two partitions


def test_reset_defaults_to_a_dry_run_and_takes_partitions(broker):
    _commit(broker, "cg-reset-scope", {0: 2, 1: 1})
    proc = _cli(broker, "--reset-offsets", "--group", "cg-reset-scope", "--topic",
                f"{TOPIC}:1", "--to-latest")
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(proc.stdout)] == [("1", "3")]
    assert "--execute option is missing" in proc.stderr
    assert _committed(broker, "cg-reset-scope") == {0: 2, 1: 1}

    _cli(broker, "--reset-offsets", "--group", "cg-reset-scope", "--topic", f"{TOPIC}:1",
         "--to-latest", "--execute")
    assert _committed(broker, "cg-reset-scope") == {0: 2, 1: 3}


def test_shift_needs_a_committed_offset(broker):
    proc = _cli(broker, "--reset-offsets", "--group", "cg-never-committed", "--topic", TOPIC,
                "--shift-by", "1", check=False)
    assert proc.returncode == 1
    assert "no committed offset" in proc.stderr and f"{TOPIC}-0" in proc.stderr


def test_a_reset_of_many_partitions_reports_progress(broker):
    proc = _cli(broker, "--reset-offsets", "--group", "cg-wide", "--topic", WIDE,
                "--to-earliest", "--execute")
    assert len(table(proc.stdout)) == WIDE_PARTITIONS
    assert f"finding new offsets of {WIDE_PARTITIONS} partitions..." in proc.stderr
    assert f"done, {WIDE_PARTITIONS} offsets reset." in proc.stderr
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert len(admin.list_consumer_group_offsets("cg-wide")) == WIDE_PARTITIONS


def test_delete_offsets_and_groups(broker):
    _commit(broker, "cg-del", {0: 2, 1: 1})
    proc = _cli(broker, "--delete-offsets", "--group", "cg-del", "--topic", f"{TOPIC}:0")
    assert table(proc.stdout.split("\n", 1)[1]) == [
        {"TOPIC": TOPIC, "PARTITION": "0", "STATUS": "Successful"}]
    assert _committed(broker, "cg-del") == {0: -1001, 1: 1}

    proc = _cli(broker, "--delete", "--group", "cg-del", "--group", "cg-nosuch", check=False)
    assert proc.returncode == 1
    assert "Deletion of requested consumer groups ('cg-del') was successful." in proc.stdout
    assert "Group 'cg-nosuch' could not be deleted due to: GROUP_ID_NOT_FOUND" in proc.stderr
    assert "cg-del" not in _cli(broker, "--list").stdout.split()
    assert _committed(broker, "cg-del") == {0: -1001, 1: -1001}


def test_unknown_group(broker):
    for view in ((), ("--members",), ("--state",)):
        proc = _cli(broker, "--describe", "--group", "cg-nosuch", *view, check=False)
        assert proc.returncode == 1
        assert proc.stderr.strip() == "error: Consumer group 'cg-nosuch' does not exist."
    proc = _cli(broker, "--delete-offsets", "--group", "cg-nosuch", "--topic", TOPIC,
                check=False)
    assert proc.returncode == 1
    assert "GROUP_ID_NOT_FOUND: no such group" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    ((), "give exactly one action"),
    (("--list", "--describe"), "give exactly one action"),
    (("--describe",), "--describe needs --group GROUP"),
    (("--reset-offsets", "--group", "g", "--all-topics"), "--reset-offsets needs exactly one of --to-earliest"),
    (("--reset-offsets", "--group", "g", "--to-earliest"), "--reset-offsets needs --topic TOPIC[:P,P]"),
    (("--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"),
     "--reset-offsets needs exactly one of --to-earliest"),
    (("--delete-offsets", "--group", "a", "--group", "b", "--topic", "t"),
     "--delete-offsets takes exactly one --group"),
    (("--describe", "--group", "g", "--to-earliest"), "--to-earliest goes with --reset-offsets"),
])
def test_usage_errors(args, message):
    proc = exactly("consumer-groups", "--bootstrap-server", "127.0.0.1:1", *args, check=False)
    assert proc.returncode == 2 and f"Error: {message}" in proc.stderr, proc.stderr


def test_no_broker():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = exactly("consumer-groups", "--list", "--bootstrap-server", f"127.0.0.1:{port}",
                   "--timeout", "2000", check=False, timeout=20)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: no broker at 127.0.0.1:{port} (")


def test_admin_list_offsets_specs_and_isolation(broker):
    """The Admin call behind the lag and the resets, with what the CLI does not use: the
    record with the largest timestamp, and read_committed stopping at an open transaction."""
    from exactly.client.admin import OffsetSpec

    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("cg-txn", 1)])
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "transactional.id": "cg-txn-producer"})
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("cg-txn", b"v", partition=0)
        assert producer.flush(10) == 0
        try:
            latest = {("cg-txn", 0): OffsetSpec.latest()}
            assert admin.list_offsets(latest)[("cg-txn", 0)].offset == 1
            assert admin.list_offsets(latest, isolation_level="read_committed")[
                ("cg-txn", 0)].offset == 0
        finally:
            producer.abort_transaction(10)
        found = admin.list_offsets({(TOPIC, 0): OffsetSpec.max_timestamp(),
                                    (TOPIC, 1): OffsetSpec.for_timestamp(T0 + 1000)})
        assert (found[(TOPIC, 0)].offset, found[(TOPIC, 0)].timestamp) == (4, T0 + 4000)
        assert (found[(TOPIC, 1)].offset, found[(TOPIC, 1)].timestamp) == (1, T0 + 1000)
        with pytest.raises(ValueError, match="read_committed"):
            admin.list_offsets(latest, isolation_level="committed")
