"""A Spark driver for bench/spark_pipeline.py: one streaming query that copies a topic to another
through format("exactly") with no transform (the connector's own path), or Spark's `rate` source
into the `noop` sink (the engine's ceiling). It prints one JSON line per micro-batch with Spark's
progress (rows, durations) and stops after --batches batches.

    python bench/spark_copy.py copy BOOTSTRAP IN OUT CHECKPOINT --delivery exactly-once
        [--master URL] [--conf K=V ...] [--partitions N] [--max-offsets N] [--batches N]
    python bench/spark_copy.py rate - - - CHECKPOINT [--rows-per-second N] [--batches N] ...

The exactly-once sink logs each commit's phases (event=spark_batch_committed ... prepare_ms,
decision_ms, complete_ms) in the Python worker that runs the driver's commit; --log-commits turns
the connector's logging on there (EXACTLY_SPARK_LOG_LEVEL=INFO), and the lines reach stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["copy", "rate"])
    parser.add_argument("bootstrap")
    parser.add_argument("in_topic")
    parser.add_argument("out_topic")
    parser.add_argument("checkpoint")
    parser.add_argument("--delivery", default="exactly-once")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--partitions", type=int, default=0,
                        help="repartition to N output partitions (tasks) before writing")
    parser.add_argument("--max-offsets", type=int, default=20000)
    parser.add_argument("--rows-per-second", type=int, default=200000)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--log-commits", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.log_commits:  # Spark's Python workers inherit it from the driver's JVM
        os.environ["EXACTLY_SPARK_LOG_LEVEL"] = "INFO"

    from pyspark.sql import SparkSession

    from exactly.spark import register

    spark = (SparkSession.builder.master(args.master).appName(f"exactly-bench-{args.mode}")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(args.partitions or 2))
             .config(map=dict(item.split("=", 1) for item in args.conf)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    if args.mode == "rate":
        df = (spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second)
              .load())
        writer = df.writeStream.format("noop")
    else:
        df = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.in_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", args.max_offsets).load().select("key", "value"))
        if args.partitions:
            df = df.repartition(args.partitions)
        writer = (df.writeStream.format("exactly").queryName(f"copy-{os.getpid()}")
                  .option("kafka.bootstrap.servers", args.bootstrap)
                  .option("topic", args.out_topic).option("deliveryGuarantee", args.delivery))
    query = writer.option("checkpointLocation", args.checkpoint).start()
    seen = -1
    while seen < args.batches - 1:
        if query.exception() is not None:
            print(json.dumps({"error": str(query.exception())[:2000]}), flush=True)
            sys.exit(1)
        progress: dict[str, Any] | None = query.lastProgress
        if progress and progress["batchId"] != seen:
            seen = progress["batchId"]
            print(json.dumps({"batch": seen, "rows": progress["numInputRows"],
                              "durations": progress["durationMs"]}), flush=True)
        time.sleep(0.05)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
