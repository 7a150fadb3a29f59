"""Batch writes: each task sends its rows with an idempotent Producer and flushes before it
reports success. Input columns as in Spark's Kafka sink: value (required), key, topic (or the
option topic), partition, headers. Rows arrive as Arrow record batches (DataSourceArrowWriter).

BatchWriter is deliveryGuarantee=at-least-once, the default of batch writes (as in Spark's own
Kafka sink): a retried task writes its rows again. deliveryGuarantee=exactly-once (one prepared
KIP-939 transaction per task attempt, committed by the driver) is exactly.spark.batch_sink's;
the streaming sink uses `send_rows` too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from exactly.client import Producer
from exactly.spark.clients import PROCESS
from exactly.spark.options import OptionError, WriteOptions

__all__ = ["BatchWriter", "WriteResult", "check_input_schema", "send_rows"]

_BYTES = (BinaryType, StringType)


@dataclass
class WriteResult(WriterCommitMessage):  # type: ignore[misc]
    records: int


def check_input_schema(schema: StructType, options: WriteOptions) -> None:
    """Fail on the driver, before any task runs, when the input columns cannot be written."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the DataFrame to write needs a 'value' column (binary or string)")
    if "topic" not in fields and options.topic is None:
        raise OptionError("no topic to write to: set option 'topic' or add a 'topic' column")
    wanted = {"value": _BYTES, "key": _BYTES, "topic": (StringType,), "partition": (IntegerType,)}
    for name, types in wanted.items():
        if name in fields and not isinstance(fields[name], types):
            raise OptionError(f"column {name!r} has type {fields[name].simpleString()}; "
                              f"expected {' or '.join(t.typeName() for t in types)}")
    headers = fields.get("headers")
    if headers is not None and not (
            isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]):
        raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>, "
                          f"not {headers.simpleString()}")


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


def send_rows(producer: Producer, iterator: Iterator[pa.RecordBatch], default_topic: str | None,
              after_batch: Callable[[int], None] | None = None) -> int:
    """Send every row of the Arrow batches; return how many. Raises the first write error once
    the producer is flushed. `after_batch(rows_so_far)` runs after each Arrow batch is sent."""
    count = 0
    futures: dict[int, Any] = {}  # one future per producer batch, to check after the flush
    for batch in iterator:
        n = batch.num_rows
        values = _column(batch, "value") or [None] * n
        keys = _column(batch, "key") or [None] * n
        topics = _column(batch, "topic") or [default_topic] * n
        parts = _column(batch, "partition") or [None] * n
        headers = _column(batch, "headers") or [None] * n
        for value, key, topic, part, hdrs in zip(values, keys, topics, parts, headers,
                                                 strict=True):
            topic = topic or default_topic
            if topic is None:
                raise ValueError("a row has a null topic and option 'topic' is not set")
            future = producer.send(
                topic, value, key, partition=part,
                headers=[(h["key"], h["value"]) for h in hdrs] if hdrs else None)
            futures.setdefault(id(future.batch), future)
        count += n
        if after_batch is not None:
            after_batch(count)
    producer.flush()
    for future in futures.values():
        future.result(timeout=0)  # raises the batch's error, if any
    return count


class BatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        with PROCESS.producer(self.options.client) as producer:
            return WriteResult(send_rows(producer, iterator, self.options.topic))
