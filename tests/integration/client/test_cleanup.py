"""Client objects dropped without close(): programs of their own (subprocesses, as a user runs
them) make each kind, use it, drop it and exit. The exit is silent ("Task was destroyed but it
is pending!" was printed before), each object is really closed (a producer's buffered record is
delivered, a consumer leaves its group, a share consumer's records are accepted), and with
warnings on each one is named by a ResourceWarning pointing at the line that made it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from exactly.demo.app import read_committed
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS, create_topic, produce, set_group_configs
from tests.helpers.share.raw import start_offset

PROGRAM = """
import gc, sys
from exactly.client import Admin, Consumer, Producer, ShareConsumer, TransactionSession
config = {{"bootstrap.servers": "{bootstrap}"}}
admin = Admin(config)
admin.list_topics()
session = TransactionSession({{**config, "transactional.id": "{prefix}-txn",
                              "transaction.heartbeat.interval.ms": 300}})
session.initialize()
session.begin_transaction()  # its heartbeat task runs until exit
consumer = Consumer({{**config, "group.id": "{prefix}-group", "auto.offset.reset": "earliest"}})
consumer.subscribe(["{prefix}-topic"])
while not consumer.poll(200):
    pass
share = ShareConsumer({{**config, "group.id": "{prefix}-share"}})
share.subscribe(["{prefix}-topic"])
while not share.poll(200):
    pass
producer = Producer({{**config, "linger.ms": 600000}})  # only closing sends it
producer.send("{prefix}-out", b"sent at exit")

def dropped():
    p = Producer({{**config, "linger.ms": 600000}})
    p.send("{prefix}-out", b"sent when collected")

dropped()
gc.collect()
print("done")
"""


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=SETTINGS) as b:
        yield b


def _run(broker: EmbeddedBroker, prefix: str, tmp_path: Path, *options: str
         ) -> subprocess.CompletedProcess[str]:
    create_topic(broker, f"{prefix}-topic")
    create_topic(broker, f"{prefix}-out")
    set_group_configs(broker, f"{prefix}-share", share_auto_offset_reset="earliest")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    produce(broker, f"{prefix}-topic", [b"a", b"b"])
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(bootstrap=broker.bootstrap, prefix=prefix))
    proc = subprocess.run([sys.executable, *options, str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "done", proc.stdout + proc.stderr
    # Everything was closed, not just silenced:
    out = sorted(r.value for r in read_committed(broker.bootstrap, f"{prefix}-out"))
    assert out == [b"sent at exit", b"sent when collected"], proc.stderr
    group = admin.describe_consumer_groups([f"{prefix}-group"])[f"{prefix}-group"].result(10)
    assert not group.members, group  # it left the group (else a member for session.timeout)
    assert start_offset(broker, f"{prefix}-share", f"{prefix}-topic", 0) == 2  # accepted
    return proc


def test_dropped_clients_are_closed_quietly_at_exit(broker: EmbeddedBroker,
                                                    tmp_path: Path) -> None:
    proc = _run(broker, "quiet", tmp_path)
    assert proc.stderr == "", proc.stderr  # no "Task was destroyed", no traceback, no warning


@pytest.mark.parametrize("warnings", ["always", "error"])
def test_dropped_clients_warn_when_warnings_are_on(broker: EmbeddedBroker, tmp_path: Path,
                                                   warnings: str) -> None:
    proc = _run(broker, f"warn-{warnings}", tmp_path, "-W", f"{warnings}::ResourceWarning")
    for kind, line in [("Admin", 5), ("TransactionSession", 7), ("Consumer", 11),
                       ("ShareConsumer", 15), ("Producer", 19), ("Producer", 23)]:
        # -W always: Python prints the warning at the line; -W error: the error is reported
        expected = (f"program.py:{line}: ResourceWarning: unclosed {kind}:" if warnings == "always"
                    else f"{kind} made at {tmp_path / 'program.py'}:{line}: "
                         f"ResourceWarning: unclosed {kind}:")
        assert expected in proc.stderr, proc.stderr
    assert proc.stderr.count("ResourceWarning: unclosed") == 6, proc.stderr
    assert "Task was destroyed" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "unclosed transport" not in proc.stderr, proc.stderr  # the connections were closed


AIO_PROGRAM = """
import asyncio, sys
from exactly.client.aio import Consumer

async def main() -> None:
    consumer = Consumer({{"bootstrap.servers": "{bootstrap}", "group.id": "aio-left-open",
                         "auto.offset.reset": "earliest"}})
    consumer.subscribe(["aio-left-open-topic"])
    await consumer.poll(timeout_ms=500)  # joins the group; never closed

asyncio.run(main())
print("exited", flush=True)
"""


def test_an_asyncio_consumer_left_open_does_not_hang_the_exit(broker: EmbeddedBroker,
                                                              tmp_path: Path) -> None:
    """asyncio.run cancels the consumer's group task at exit while its connection fails the
    JoinGroup it waits for: the cancellation must win (it used to be lost, and the task retried
    forever, so the program never exited)."""
    proc = subprocess.run([sys.executable, "-c", AIO_PROGRAM.format(bootstrap=broker.bootstrap)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "exited", proc.stderr[-2000:]
