"""The exactly-once streaming sink against brokers without KIP-939's KeepPreparedTxn: Exactly with
transaction.two.phase.commit.enable=false (at transaction.version 2, and 1), and librdkafka's
mock cluster (InitProducerId below v6, no DescribeTransactions).

By default the sink refuses, on the driver before any task runs, with an error naming what the
broker lacks and the ways out. With transactionResume=producer-id it commits by resuming each
task's producer id and epoch: exactly-once through a normal run and through a driver SIGKILL
between the decision and the commit; and a batch whose commit comes after
transaction.timeout.ms is reported lost, loudly, and not written twice.

The driver processes are tests/workers/spark_stream_worker.py, run through this module as a
script so that the sink's options can be added to the worker's query (see `_driver`).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

from exactly import failpoints
from exactly.client import Admin, Producer
from exactly.spark.decisions import latest_decision
from exactly.spark.options import DECISIONS_TOPIC, OptionError, parse_write_options
from exactly.spark.stream_sink import RESUME_TIMEOUT_MS, StreamWriter
from exactly.testing import EmbeddedBroker
from tests.helpers.client.fixtures import mock_bootstrap  # noqa: F401 (a fixture)
from tests.paths import REPO
from tests.support import create_topic, end_offsets
from tests.system.spark.test_stream_faults import (
    MAX_OFFSETS,
    WORKER,
    Pipeline,
    read_committed,
    still_open,
)

RESUME = {"transactionResume": "producer-id"}
NO_2PC = {"transaction.two.phase.commit.enable": "false",
          # timed-out transactions aborted within half a second (the lost-batch test)
          "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker_v2() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={**NO_2PC, "transaction.version": "2"}) as broker:
        yield broker


@pytest.fixture(scope="module")
def broker_v1() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={**NO_2PC, "transaction.version": "1"}) as broker:
        yield broker


def _broker(request: pytest.FixtureRequest, version: str) -> EmbeddedBroker:
    broker: EmbeddedBroker = request.getfixturevalue(f"broker_v{version}")
    return broker


def _writer(bootstrap: str, **options: str) -> StreamWriter:
    """The writer as the driver makes it (where the broker's capabilities are checked)."""
    return StreamWriter(parse_write_options({"kafka.bootstrap.servers": bootstrap, "topic": "t",
                                             "queryName": f"q{uuid.uuid4().hex[:8]}",
                                             **options}))


def _timeouts(bootstrap: str, prefix: str) -> set[int]:
    """transaction.timeout.ms of the query's transactional ids, as the coordinator holds them."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        ids = [t.transactional_id for t in admin.list_transactions()
               if t.transactional_id.startswith(f"{prefix}-") and
               t.transactional_id[len(prefix) + 1:].isdigit()]
        return {d.timeout_ms for d in admin.describe_transactions(ids).values()}


# -- the default: refused, with what is missing ----------------------------------------------

def test_default_refuses_before_any_task_runs(spark: SparkSession, broker_v2: EmbeddedBroker,
                                              tmp_path: Path) -> None:
    bootstrap = broker_v2.bootstrap
    with pytest.raises(OptionError) as refused:
        _writer(bootstrap)
    message = str(refused.value)
    for named in ("KeepPreparedTxn (KIP-939)", "refuses it",
                  "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                  "transaction.two.phase.commit.enable is false",
                  "transactionResume=producer-id", "deliveryGuarantee=at-least-once"):
        assert named in message, (named, message)
    # through Spark: the query fails on the driver, no task writes anything
    topic, name = f"out-{uuid.uuid4().hex[:8]}", f"refused_{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    df = spark.readStream.format("rate").load().selectExpr("cast(value as string) as value")
    with pytest.raises(Exception) as failed:
        query = (df.writeStream.format("exactly").queryName(name)
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                 .option("checkpointLocation", str(tmp_path / "ckpt")).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    assert "transactionResume=producer-id" in str(failed.value)
    assert "stage failure" not in str(failed.value)  # not a task's error
    assert end_offsets(bootstrap, topic, 2) == [0, 0]


def test_bad_option_values_are_refused(broker_v2: EmbeddedBroker) -> None:
    with pytest.raises(OptionError, match="transactionResume.*keep-prepared.*producer-id"):
        parse_write_options({"bootstrap.servers": "h:1", "transactionResume": "later"})
    with pytest.raises(OptionError, match="transaction.max.timeout.ms"):
        _writer(broker_v2.bootstrap, **RESUME,
                **{"kafka.transaction.timeout.ms": str(RESUME_TIMEOUT_MS + 1)})


def test_mock_cluster_refuses_both_ways_and_names_why(mock_bootstrap: str) -> None:  # noqa: F811
    """librdkafka's mock offers InitProducerId below v6, and neither DescribeTransactions nor
    ListTransactions, which recovery by producer id needs. (Exactly-once cannot be shown on the
    mock anyway: its read_committed shows aborted and open transactions.)"""
    with pytest.raises(OptionError,
                       match=r"lacks InitProducerId v6, .*offers up to v\d.*transactionResume="):
        _writer(mock_bootstrap)
    with pytest.raises(OptionError, match="needs DescribeTransactions and ListTransactions"):
        _writer(mock_bootstrap, **RESUME)
    # at-least-once needs neither
    assert _writer(mock_bootstrap, deliveryGuarantee="at-least-once").decision is None


# -- producer-id mode ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["2", "1"])
def test_producer_id_mode_normal_run(spark: SparkSession, request: pytest.FixtureRequest,
                                     tmp_path: Path, version: str) -> None:
    bootstrap = _broker(request, version).bootstrap
    src, dst = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    name = f"resume_{uuid.uuid4().hex[:8]}"
    for topic in (src, dst):
        create_topic(bootstrap, topic, partitions=2)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(400):
            producer.send(src, f"v{i}".encode(), f"k{i}".encode())
    query = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", src).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "200").load().select("key", "value")
             .writeStream.format("exactly").queryName(name).options(**RESUME)
             .option("kafka.transaction.timeout.ms", "600000")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        query.processAllAvailable()
        last_batch = int(query.lastProgress["batchId"])
    finally:
        query.stop()
    got = read_committed(bootstrap, dst)
    assert sorted(got) == sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(400))
    assert set(got.values()) == {1}
    prefix = f"exactly-spark-{name}"
    decision = latest_decision({"bootstrap.servers": bootstrap}, DECISIONS_TOPIC, prefix)
    assert decision is not None and decision.batch == last_batch >= 1
    assert still_open(bootstrap, name) == []
    # ordinary transactions with the timeout asked for (2PC would show none: -1)
    assert _timeouts(bootstrap, prefix) == {600000}


class ResumePipeline(Pipeline):
    """The fault tests' pipeline, its driver run with transactionResume=producer-id."""

    def __init__(self, bootstrap: str, tmp: Path, options: dict[str, str] | None = None, *,
                 replication: int = 1) -> None:
        super().__init__(bootstrap, tmp, "exactly-once", replication)
        self.options = {**RESUME, **(options or {})}
        self.output = ""

    def run(self, failpoint: str | None = None) -> int:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop(failpoints.ENV, None)
        if failpoint:
            env[failpoints.ENV] = failpoint
        proc = subprocess.run(
            [sys.executable, __file__, json.dumps(self.options), self.bootstrap, self.src,
             self.dst, str(self.checkpoint), self.name, "exactly-once", str(MAX_OFFSETS)],
            check=False, env=env, start_new_session=True, timeout=300,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output = proc.stdout
        if proc.returncode not in (0, -9):
            print(proc.stdout[-6000:])
        return proc.returncode


@pytest.mark.parametrize("version", ["2", "1"])
def test_producer_id_mode_driver_killed_after_decision(request: pytest.FixtureRequest,
                                                       tmp_path: Path, version: str) -> None:
    bootstrap = _broker(request, version).bootstrap
    pipe = ResumePipeline(bootstrap, tmp_path)
    assert pipe.run("spark.driver.after_decision=crash@1") == -9
    # batch 1 is decided, its transactions are open: ordinary ones, with the default timeout
    assert still_open(bootstrap, pipe.name)
    assert _timeouts(bootstrap, f"exactly-spark-{pipe.name}") == {RESUME_TIMEOUT_MS}
    assert pipe.run() == 0
    assert pipe.check() == (0, 0)
    assert still_open(bootstrap, pipe.name) == []
    assert "spark_batch_output_lost" not in pipe.output


def test_commit_after_the_timeout_is_reported_lost(broker_v2: EmbeddedBroker,
                                                   tmp_path: Path) -> None:
    """The known risk: batch 3 is decided, then its commit waits longer than
    transaction.timeout.ms, and the broker aborts its transactions. The query fails with
    BatchOutputLost; the restart logs the loss again, does not write the batch twice, and
    goes on.

    The timeout is 30 s, not shorter: every batch's transactions live under it, and on a busy
    machine a batch that is not paused has taken more than 10 s from its first write to its
    commit (batch 0 was then reported lost instead of batch 3). The pause is longer than the
    whole timeout, so batch 3's transactions time out whatever the machine's speed."""
    pipe = ResumePipeline(broker_v2.bootstrap, tmp_path,
                          {"kafka.transaction.timeout.ms": "30000"})
    assert pipe.run("spark.driver.after_decision=pause:32@3") not in (0, -9)
    assert "BatchOutputLost: batch 3" in pipe.output, pipe.output[-6000:]
    assert "event=spark_batch_output_lost transactional_id=exactly-spark-" in pipe.output
    assert pipe.run() == 0
    assert "event=spark_batch_output_lost" in pipe.output  # found again by the recovery
    assert "batch=3" in pipe.output
    duplicates, missing = pipe.check()
    assert duplicates == 0
    assert 0 < missing <= MAX_OFFSETS  # batch 3's rows, no more
    assert still_open(broker_v2.bootstrap, pipe.name) == []


def test_a_batch_near_the_timeout_is_warned_of(broker_v2: EmbeddedBroker, tmp_path: Path) -> None:
    """Batch 3's decision comes 20 s after its tasks began their transactions (the driver
    paused after the tasks prepared), with transaction.timeout.ms at 30 s: past half of it,
    the driver warns, naming the batch and the figures; the batch still commits."""
    pipe = ResumePipeline(broker_v2.bootstrap, tmp_path,
                          {"kafka.transaction.timeout.ms": "30000"})
    assert pipe.run("spark.driver.after_prepare=pause:20@3") == 0, pipe.output[-6000:]
    assert "event=spark_transaction_age_near_timeout batch=3 " in pipe.output, pipe.output[-6000:]
    assert "transaction_timeout_ms=30000" in pipe.output
    assert "event=spark_transaction_age_near_timeout batch=2 " not in pipe.output
    assert "spark_batch_output_lost" not in pipe.output
    assert pipe.check() == (0, 0)
    assert still_open(broker_v2.bootstrap, pipe.name) == []


def _driver(options: dict[str, Any]) -> None:
    """tests/workers/spark_stream_worker.py (its arguments follow), with `options` added to
    the sink of its query: the worker has no way to pass data source options."""
    start = DataStreamWriter.start

    def start_with_options(self: DataStreamWriter, *args: Any, **kwargs: Any) -> Any:
        return start(self.options(**options), *args, **kwargs)

    DataStreamWriter.start = start_with_options  # type: ignore[method-assign]
    sys.argv = [str(WORKER), *sys.argv[2:]]
    runpy.run_path(str(WORKER), run_name="__main__")


if __name__ == "__main__":
    _driver(json.loads(sys.argv[1]))
