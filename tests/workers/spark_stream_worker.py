"""A Spark driver running one streaming query from topic to topic through format("exactly").

Run as a separate process (in a session of its own) by the tests, which crash it with fault points
(EXACTLY_FAILPOINTS) or SIGKILL and run it again on the same checkpoint. Micro-batch after micro-batch,
it processes everything in the input topic as it was at start, in micro-batches of at most
MAX_OFFSETS offsets, then stops the query and exits 0.

    python spark_stream_worker.py BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT QUERY_NAME DELIVERY
                                  MAX_OFFSETS
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exactly.spark import register
from exactly.spark.offsets import partitions_of, resolve_offsets
from exactly.spark.options import LATEST, parse_read_options


def transform(df):  # type: ignore[no-untyped-def]
    """value -> b"out:" + value, key kept: the tests compute the expected output the same way."""
    return df.select("key", F.concat(F.lit(b"out:"), F.col("value")).alias("value"))


def main() -> None:
    bootstrap, in_topic, out_topic, checkpoint, name, delivery, max_offsets = sys.argv[1:8]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # local[2, 4]: two threads, and a failed task is tried up to 4 times, as on a cluster.
    spark = (SparkSession.builder.master("local[2,4]").appName(f"exactly-{name}")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    source = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", in_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_offsets).load())
    query = (transform(source).writeStream.format("exactly").queryName(name)
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
             .option("deliveryGuarantee", delivery)
             .option("checkpointLocation", checkpoint)
             .start())
    print("started", flush=True)
    options = parse_read_options({"bootstrap.servers": bootstrap, "subscribe": in_topic})
    target = resolve_offsets(options.client, partitions_of(options), "latest", LATEST)
    wanted = {t: {str(p): o for (tt, p), o in target.items() if tt == t} for t, _ in target}
    while True:  # until a batch has reached the input's end as it was at start
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]
        progress = query.lastProgress
        if progress and progress["sources"] and _json(progress["sources"][0]["endOffset"]) == wanted:
            break
        time.sleep(0.2)
    query.stop()
    print(f"done batch={progress['batchId']}", flush=True)
    spark.stop()


def _json(value):  # type: ignore[no-untyped-def]
    import json
    return json.loads(value) if isinstance(value, str) else value


if __name__ == "__main__":
    main()
