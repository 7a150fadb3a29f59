"""Batch reads: one InputPartition per topic-partition, its [start, end) resolved on the driver;
each task reads its range with a Consumer (assign + seek, read_committed by default) and hands
rows to Spark as Arrow record batches, so they do not cross into the JVM one at a time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from exactly.client import Consumer, ConsumerRecord
from exactly.spark.clients import PROCESS, ClientFactory
from exactly.spark.offsets import PartitionRange, resolve_ranges
from exactly.spark.options import ReadOptions

__all__ = ["ARROW_SCHEMA", "SCHEMA", "BatchReader", "read_range", "read_with", "to_arrow"]

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int, "
          "headers array<struct<key:string,value:binary>>")

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(_HEADER)),
])

ROWS_PER_BATCH = 10_000
STALL_SECONDS = 120.0  # no progress for this long inside a range that should exist: fail


def to_arrow(records: list[ConsumerRecord]) -> pa.RecordBatch:
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.timestamp("us", tz="UTC")),
        pa.array([r.timestamp_type for r in records], pa.int32()),
        pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records],
                 pa.list_(_HEADER)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def read_range(client: Mapping[str, Any], r: PartitionRange,
               max_records: int = ROWS_PER_BATCH, clients: ClientFactory = PROCESS
               ) -> Iterator[list[ConsumerRecord]]:
    """The records of [r.start, r.end) in offset order, in chunks; with read_committed, the
    records of aborted transactions and control records are skipped. A consumer of its own
    (made by `clients`), for the range only."""
    if r.start >= r.end:
        return
    with clients.consumer({**client, "auto.offset.reset": "none"}) as consumer:
        yield from read_with(consumer, r, max_records)


def read_with(consumer: Consumer, r: PartitionRange, max_records: int = ROWS_PER_BATCH
              ) -> Iterator[list[ConsumerRecord]]:
    """read_range with a consumer the caller holds (its config with auto.offset.reset=none):
    assigned the range's partition, and only that, while it reads."""
    if r.start >= r.end:
        return
    tp = (r.topic, r.partition)
    consumer.assign([tp])
    consumer.seek(tp, r.start)
    position, stalled_since = r.start, time.monotonic()
    while position < r.end:
        records = consumer.poll(timeout_ms=500, max_records=max_records)
        chunk = [rec for rec in records if rec.offset < r.end]
        if chunk:
            yield chunk
        new = (records[-1].offset + 1 if records and records[-1].offset + 1 >= r.end
               else consumer.position(tp))
        if new > position:
            position, stalled_since = new, time.monotonic()
        elif time.monotonic() - stalled_since > STALL_SECONDS:
            raise TimeoutError(f"reading {r.topic}-{r.partition} made no progress at offset "
                               f"{position} for {STALL_SECONDS:.0f}s (range ends at {r.end})")


class BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(r) for r in resolve_ranges(self.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for chunk in read_range(self.options.client, partition.value):
            yield to_arrow(chunk)
