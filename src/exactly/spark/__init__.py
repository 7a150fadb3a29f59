"""PySpark data sources for Exactly (PySpark >= 4.0 Python Data Source API), format `exactly`.

    from exactly.spark import register
    register(spark)
    df = (spark.read.format("exactly").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "orders").load())
    df.write.format("exactly").mode("append").option("kafka.bootstrap.servers", bootstrap)
      .option("topic", "copy").save()

    # a stream, written exactly-once (2PC, the driver as coordinator)
    (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
       .option("subscribe", "orders").load()
       .writeStream.format("exactly").queryName("copy-orders")
       .option("kafka.bootstrap.servers", bootstrap).option("topic", "copy")
       .option("checkpointLocation", "/path/to/checkpoint").start())

Options and columns are those of Spark's own Kafka connector (see `exactly.spark.options`).
`open_transactions(client, prefix)` lists the transactions an exactly-once query has open
(transactional ids `<prefix>-<partition>`; the prefix is `exactly-spark-<queryName>` unless option
transactionalIdPrefix sets it).

`exactly demo` is an application of this connector, in `exactly.demo`; nothing here imports it.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from exactly.spark.options import OptionError, parse_read_options, parse_write_options
from exactly.spark.sink import BatchWriter, check_input_schema
from exactly.spark.source import SCHEMA, BatchReader
from exactly.spark.stream_sink import StreamWriter, open_transactions
from exactly.spark.stream_source import StreamReader

__all__ = ["ExactlyDataSource", "OptionError", "open_transactions", "register"]


class ExactlyDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "exactly"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_write_options(self.options)
        check_input_schema(schema, options)
        return BatchWriter(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_write_options(self.options)
        check_input_schema(schema, options)
        return StreamWriter(options)


def register(spark: Any) -> None:
    """Make format("exactly") available in this Spark session."""
    spark.dataSource.register(ExactlyDataSource)
