"""The README's snippets outside Spark (tests/system/spark/test_readme_snippets.py runs the Spark
ones), each run exactly as printed as a program of its own, with `localhost:9092` replaced by a test
broker's address; the tests then check what the snippet did, on the broker."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.client import Admin, NewTopic, Producer
from exactly.demo.app import read_committed
from exactly.testing import EmbeddedBroker
from tests.helpers.share.raw import start_offset
from tests.paths import REPO
from tests.support import readme_snippets, run_snippet


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"transaction.abort.timed.out.transaction.cleanup.interval.ms":
                                  1000}) as b:
        yield b


def test_every_snippet_outside_spark_is_tested() -> None:
    tested = {name.removeprefix("test_").replace("_", "-") for name in globals()
              if name.startswith("test_") and name != "test_every_snippet_outside_spark_is_tested"}
    others = {name for name in readme_snippets() if not name.startswith("spark-")}
    assert others, "the README has no marked snippet outside Spark"
    assert others <= tested, others - tested


def _run_clean(name: str, broker: EmbeddedBroker, tmp_path: Path) -> str:
    """Run the snippet as run_snippet does, and also require a silent stderr: no "Task was
    destroyed but it is pending!" or any other noise at exit. Its stdout."""
    code = readme_snippets()[name]
    assert "localhost:9092" in code, name
    env = {k: v for k, v in os.environ.items() if k != "EXACTLY_FAILPOINTS"}
    proc = subprocess.run([sys.executable, "-c", code.replace("localhost:9092", broker.bootstrap)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0 and proc.stderr == "", f"{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc.stdout


def test_client(broker: EmbeddedBroker, tmp_path: Path) -> None:
    out = _run_clean("client", broker, tmp_path)
    assert "b'order 42'" in out, out
    assert b"order 42" in [r.value for r in read_committed(broker.bootstrap, "orders")]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        state = admin.describe_transactions(["orders-1"])["orders-1"]
    assert state.state == "CompleteCommit"  # committed by the resumed session


def test_apache_kafka(tmp_path: Path) -> None:
    # tests.rigs is the repository's: the snippet runs from its root, as the README says.
    out = run_snippet("apache-kafka", {}, tmp_path, cwd=REPO).split()
    assert len(out) == 2, out
    three, two = (line.split(",") for line in out)
    assert len(three) == 3 and two == [three[0], three[2]], out


def test_dual_write(broker: EmbeddedBroker, tmp_path: Path) -> None:
    _run_clean("dual-write", broker, tmp_path)
    with sqlite3.connect(tmp_path / "orders.db") as db:
        assert db.execute("SELECT id, item FROM orders ORDER BY id").fetchall() == [
            (42, "book"), (43, "pen")]
    events = [r.value for r in read_committed(broker.bootstrap, "order-events")]
    assert sorted(events) == [b"order 42 placed", b"order 43 placed"]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        state = admin.describe_transactions(["order-writer-1"])["order-writer-1"]
    assert state.state == "CompleteCommit"


def test_order_service_reads_every_partition_past_foreign_records(broker: EmbeddedBroker,
                                                                   tmp_path: Path) -> None:
    """The README's example on a topic of 3 partitions that another program also wrote to (it
    read partition 0 only, and crashed on a record that is not its JSON)."""
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("shared-orders", 3)])
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        producer.send("shared-orders", b"order 42 placed", partition=0)
    proc = subprocess.run(
        [sys.executable, "-m", "examples.order_service", "--bootstrap", broker.bootstrap,
         "--topic", "shared-orders", "--orders", "12", "--db", str(tmp_path / "orders.db")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    # 12 orders with random keys: all in partition 0 has a chance of 3**-12
    assert "orders in the database: 12; order-placed events in the log (read_committed): 12" \
        in proc.stdout, proc.stdout


def test_order_service_has_a_topic_of_its_own() -> None:
    from examples.order_service.service import TOPIC
    assert TOPIC not in {"order-events", "orders"}, "the README's snippets write those"


def test_txn_heartbeat(broker: EmbeddedBroker, tmp_path: Path) -> None:
    run_snippet("txn-heartbeat", {"localhost:9092": broker.bootstrap}, tmp_path, timeout=120)
    assert b"order 43" in [r.value for r in read_committed(broker.bootstrap, "orders")]
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        state = admin.describe_transactions(["orders-writer"])["orders-writer"]
    assert state.state == "CompleteCommit"


def test_consumer_protocol(broker: EmbeddedBroker, tmp_path: Path) -> None:
    out = run_snippet("consumer-protocol", {"localhost:9092": broker.bootstrap}, tmp_path,
                      timeout=120)
    lines = out.splitlines()
    assert len(lines) == 6, out
    assert sorted(int(line.split()[1]) for line in lines) == list(range(6))
    assert all(line.endswith(f"b'event {line.split()[1]}'") for line in lines), out


def test_share_group(broker: EmbeddedBroker, tmp_path: Path) -> None:
    out = run_snippet("share-group", {"localhost:9092": broker.bootstrap}, tmp_path, timeout=120)
    delivered = Counter(int(line.split()[0]) for line in out.splitlines())
    assert delivered == Counter(range(10)), out  # every job once
    assert start_offset(broker, "workers", "jobs", 0) == 10  # and every one acknowledged


def test_share_txn(broker: EmbeddedBroker, tmp_path: Path) -> None:
    run_snippet("share-txn", {"localhost:9092": broker.bootstrap}, tmp_path, timeout=120)
    doubled = [r.value for r in read_committed(broker.bootstrap, "prices-doubled")]
    assert sorted(int(v) for v in doubled) == [0, 2, 4, 6, 8]  # each output once
    assert start_offset(broker, "pricing", "prices", 0) == 5  # each input acknowledged
