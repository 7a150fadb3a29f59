"""Exactly-once batch writes (deliveryGuarantee=exactly-once, exactly.spark.batch_sink) against a
broker over TCP: the output read back with read_committed (confluent-kafka) is the input exactly,
and no transaction of the job's prefix is left open, after a task that fails once and is retried,
two attempts of one partition that both prepare (as a speculative copy does), a job that fails,
and a driver killed with SIGKILL right after the decision; a broker without two-phase commit
fails the write on the driver before any task runs.

Tasks are retried only when the master allows it (`local[N,F]`), so the retry and the driver kill
run `drive` below in a driver process of its own, with local[2,4]; the rest uses the session-wide
local[2] SparkSession of conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from exactly import failpoints
from exactly.client import Admin
from exactly.spark import recover_batch_writes
from exactly.spark.batch_sink import (
    ExactlyOnceBatchWriter,
    ExactlyOnceUnavailable,
    batch_prefix,
    check_two_phase_commit,
    open_batch_transactions,
)
from exactly.spark.decisions import latest_decision
from exactly.spark.options import (
    AT_LEAST_ONCE,
    DECISIONS_TOPIC,
    EXACTLY_ONCE,
    OptionError,
    parse_write_options,
)
from exactly.testing import EmbeddedBroker
from exactly.txn.state import TxnState
from tests.paths import REPO
from tests.support import create_topic
from tests.system.spark.test_stream_faults import PARTITIONS, difference, read_committed

ROWS = 400
TASKS = 4  # partitions of the DataFrame: task attempts per job


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def expected_rows(tag: str, count: int = ROWS) -> Counter[tuple[bytes, bytes]]:
    """What `frame(spark, tag, count)` holds, as (key, value) bytes."""
    return Counter((f"k{i % 7}".encode(), f"{tag}-{i}".encode()) for i in range(count))


def frame(spark: SparkSession, tag: str, count: int = ROWS) -> Any:
    return spark.range(0, count, 1, TASKS).selectExpr(
        "concat('k', cast(id % 7 as string)) as key",
        f"concat('{tag}-', cast(id as string)) as value")


def write(df: Any, bootstrap: str, topic: str | None, **options: str) -> None:
    writer = (df.write.format("exactly").mode("append")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("deliveryGuarantee", EXACTLY_ONCE))
    if topic is not None:
        writer = writer.option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def drive(bootstrap: str, topic: str, prefix: str, tag: str) -> None:
    """A driver of its own (run by `run_driver`): one exactly-once batch job on local[2,4]
    (two threads, a failed task tried up to 4 times, as on a cluster)."""
    from exactly.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2,4]").appName(f"exactly-{prefix}")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    write(frame(spark, tag), bootstrap, topic, transactionalIdPrefix=prefix)
    print("written", flush=True)
    spark.stop()


def run_driver(bootstrap: str, topic: str, prefix: str, tag: str, failpoint: str | None = None,
               timeout: float = 300) -> int:
    """Run `drive` in a process (and session) of its own; its exit code (-9: killed)."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop(failpoints.ENV, None)
    if failpoint:
        env[failpoints.ENV] = failpoint
    code = "import sys; from tests.system.spark.test_batch_eos import drive; drive(*sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", code, bootstrap, topic, prefix, tag],
                          check=False, env=env, start_new_session=True, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode not in (0, -9):
        print(proc.stdout[-6000:])
    return proc.returncode


