"""Arrow batches or rows between Spark and the `exactly` data source: which is faster?

PySpark's Python Data Source API lets a reader yield tuples or pyarrow.RecordBatch objects, and
a writer take Row objects (DataSourceWriter) or Arrow batches (DataSourceArrowWriter). The
connector uses Arrow both ways; this program measures the alternative with the same client code:
a batch read of N records into Spark's `noop` sink, and a batch write of N rows to a topic,
Arrow vs rows, alternating, best of --repeat. One SparkSession (local[2]), one embedded broker.

    .venv/bin/python bench/spark_arrow_vs_rows.py [--records 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceReader, DataSourceWriter, InputPartition

from exactly.client import Admin, NewTopic, Producer
from exactly.spark import ExactlyDataSource, register
from exactly.spark.options import parse_read_options, parse_write_options
from exactly.spark.sink import BatchWriter, WriteResult, check_input_schema
from exactly.spark.source import BatchReader, read_range
from exactly.testing import EmbeddedBroker


class RowReader(DataSourceReader):  # type: ignore[misc]
    """BatchReader, but yielding one tuple per record."""

    def __init__(self, reader: BatchReader) -> None:
        self.inner = reader

    def partitions(self) -> list[InputPartition]:
        return self.inner.partitions()

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for chunk in read_range(self.inner.options.client, partition.value):
            for r in chunk:
                yield (r.key, r.value, r.topic, r.partition, r.offset,
                       _timestamp(r.timestamp), r.timestamp_type,
                       [(k, v) for k, v in r.headers])


def _timestamp(ms: int) -> Any:
    import datetime
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


class RowWriter(DataSourceWriter):  # type: ignore[misc]
    """BatchWriter, but taking Spark Row objects one at a time."""

    def __init__(self, writer: BatchWriter) -> None:
        self.options = writer.options

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        count = 0
        with Producer(self.options.client) as producer:
            for row in iterator:
                producer.send(self.options.topic, row.value, row.key)
                count += 1
            producer.flush()
        return WriteResult(count)


class RowsDataSource(ExactlyDataSource):
    @classmethod
    def name(cls) -> str:
        return "exactly_rows"

    def reader(self, schema: Any) -> DataSourceReader:
        return RowReader(BatchReader(parse_read_options(self.options)))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        options = parse_write_options(self.options)
        check_input_schema(schema, options)
        return RowWriter(BatchWriter(options))


def best(fn: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(RowsDataSource)
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        bootstrap = broker.bootstrap
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic("src", 2), NewTopic("dst", 2)])
        with Producer({"bootstrap.servers": bootstrap}) as producer:
            for i in range(args.records):
                producer.send("src", b"x" * 100, f"k{i}".encode())
            producer.flush()

        def read(fmt: str) -> Callable[[], None]:
            return lambda: (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                            .option("subscribe", "src").load().write.format("noop")
                            .mode("overwrite").save())

        data = spark.range(args.records, numPartitions=2).selectExpr(
            "cast(concat('k', id) as binary) as key", "cast(repeat('x', 100) as binary) as value"
        ).cache()
        data.count()

        def write(fmt: str) -> Callable[[], None]:
            return lambda: (data.write.format(fmt).mode("append")
                            .option("kafka.bootstrap.servers", bootstrap)
                            .option("topic", "dst").save())

        for fmt in ("exactly", "exactly_rows"):  # warm up: Python workers, JIT
            read(fmt)()
            write(fmt)()
        results = {}
        for what, make in (("read", read), ("write", write)):
            arrow = rows = float("inf")
            for _ in range(args.repeat):
                arrow = min(arrow, best(make("exactly"), 1))
                rows = min(rows, best(make("exactly_rows"), 1))
            results[what] = (args.records / arrow, args.records / rows)
    spark.stop()
    print(f"{args.records} records of 100 bytes, local[2], best of {args.repeat}")
    for what, (arrow, rows) in results.items():
        print(f"batch {what:5}: Arrow {arrow:9,.0f} rec/s   rows {rows:9,.0f} rec/s   "
              f"Arrow/rows {arrow / rows:.2f}x")


if __name__ == "__main__":
    main()
