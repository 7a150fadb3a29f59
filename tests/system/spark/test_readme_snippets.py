"""The README's Spark snippets, run exactly as printed apart from addresses and paths.

Each Python block in README.md that follows a `<!-- snippet: NAME -->` line is run here as a
program of its own (a fresh process, without PYSPARK_PYTHON set, as a user would run it) with
`localhost:9092` replaced by a test broker's address, `/tmp/checkpoints` by a temporary
directory, and `spark://127.0.0.1:7077` by a test cluster's master. The tests then check what the
snippet wrote, read back with read_committed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.client import Admin, Producer
from exactly.demo.app import read_committed
from exactly.demo.spark_cluster import SparkCluster
from exactly.spark import open_transactions
from exactly.testing import EmbeddedBroker
from tests.rigs.spark_connect import SparkConnectServer
from tests.support import create_topic, readme_snippets, run_snippet

FINISHED = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}


def read_all(bootstrap: str, topic: str) -> Counter[tuple[bytes | None, bytes | None]]:
    """Every record of `topic` up to its end, read_committed."""
    return Counter((r.key, r.value) for r in read_committed(bootstrap, topic))


def feed_orders(bootstrap: str) -> Counter[tuple[bytes | None, bytes | None]]:
    """300 more records in `orders` (created if missing); everything `orders` holds."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        if "orders" not in admin.list_topics():
            create_topic(bootstrap, "orders", partitions=1)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(300):
            producer.send("orders", f"order {i}".encode(), f"k{i % 7}".encode())
        producer.flush()
    return read_all(bootstrap, "orders")


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def test_every_spark_snippet_is_tested() -> None:
    tested = {name.removeprefix("test_").replace("_", "-") for name in globals()
              if name.startswith("test_spark_")}
    spark = {name for name in readme_snippets() if name.startswith("spark-")}
    assert spark <= tested, spark - tested
    assert "spark-stream" in readme_snippets()


def test_spark_stream(broker: EmbeddedBroker, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "orders-copy", partitions=1)
    sent = feed_orders(broker.bootstrap)
    run_snippet("spark-stream", {"localhost:9092": broker.bootstrap,
                                 "/tmp/checkpoints": str(tmp_path / "checkpoints")}, tmp_path)
    assert read_all(broker.bootstrap, "orders-copy") == sent
    assert open_transactions({"bootstrap.servers": broker.bootstrap},
                             "exactly-spark-copy-orders") == []


def test_spark_batch(broker: EmbeddedBroker, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "orders-archive", partitions=1)
    out = run_snippet("spark-batch", {"localhost:9092": broker.bootstrap}, tmp_path)
    assert "archived: 1000" in out
    expected = Counter((f"k{i % 10}".encode(), f"order-{i}".encode()) for i in range(1000))
    assert read_all(broker.bootstrap, "orders-archive") == expected
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        mine = [t for t in admin.list_transactions()
                if t.transactional_id.startswith("orders-archive-nightly-")]
    assert mine, "the job's transactions should be known to the coordinator"
    assert [t.transactional_id for t in mine if t.state not in FINISHED] == []


def test_spark_cluster(broker: EmbeddedBroker, lean_python: Path, tmp_path: Path) -> None:
    """On a standalone cluster of two workers, executors with a Python that lacks exactly."""
    create_topic(broker.bootstrap, "orders-copy-on-cluster", partitions=1)
    sent = feed_orders(broker.bootstrap)
    with SparkCluster(workers=2) as cluster:
        run_snippet("spark-cluster", {"localhost:9092": broker.bootstrap,
                                      "/tmp/checkpoints": str(tmp_path / "checkpoints"),
                                      "spark://127.0.0.1:7077": cluster.master_url}, tmp_path,
                    env={"PYSPARK_PYTHON": str(lean_python), "SPARK_LOCAL_IP": "127.0.0.1"})
    assert read_all(broker.bootstrap, "orders-copy-on-cluster") == sent
    assert open_transactions({"bootstrap.servers": broker.bootstrap},
                             "exactly-spark-copy-orders-on-cluster") == []


def test_spark_connect(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """From a Spark Connect client (this snippet's process) to a Connect server (the driver)."""
    create_topic(broker.bootstrap, "orders-upper", partitions=1)
    sent = feed_orders(broker.bootstrap)
    with SparkConnectServer(work_dir=tmp_path / "connect") as server:
        run_snippet("spark-connect", {"localhost:9092": broker.bootstrap,
                                      "/tmp/checkpoints": str(tmp_path / "checkpoints"),
                                      "sc://localhost:15002": server.remote}, tmp_path)
    expected = Counter({(key, value.upper() if value else value): n
                        for (key, value), n in sent.items()})
    assert read_all(broker.bootstrap, "orders-upper") == expected
    assert open_transactions({"bootstrap.servers": broker.bootstrap},
                             "exactly-spark-orders-upper") == []