def still_open(bootstrap: str, prefix: str) -> list[str]:
    """Transactional ids under `prefix` whose transaction is open (listed by the broker)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        listed = admin.list_transactions()
    return sorted(t.transactional_id for t in listed if t.transactional_id.startswith(prefix)
                  and TxnState.from_display_name(t.state) not in (
                      TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT))


def wait_until_none_open(bootstrap: str, prefix: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while (left := still_open(bootstrap, prefix)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"transactions left open: {left}"


def records_in_log(spark: SparkSession, bootstrap: str, topic: str) -> int:
    """Every data record, aborted ones included (read_uncommitted)."""
    return (spark.read.format("exactly").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", "read_uncommitted")
            .load().count())


def new_topic(bootstrap: str, prefix: str) -> str:
    topic = _name(prefix)
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    return topic


# -- options ----------------------------------------------------------------------------------

def test_batch_writes_default_to_at_least_once_streams_to_exactly_once() -> None:
    given = {"kafka.bootstrap.servers": "localhost:9092", "topic": "t"}
    assert parse_write_options(given, batch=True).delivery == AT_LEAST_ONCE
    assert parse_write_options(given).delivery == EXACTLY_ONCE
    exactly_once = {**given, "deliveryGuarantee": "exactly-once"}
    assert parse_write_options(exactly_once, batch=True).delivery == EXACTLY_ONCE
    assert batch_prefix(parse_write_options(exactly_once, batch=True)) == "exactly-spark-batch-t"
    named = parse_write_options({**exactly_once, "transactionalIdPrefix": "nightly"}, batch=True)
    assert batch_prefix(named) == "nightly"


def test_topics_from_a_column_need_a_prefix() -> None:
    options = parse_write_options({"kafka.bootstrap.servers": "localhost:9092",
                                   "deliveryGuarantee": "exactly-once"}, batch=True)
    with pytest.raises(OptionError, match="transactionalIdPrefix"):
        batch_prefix(options)


def test_resuming_by_producer_id_is_for_streams_only() -> None:
    options = parse_write_options({"kafka.bootstrap.servers": "localhost:9092", "topic": "t",
                                   "deliveryGuarantee": "exactly-once",
                                   "transactionResume": "producer-id"}, batch=True)
    with pytest.raises(OptionError, match="transactionResume=producer-id is for streams"):
        check_two_phase_commit(options, "p")  # before it asks the broker anything


# -- in the test's SparkSession ---------------------------------------------------------------

def test_round_trip_is_exact_and_leaves_nothing_open(spark: SparkSession,
                                                     spark_broker: EmbeddedBroker) -> None:
    bootstrap = spark_broker.bootstrap
    topic = new_topic(bootstrap, "eos")
    write(frame(spark, "a"), bootstrap, topic)  # the default prefix
    prefix = f"exactly-spark-batch-{topic}"
    assert difference(expected_rows("a"), read_committed(bootstrap, topic)) == (0, 0)
    assert still_open(bootstrap, prefix) == []
    decision = latest_decision({"bootstrap.servers": bootstrap}, DECISIONS_TOPIC, prefix)
    assert decision is not None and len(decision.participants) == TASKS

    write(frame(spark, "b"), bootstrap, topic)  # a second job of the prefix adds to the first
    assert difference(expected_rows("a") + expected_rows("b"),
                      read_committed(bootstrap, topic)) == (0, 0)
    assert still_open(bootstrap, prefix) == []


def test_a_failed_job_leaves_nothing_visible(spark: SparkSession,
                                             spark_broker: EmbeddedBroker) -> None:
    bootstrap = spark_broker.bootstrap
    topic = new_topic(bootstrap, "failed")
    prefix = _name("failed-job")
    # Two partitions of 100 rows; the last row of the second has no topic: its task fails on
    # every attempt, after it has sent the 99 rows before it.
    rows = [(f"v{i}", topic) for i in range(199)] + [("no topic", None)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 2),
                               "value string, topic string")
    with pytest.raises(Exception, match="null topic"):
        write(df, bootstrap, None, transactionalIdPrefix=prefix)
    wait_until_none_open(bootstrap, prefix)
    assert read_committed(bootstrap, topic) == Counter()
    assert records_in_log(spark, bootstrap, topic) >= 99  # written, then aborted


def test_without_two_phase_commit_the_write_fails_before_any_task(
        spark: SparkSession, broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = broker_factory(settings={"transaction.two.phase.commit.enable": "false"})
    topic = new_topic(broker.bootstrap, "no2pc")
    df = frame(spark, "x", 20)
    with pytest.raises(Exception, match="KIP-939") as refused:
        write(df, broker.bootstrap, topic)
    assert "deliveryGuarantee=at-least-once" in str(refused.value)
    assert "transaction.two.phase.commit.enable" in str(refused.value)
    assert records_in_log(spark, broker.bootstrap, topic) == 0  # no task ran
    with pytest.raises(ExactlyOnceUnavailable, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        ExactlyOnceBatchWriter(parse_write_options(
            {"bootstrap.servers": broker.bootstrap, "topic": topic,
             "deliveryGuarantee": "exactly-once"}, batch=True))
    # what the error suggests works on this broker
    df.write.format("exactly").mode("append").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", topic).option("deliveryGuarantee", AT_LEAST_ONCE).save()
    assert difference(expected_rows("x", 20), read_committed(broker.bootstrap, topic)) == (0, 0)


# -- task attempts, driven by hand: the writer's own code, without Spark's scheduler ----------

def arrow(tag: str, count: int) -> Iterator[pa.RecordBatch]:
    rows = sorted(expected_rows(tag, count))
    yield pa.RecordBatch.from_pydict({"key": [k for k, _ in rows], "value": [v for _, v in rows]})


def job_on_the_driver(bootstrap: str, name: str) -> tuple[str, str, ExactlyOnceBatchWriter]:
    """A new topic, a prefix, and the writer DataSource.writer() makes for a job writing there."""
    topic, prefix = new_topic(bootstrap, name), _name(name)
    return topic, prefix, ExactlyOnceBatchWriter(parse_write_options(
        {"bootstrap.servers": bootstrap, "topic": topic, "deliveryGuarantee": "exactly-once",
         "transactionalIdPrefix": prefix}, batch=True))


def test_two_attempts_of_a_partition_both_prepare_one_is_committed(
        spark_broker: EmbeddedBroker) -> None:
    """A speculative copy (or a retry after the first attempt's result was lost) prepares too;
    Spark reports one attempt per partition, and only that one becomes visible."""
    bootstrap = spark_broker.bootstrap
    topic, prefix, writer = job_on_the_driver(bootstrap, "spec")
    first = writer.write_attempt(arrow("p0", 50), partition=0, attempt_id=10)
    copy = writer.write_attempt(arrow("p0", 50), partition=0, attempt_id=11)
    other = writer.write_attempt(arrow("p1", 30), partition=1, attempt_id=12)
    assert first.state and copy.state and other.state
    assert open_batch_transactions({"bootstrap.servers": bootstrap}, prefix) == sorted(
        m.transactional_id for m in (first, copy, other))

    writer.commit([copy, other])  # the commit coordinator let the copy report, not the first
    assert difference(expected_rows("p0", 50) + expected_rows("p1", 30),
                      read_committed(bootstrap, topic)) == (0, 0)
    assert still_open(bootstrap, prefix) == []

    # An attempt that starts after the job ended writes nothing.
    late = writer.write_attempt(arrow("late", 10), partition=1, attempt_id=13)
    assert (late.state, late.records) == ("", 0)
    assert difference(expected_rows("p0", 50) + expected_rows("p1", 30),
                      read_committed(bootstrap, topic)) == (0, 0)


def test_an_attempt_still_writing_when_its_job_ends_aborts_its_own_transaction(
        spark_broker: EmbeddedBroker) -> None:
    bootstrap = spark_broker.bootstrap
    topic, prefix, writer = job_on_the_driver(bootstrap, "straggler")
    done = writer.write_attempt(arrow("done", 20), partition=0, attempt_id=1)

    def rows_after_the_commit() -> Iterator[pa.RecordBatch]:
        # The driver commits the job while this attempt has begun but not yet written: the
        # driver's list of the job's open transactions cannot hold it.
        writer.commit([done])
        yield from arrow("straggler", 10)

    straggler = writer.write_attempt(rows_after_the_commit(), partition=1, attempt_id=2)
    assert (straggler.state, straggler.records) == ("", 0)
    assert difference(expected_rows("done", 20), read_committed(bootstrap, topic)) == (0, 0)
    assert still_open(bootstrap, prefix) == []


# -- a driver process of its own (local[2,4]) -------------------------------------------------

def test_a_task_failing_mid_write_is_retried_without_duplicates(
        spark: SparkSession, spark_broker: EmbeddedBroker) -> None:
    bootstrap = spark_broker.bootstrap
    topic = new_topic(bootstrap, "retry")
    prefix = _name("retry")
    # every task's first attempt fails after it has sent its first Arrow batch
    assert run_driver(bootstrap, topic, prefix, "r", "spark.batch.task.write=raise") == 0
    assert difference(expected_rows("r"), read_committed(bootstrap, topic)) == (0, 0)
    assert still_open(bootstrap, prefix) == []
    assert records_in_log(spark, bootstrap, topic) > ROWS  # the failed attempts' rows, aborted


@pytest.mark.parametrize("repair", ["next job", "recover_batch_writes"])
def test_a_driver_killed_after_the_decision_is_repaired(
        spark: SparkSession, spark_broker: EmbeddedBroker, repair: str) -> None:
    bootstrap = spark_broker.bootstrap
    client = {"bootstrap.servers": bootstrap}
    topic = new_topic(bootstrap, "killed")
    prefix = _name("killed")
    assert run_driver(bootstrap, topic, prefix, "k", "spark.batch.driver.after_decision=crash") \
        == -9, "the fault point should have killed the driver"
    decision = latest_decision(client, DECISIONS_TOPIC, prefix)
    assert decision is not None and len(decision.participants) == TASKS
    # decided, and nothing completed: every participant is open, nothing is visible yet
    assert still_open(bootstrap, prefix) == sorted(decision.participants)
    expected = expected_rows("k")
    if repair == "next job":
        write(frame(spark, "n"), bootstrap, topic, transactionalIdPrefix=prefix)
        expected += expected_rows("n")
    else:
        recovered = recover_batch_writes(client, prefix)
        assert sorted(recovered.committed) == sorted(decision.participants)
    assert difference(expected, read_committed(bootstrap, topic)) == (0, 0)
    assert still_open(bootstrap, prefix) == []
