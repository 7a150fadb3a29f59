"""The README's snippets outside Spark (tests/spark/test_readme_snippets.py runs the Spark ones),
each run exactly as printed as a program of its own, with `localhost:9092` replaced by a test
broker's address; the tests then check what the snippet did, on the broker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.client import Admin
from exactly.demo.app import read_committed
from exactly.testing import EmbeddedBroker
from tests.share.raw import start_offset
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
