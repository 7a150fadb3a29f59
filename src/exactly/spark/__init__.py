"""PySpark data sources for Exactly (PySpark >= 4.0 Python Data Source API), format `exactly`.

    from exactly.spark import register
    register(spark)
    df = (spark.read.format("exactly").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "orders").load())
    df.write.format("exactly").mode("append").option("kafka.bootstrap.servers", bootstrap)
      .option("topic", "copy").save()

    # a batch write, exactly-once (KIP-939 2PC: each task's output one prepared transaction,
    # committed by the driver when the job succeeds); the default is at-least-once
    (df.write.format("exactly").mode("append").option("kafka.bootstrap.servers", bootstrap)
       .option("topic", "copy").option("deliveryGuarantee", "exactly-once").save())

    # a stream, written exactly-once (2PC, the driver as coordinator)
    (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
       .option("subscribe", "orders").load()
       .writeStream.format("exactly").queryName("copy-orders")
       .option("kafka.bootstrap.servers", bootstrap).option("topic", "copy")
       .option("checkpointLocation", "/path/to/checkpoint").start())

Options and columns are those of Spark's own Kafka connector (see `exactly.spark.options`).
An exactly-once stream needs a broker with KIP-939 two-phase commit (KeepPreparedTxn, and
transaction.two.phase.commit.enable=true); the query checks at its start and otherwise refuses,
naming what is missing. For brokers without it (Apache Kafka up to 4.x), option
transactionResume=producer-id commits as Flink's KafkaSink did before FLIP-319: a batch whose
commit comes later than kafka.transaction.timeout.ms is lost, and reported (what is and is not
guaranteed: `exactly.spark.stream_sink`).
`open_transactions(client, prefix)` lists the transactions an exactly-once query has open
(transactional ids `<prefix>-<partition>`; the prefix is `exactly-spark-<queryName>` unless option
transactionalIdPrefix sets it). An exactly-once batch write uses `<prefix>-<job>-<partition>-<task
attempt>`, prefix `exactly-spark-batch-<topic>` unless option transactionalIdPrefix sets it (batch
jobs that run at the same time need different prefixes); `recover_batch_writes(client, prefix)`
finishes what a crashed job of the prefix left open (see `exactly.spark.batch_sink`).

The connector's code runs in Spark's Python workers (the driver's commit too), whose logging is
not configured: with EXACTLY_SPARK_LOG_LEVEL=INFO in their environment (the driver's, in local
mode; `spark.executorEnv.EXACTLY_SPARK_LOG_LEVEL` for executors) the `exactly` loggers write to
the workers' stderr, which Spark puts in the driver's and executors' logs.

`exactly demo` is an application of this connector, in `exactly.demo`; nothing here imports it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from exactly.spark.batch_sink import ExactlyOnceBatchWriter, recover_batch_writes
from exactly.spark.options import (
    EXACTLY_ONCE,
    OptionError,
    parse_read_options,
    parse_write_options,
)
from exactly.spark.ship import ship
from exactly.spark.sink import BatchWriter, check_input_schema
from exactly.spark.source import SCHEMA, BatchReader
from exactly.spark.stream_sink import StreamWriter, open_transactions
from exactly.spark.stream_source import StreamReader

LOG_LEVEL_ENV = "EXACTLY_SPARK_LOG_LEVEL"


def _log_to_stderr(level: str | None) -> None:
    """Send the `exactly` loggers' records at `level` and above to stderr (once per process)."""
    logger = logging.getLogger("exactly")
    if not level or any(getattr(h, "exactly_spark", False) for h in logger.handlers):
        return
    if level.upper() not in logging.getLevelNamesMapping():
        raise ValueError(f"{LOG_LEVEL_ENV}={level!r} is not a logging level; use DEBUG, INFO, "
                         "WARNING or ERROR")
    handler = logging.StreamHandler(sys.stderr)
    handler.exactly_spark = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level.upper())


_log_to_stderr(os.environ.get(LOG_LEVEL_ENV))

__all__ = ["ExactlyDataSource", "OptionError", "open_transactions", "recover_batch_writes",
           "register", "ship"]


class ExactlyDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "exactly"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_write_options(self.options, batch=True)
        check_input_schema(schema, options)
        if options.delivery == EXACTLY_ONCE:
            return ExactlyOnceBatchWriter(options)  # on the driver: checks the broker, recovers
        return BatchWriter(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_write_options(self.options)
        check_input_schema(schema, options)
        return StreamWriter(options)


def register(spark: Any) -> None:
    """Make format("exactly") available in this Spark session.

    In local mode Spark's Python workers run on this machine with `python3` from the PATH unless
    PYSPARK_PYTHON (or spark.pyspark.python) names another; that Python may lack `exactly`.
    Then they run this interpreter instead, the driver's, which has it. On a cluster the
    executors' Python is the job's business: see `ship`."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):  # Connect: the server's
        context = spark.sparkContext
        if (context.master.startswith("local") and "PYSPARK_PYTHON" not in os.environ
                and not context.getConf().get("spark.pyspark.python")):
            context.pythonExec = sys.executable
    spark.dataSource.register(ExactlyDataSource)
