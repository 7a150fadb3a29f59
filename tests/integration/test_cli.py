"""The `exactly` command, run as a user runs it, against a real broker process; and the
EmbeddedBroker harness itself (restart after kill -9 keeps the data and the port)."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from exactly.testing import EmbeddedBroker
from exactly.testing.ports import ephemeral_range


def exactly(
    *args: str, input: bytes | None = None, timeout: float = 90, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        [sys.executable, "-m", "exactly", *args],
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"exactly {' '.join(args)} exited {proc.returncode}\n"
            f"stdout: {proc.stdout.decode(errors='replace')}\n"
            f"stderr: {proc.stderr.decode(errors='replace')}"
        )
    return proc


def topic_name() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


# -- configuration errors stop the broker before it starts -----------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--set", "log.segment.bytes=ten"], "log.segment.bytes='ten'"),
        (["--set", "num.partitions=0"], "num.partitions='0'"),
        (["--set", "log.flush.policy=sometimes"], "log.flush.policy='sometimes'"),
        (["--set", "zookeeper.connect=localhost:2181"], "unknown config key 'zookeeper.connect'"),
        (["--set", "listeners=SSL://127.0.0.1:0"], "ssl.keystore.location"),
    ],
)
def test_bad_setting_exits_2_naming_the_key(tmp_path, args, named):
    # No --listen: it would override a listeners setting.
    proc = exactly("broker", "--data-dir", str(tmp_path / "d"), *args, check=False, timeout=30)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, stderr
    assert stderr.startswith("error: "), stderr
    assert named in stderr
    assert "Traceback" not in stderr
    assert b"listening" not in proc.stdout


def test_bad_config_file_exits_2_naming_file_line_and_key(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("# test\nnum.partitions=2\nauto.create.topics.enable=maybe\n")
    proc = exactly(
        "broker",
        "--config",
        str(props),
        "--data-dir",
        str(tmp_path / "d"),
        "--listen",
        "127.0.0.1:0",
        check=False,
        timeout=30,
    )
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, stderr
    assert f"auto.create.topics.enable='maybe' ({props}:3): must be true or false" in stderr


def test_bad_listen_option_exits_2():
    proc = exactly("broker", "--listen", "nohostport", check=False, timeout=30)
    assert proc.returncode == 2
    assert b"--listen" in proc.stderr


def test_version_and_console_script():
    assert exactly("--version").stdout.decode().strip() == "exactly, version 0.1.0"
    script = Path(sys.executable).parent / "exactly"
    if script.exists():
        out = subprocess.run([str(script), "--help"], capture_output=True, timeout=30, check=True)
        assert b"broker" in out.stdout and b"topics" in out.stdout


# -- the tools against a running broker ------------------------------------------------------


def test_topics_produce_consume_delete(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    topic = topic_name()

    out = exactly("topics", "create", topic, "--partitions", "3", *bs).stdout.decode()
    assert f"Created topic {topic}." in out
    assert topic in exactly("topics", "list", *bs).stdout.decode().split()

    described = exactly("topics", "describe", topic, *bs).stdout.decode()
    assert f"Topic: {topic}\tPartitionCount: 3\tReplicationFactor: 1" in described
    for p in range(3):
        assert f"Partition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" in described

    lines = [f"record-{i}" for i in range(50)]
    produced = exactly("produce", topic, *bs, input=("\n".join(lines) + "\n").encode())
    assert b"Produced 50 record(s)" in produced.stderr

    consumed = exactly("consume", topic, *bs, "--from-beginning", "--max-messages", "50")
    assert sorted(consumed.stdout.decode().splitlines()) == sorted(lines)
    assert b"Processed a total of 50 messages" in consumed.stderr

    exactly("topics", "delete", topic, *bs)
    assert topic not in exactly("topics", "list", *bs).stdout.decode().split()


def test_duplicate_create_and_unknown_describe_fail(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    topic = topic_name()
    exactly("topics", "create", topic, *bs)
    again = exactly("topics", "create", topic, *bs, check=False)
    assert again.returncode == 1
    assert b"TOPIC_ALREADY_EXISTS" in again.stderr
    missing = exactly("topics", "describe", topic_name(), *bs, check=False)
    assert missing.returncode == 1
    assert b"does not exist" in missing.stderr


def test_keys_order_and_idle_timeout(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    topic = topic_name()
    exactly("topics", "create", topic, "--partitions", "1", *bs)
    exactly("produce", topic, *bs, "--key-separator", ":", input=b"k1:v1\nk2:v:2\n:empty-key\n")
    out = exactly("consume", topic, *bs, "--from-beginning", "--print-key", "--timeout-ms", "3000")
    assert out.stdout.decode().splitlines() == ["k1\tv1", "k2\tv:2", "\tempty-key"]
    assert b"Processed a total of 3 messages" in out.stderr


def test_produce_line_without_separator_fails(broker):
    topic = topic_name()
    proc = exactly(
        "produce",
        topic,
        "--bootstrap-server",
        broker.bootstrap,
        "--key-separator",
        ":",
        input=b"k:v\nno separator here\n",
        check=False,
    )
    assert proc.returncode == 1
    assert b"line 2 has no key separator" in proc.stderr


def test_consume_with_group_read_committed(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    topic = topic_name()
    exactly("topics", "create", topic, *bs)
    exactly("produce", topic, *bs, input=b"one\ntwo\n")
    group = f"g-{uuid.uuid4().hex[:6]}"
    out = exactly(
        "consume",
        topic,
        *bs,
        "--group",
        group,
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--max-messages",
        "2",
    )
    assert out.stdout.decode().splitlines() == ["one", "two"]
    # The group committed its position: nothing new to read.
    exactly("produce", topic, *bs, input=b"three\n")
    out = exactly("consume", topic, *bs, "--group", group, "--max-messages", "1")
    assert out.stdout.decode().splitlines() == ["three"]


# -- the harness -----------------------------------------------------------------------------


def test_embedded_broker_kill_restart_keeps_data_and_port(tmp_path):
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data, settings={"log.flush.policy": "fsync"}) as b:
        assert b.running and b.port != 0 and b.bootstrap == f"127.0.0.1:{b.port}"
        bs = ["--bootstrap-server", b.bootstrap]
        topic = topic_name()
        exactly("topics", "create", topic, *bs)
        exactly("produce", topic, *bs, input=b"before-crash-1\nbefore-crash-2\n")
        port, pid = b.port, b.process.pid

        assert b.kill() == -9
        assert not b.running
        b.start()
        assert b.process.pid != pid
        assert b.port == port
        exactly("produce", topic, *bs, input=b"after-restart\n")

        b.restart(kill=False)  # graceful this time
        assert b.port == port
        out = exactly("consume", topic, *bs, "--from-beginning", "--max-messages", "3")
        assert out.stdout.decode().splitlines() == [
            "before-crash-1",
            "before-crash-2",
            "after-restart",
        ]
        assert (data / "meta.properties").exists()
        assert b.starts == 3
    assert not b.running
    assert data.exists()  # a given data dir is the caller's: kept


def test_embedded_broker_ports_lie_outside_the_ephemeral_range_and_a_taken_one_is_replaced():
    """A reconnecting client is never given the broker's port as its own source port (TCP
    simultaneous open would connect it to itself, and the broker could not listen again)."""
    low, high = ephemeral_range()
    with EmbeddedBroker(settings={"listeners": "PLAINTEXT://127.0.0.1:0"}) as b:
        ports = [port for _host, port in b.listener_addresses.values()]
        assert len(ports) == 1 and not any(low <= port <= high for port in ports), ports
        b.kill()
        assert [p for _h, p in b.listener_addresses.values()] == ports
        b.start()  # restarts keep them
        assert [p for _h, p in b.listener_addresses.values()] == ports
    with EmbeddedBroker() as b:
        assert not low <= b.port <= high, b.port
        port = b.port
        b.kill()
        squatter = socket.socket()
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        try:
            b.start()  # the old port was taken meanwhile: another one outside the range
        finally:
            squatter.close()
        assert b.port != port and not low <= b.port <= high, (port, b.port)
        assert f"port {port} is taken; starting on another free port" in b.log_text()


def test_embedded_broker_stop_is_graceful_and_temp_dir_removed():
    b = EmbeddedBroker()
    b.start()
    data = b.data_dir
    assert data.exists()
    assert b.stop() == 0
    assert "start #1" in b.log_text()
    b.close()
    assert not data.exists()


def test_embedded_broker_start_failure_shows_the_log():
    from exactly.testing import BrokerStartError

    b = EmbeddedBroker(settings={"num.partitions": "-3"})
    try:
        with pytest.raises(BrokerStartError, match=r"(?s)exited with code 2.*num\.partitions='-3'"):
            b.start()
    finally:
        b.close()


@pytest.mark.broker_settings({"num.partitions": "4"})
def test_broker_fixture_takes_settings_from_marker(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    topic = topic_name()
    exactly("topics", "create", topic, *bs)  # no --partitions: the broker's num.partitions
    assert "PartitionCount: 4" in exactly("topics", "describe", topic, *bs).stdout.decode()


def test_broker_factory_makes_independent_brokers(broker_factory):
    a = broker_factory()
    b = broker_factory(settings={"auto.create.topics.enable": False})
    assert a.port != b.port and a.data_dir != b.data_dir
