"""Batch reads and writes through format("exactly") against an embedded broker."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer as CKProducer
from pyspark.sql import SparkSession

from exactly.client import Producer
from exactly.spark.options import OptionError, parse_read_options
from exactly.testing import EmbeddedBroker
from tests.support import create_topic, produce_confluent


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read(spark: SparkSession, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("exactly").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_write_then_read_round_trip(spark: SparkSession, spark_broker: EmbeddedBroker) -> None:
    topic = _topic("rt")
    create_topic(spark_broker.bootstrap, topic, partitions=3)
    rows = [(f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}".encode())]) for i in range(200)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, headers array<struct<key:string,value:binary>>")
    (df.repartition(2).write.format("exactly").mode("append")
       .option("kafka.bootstrap.servers", spark_broker.bootstrap).option("topic", topic).save())

    out = _read(spark, spark_broker.bootstrap, subscribe=topic)
    assert [f.name for f in out.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    got = out.collect()
    assert sorted((bytes(r.key), bytes(r.value), [(h.key, bytes(h.value)) for h in r.headers])
                  for r in got) == sorted((k, v, h) for k, v, h in rows)
    assert {r.topic for r in got} == {topic}
    assert {r.partition for r in got} <= {0, 1, 2}
    assert len({(r.partition, r.offset) for r in got}) == 200
    assert all(isinstance(r.timestamp, datetime.datetime) and r.timestampType == 0 for r in got)
    # each key keeps its partition (default partitioner), so offsets per partition are dense
    for p in {r.partition for r in got}:
        offsets = sorted(r.offset for r in got if r.partition == p)
        assert offsets == list(range(len(offsets)))


def test_write_with_topic_and_partition_columns(spark: SparkSession,
                                                spark_broker: EmbeddedBroker) -> None:
    a, b = _topic("ca"), _topic("cb")
    create_topic(spark_broker.bootstrap, a, partitions=2)
    create_topic(spark_broker.bootstrap, b, partitions=1)
    df = spark.createDataFrame([("x1", a, 1), ("x2", b, 0), ("x3", a, 1)],
                               "value string, topic string, partition int")
    df.write.format("exactly").mode("append").option(
        "bootstrap.servers", spark_broker.bootstrap).save()
    got = _read(spark, spark_broker.bootstrap, subscribe=f"{a},{b}").collect()
    assert sorted((r.topic, r.partition, bytes(r.value)) for r in got) == sorted(
        [(a, 1, b"x1"), (b, 0, b"x2"), (a, 1, b"x3")])
    assert all(r.key is None for r in got)


def test_offset_ranges_and_assign(spark: SparkSession, spark_broker: EmbeddedBroker) -> None:
    topic = _topic("range")
    create_topic(spark_broker.bootstrap, topic, partitions=2)
    with Producer({"bootstrap.servers": spark_broker.bootstrap}) as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i, partition=0)
        producer.send(topic, b"p1", partition=1).result(30)
    got = _read(spark, spark_broker.bootstrap, assign=f'{{"{topic}":[0]}}',
                startingOffsets=f'{{"{topic}":{{"0":3}}}}',
                endingOffsets=f'{{"{topic}":{{"0":7}}}}').collect()
    assert [(r.offset, bytes(r.value)) for r in sorted(got, key=lambda r: r.offset)] == [
        (i, b"%d" % i) for i in range(3, 7)]
    both = _read(spark, spark_broker.bootstrap, subscribePattern=f"{topic}",
                 startingOffsets="earliest", endingOffsets="latest").collect()
    assert len(both) == 11


def test_read_committed_skips_aborted_transactions(spark: SparkSession,
                                                  spark_broker: EmbeddedBroker) -> None:
    topic = _topic("txn")
    create_topic(spark_broker.bootstrap, topic, partitions=1)
    producer = CKProducer({"bootstrap.servers": spark_broker.bootstrap,
                           "transactional.id": f"spark-test-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"committed-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, f"aborted-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed-last")
    producer.commit_transaction(30)

    committed = _read(spark, spark_broker.bootstrap, subscribe=topic).collect()
    assert [bytes(r.value) for r in sorted(committed, key=lambda r: r.offset)] == [
        *(f"committed-{i}".encode() for i in range(5)), b"committed-last"]
    everything = _read(spark, spark_broker.bootstrap, subscribe=topic,
                       **{"kafka.isolation.level": "read_uncommitted"}).collect()
    assert sum(bytes(r.value).startswith(b"aborted") for r in everything) == 4
    assert len(everything) == 10


def test_read_stops_at_last_stable_offset(spark: SparkSession,
                                          spark_broker: EmbeddedBroker) -> None:
    topic = _topic("open")
    create_topic(spark_broker.bootstrap, topic, partitions=1)
    produce_confluent(spark_broker.bootstrap, topic, [b"before"])
    producer = CKProducer({"bootstrap.servers": spark_broker.bootstrap,
                           "transactional.id": f"spark-test-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    producer.flush(30)
    try:
        got = _read(spark, spark_broker.bootstrap, subscribe=topic).collect()
        assert [bytes(r.value) for r in got] == [b"before"]
    finally:
        producer.abort_transaction(30)


@pytest.mark.parametrize(("options", "named"), [
    ({"subscribe": "t", "sbuscribe": "t"}, "sbuscribe"),
    ({}, "subscribe"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "assign"),
    ({"assign": "[0]"}, "assign"),
    ({"subscribe": "t", "startingOffsets": "soon"}, "startingOffsets"),
    ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"subscribe": "t", "kafka.isolation.level": "dirty"}, "isolation.level"),
])
def test_bad_read_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        parse_read_options({"kafka.bootstrap.servers": "localhost:9092", **options})


def test_bad_options_fail_the_spark_query(spark: SparkSession,
                                          spark_broker: EmbeddedBroker) -> None:
    with pytest.raises(Exception, match="colour"):
        _read(spark, spark_broker.bootstrap, subscribe="x", colour="blue").collect()
    with pytest.raises(Exception, match="bootstrap.servers"):
        spark.read.format("exactly").option("subscribe", "x").load().collect()
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="topic"):
        df.write.format("exactly").mode("append").option(
            "kafka.bootstrap.servers", spark_broker.bootstrap).save()
