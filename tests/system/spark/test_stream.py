"""Streaming reads and writes through format("exactly") in the shared SparkSession."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from exactly.client import Producer, TransactionSession
from exactly.spark.decisions import latest_decision
from exactly.spark.options import (
    DECISIONS_TOPIC,
    OptionError,
    parse_read_options,
    parse_write_options,
)
from exactly.spark.stream_source import limit_offsets
from exactly.testing import EmbeddedBroker
from tests.support import create_topic
from tests.system.spark.test_stream_faults import read_committed


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _transaction(bootstrap: str, topic: str, values: list[str], commit: bool, txn_id: str) -> None:
    with TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": txn_id}) as s:
        s.initialize()
        s.begin_transaction()
        with Producer({"bootstrap.servers": bootstrap}, session=s) as producer:
            for value in values:
                producer.send(topic, value.encode(), partition=0)
        if commit:
            s.commit_transaction()
        else:
            s.abort_transaction()


def test_read_committed_stream_never_shows_aborted_data(spark: SparkSession,
                                                        spark_broker: EmbeddedBroker,
                                                        tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    topic = _topic("rc")
    create_topic(bootstrap, topic, partitions=1)
    txn_id = _topic("writer")
    _transaction(bootstrap, topic, ["c1", "c2"], True, txn_id)
    _transaction(bootstrap, topic, ["a1", "a2", "a3"], False, txn_id)
    _transaction(bootstrap, topic, ["c3"], True, txn_id)
    name = f"rc_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "3").load()
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        query.processAllAvailable()
        rows = spark.sql(f"select value, offset from {name} order by offset").collect()
        # the offsets of a batch span control records and aborted records, which are skipped
        end = query.lastProgress["sources"][0]["endOffset"]
    finally:
        query.stop()
    assert [bytes(r.value).decode() for r in rows] == ["c1", "c2", "c3"]
    # 3 commit markers, 1 abort marker and 3 aborted records sit between them
    assert [r.offset for r in rows] == [0, 1, 7]
    assert (end if isinstance(end, dict) else __import__("json").loads(end)) == {topic: {"0": 9}}


def _copy(spark: SparkSession, bootstrap: str, src: str, dst: str, name: str,
          checkpoint: Path) -> int:
    """Run a copy stream from src to dst until it has read everything; its last batch id."""
    query = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", src).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "200").load()
             .select("key", "value")
             .writeStream.format("exactly").queryName(name)
             .option("kafka.bootstrap.servers", bootstrap).option("topic", dst)
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        query.processAllAvailable()
        return int(query.lastProgress["batchId"])
    finally:
        query.stop()


def test_stream_to_topic_exactly_once_records_its_decisions(spark: SparkSession,
                                                            spark_broker: EmbeddedBroker,
                                                            tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    src, dst, again = _topic("src"), _topic("dst"), _topic("again")
    for topic in (src, dst, again):
        create_topic(bootstrap, topic, partitions=2)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(500):
            producer.send(src, f"v{i}".encode(), f"k{i}".encode())
    name = f"copy_{uuid.uuid4().hex[:8]}"
    last_batch = _copy(spark, bootstrap, src, dst, name, tmp_path / "ckpt")
    expected = sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(500))
    got = read_committed(bootstrap, dst)
    assert sorted(got) == expected
    assert set(got.values()) == {1}
    decision = latest_decision({"bootstrap.servers": bootstrap}, DECISIONS_TOPIC,
                               f"exactly-spark-{name}")
    assert decision is not None and decision.batch == last_batch >= 2
    assert set(decision.participants) <= {f"exactly-spark-{name}-0", f"exactly-spark-{name}-1"}
    # The same query name on a new checkpoint is a new query (batch ids from 0 again): the
    # decisions of the old one must not make it skip its batches.
    _copy(spark, bootstrap, src, again, name, tmp_path / "new-ckpt")
    got = read_committed(bootstrap, again)
    assert sorted(got) == expected


def test_stream_options_are_checked(spark: SparkSession, spark_broker: EmbeddedBroker) -> None:
    bootstrap = spark_broker.bootstrap
    with pytest.raises(OptionError, match="endingOffsets is for batch queries only"):
        parse_read_options({"bootstrap.servers": bootstrap, "subscribe": "t",
                            "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger is for streams only"):
        parse_read_options({"bootstrap.servers": bootstrap, "subscribe": "t",
                            "maxOffsetsPerTrigger": "10"})
    with pytest.raises(OptionError, match="maxoffsetspertrigger.*positive"):
        parse_read_options({"bootstrap.servers": bootstrap, "subscribe": "t",
                            "maxOffsetsPerTrigger": "0"}, streaming=True)
    with pytest.raises(OptionError, match="deliveryGuarantee"):
        parse_write_options({"bootstrap.servers": bootstrap, "deliveryGuarantee": "twice"})
    with pytest.raises(OptionError, match="queryName"):
        _ = parse_write_options({"bootstrap.servers": bootstrap}).prefix
    assert parse_write_options({"bootstrap.servers": bootstrap, "queryName": "q"}).prefix == \
        "exactly-spark-q"
    assert parse_read_options({"bootstrap.servers": bootstrap, "subscribe": "t"},
                              streaming=True).starting == "latest"
    # the error reaches the user when the query starts
    df = spark.readStream.format("rate").load().selectExpr("cast(value as string) as value")
    with pytest.raises(Exception, match="queryName"):
        (df.writeStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", "t").option("checkpointLocation", "/tmp/unused").start()
         .processAllAvailable())


def test_max_offsets_per_trigger_is_shared_by_lag() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    end = {("t", 0): 300, ("t", 1): 200}
    assert limit_offsets(start, end, 1000) == end
    assert limit_offsets(start, end, 100) == {("t", 0): 75, ("t", 1): 125}
    assert limit_offsets({("t", 0): 5}, {("t", 0): 5, ("t", 1): 9}, 3) == {("t", 0): 5,
                                                                         ("t", 1): 9}
