"""A Spark driver running one streaming query from topic to topic through format("exactly").

Run as a separate process (in a session of its own) by the tests, which crash it with fault points
(EXACTLY_FAILPOINTS) or SIGKILL and run it again on the same checkpoint. Micro-batch after micro-batch,
it processes everything in the input topic as it was at start, in micro-batches of at most
MAX_OFFSETS offsets, then stops the query and exits 0.

    python spark_stream_worker.py BOOTSTRAP IN_TOPIC OUT_TOPIC CHECKPOINT QUERY_NAME DELIVERY
                                  MAX_OFFSETS [--master URL] [--conf KEY=VALUE ...]
                                  [--executor-python PATH] [--ship]

By default the driver runs local[2,4]. On a cluster (tests/system/spark/test_cluster.py): --master
spark://HOST:PORT with the cluster's driver settings as --conf (a failed task is tried 4 times
there too, unless a --conf spark.task.maxFailures says otherwise), --executor-python for the
Python of the tasks, and --ship to send the exactly package with the job (exactly.spark.ship) for
executors whose Python lacks it. With --ship the driver first runs a probe job and prints
`probe [[python, importable], ...]`: which Python each task ran under and whether it could import
exactly before the package was shipped. The driver prints `app APPLICATION_ID` once it is up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exactly.spark import register
from exactly.spark.offsets import partitions_of, resolve_offsets
from exactly.spark.options import LATEST, parse_read_options
from exactly.spark.ship import ship


def transform(df):  # type: ignore[no-untyped-def]
    """value -> b"out:" + value, key kept: the tests compute the expected output the same way."""
    return df.select("key", F.concat(F.lit(b"out:"), F.col("value")).alias("value"))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("bootstrap", "in_topic", "out_topic", "checkpoint", "name", "delivery"):
        parser.add_argument(name)
    parser.add_argument("max_offsets", type=int)
    # local[2, 4]: two threads, and a failed task is tried up to 4 times, as on a cluster.
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting (repeatable)")
    parser.add_argument("--executor-python", help="absolute path of the executors' Python")
    parser.add_argument("--ship", action="store_true",
                        help="ship the exactly package to the executors with the job")
    return parser.parse_args()


# Spark starts the query's Python data source worker and waits a fixed 10 s for it to connect
# back (PythonWorkerFactory, SPARK-45245; not configurable). On a loaded machine the start of a
# Python that imports pyspark can take longer, and the query then ends with this error before it
# runs. The driver starts the query again on its checkpoint, as a supervisor would, a few times.
CONNECT_BACK = "Python worker failed to connect back"
MAX_RESTARTS = 3


def start_query(spark, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    source = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.in_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", args.max_offsets).load())
    return (transform(source).writeStream.format("exactly").queryName(args.name)
            .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.out_topic)
            .option("deliveryGuarantee", args.delivery)
            .option("checkpointLocation", args.checkpoint)
            .start())


def _probe(_: object) -> tuple[str, bool]:
    """On an executor: its Python, and whether it can import exactly (nothing shipped yet)."""
    import importlib.util
    return sys.executable, importlib.util.find_spec("exactly") is not None


def main() -> None:
    args = parse_args()
    # The Python of the tasks is the one PySpark finds in PYSPARK_PYTHON when the driver starts
    # (pyspark.SparkContext.pythonExec): spark.pyspark.python alone does not reach them.
    if args.executor_python:
        os.environ["PYSPARK_PYTHON"] = args.executor_python
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(args.master).appName(f"exactly-{args.name}")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.stopTimeout", "30s"))
    if not args.master.startswith("local"):
        builder = builder.config("spark.task.maxFailures", "4")
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--conf {item!r}: expected KEY=VALUE")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"app {spark.sparkContext.applicationId}", flush=True)
    if args.ship:
        probed = spark.sparkContext.parallelize(range(2), 2).map(_probe).collect()
        print(f"probe {json.dumps(probed)}", flush=True)
        ship(spark)
    register(spark)
    query = start_query(spark, args)
    print("started", flush=True)
    options = parse_read_options({"bootstrap.servers": args.bootstrap,
                                  "subscribe": args.in_topic})
    target = resolve_offsets(options.client, partitions_of(options), "latest", LATEST)
    wanted = {t: {str(p): o for (tt, p), o in target.items() if tt == t} for t, _ in target}
    restarts = 0
    while True:  # until a batch has reached the input's end as it was at start
        if (error := query.exception()) is not None:
            if CONNECT_BACK not in str(error) or restarts == MAX_RESTARTS:
                raise error  # type: ignore[misc]
            restarts += 1
            print(f"restarting the query on its checkpoint: {CONNECT_BACK} "
                  f"(Spark waits 10 s for it, SPARK-45245)", flush=True)
            query = start_query(spark, args)
            continue
        progress = query.lastProgress
        if progress and progress["sources"] and _json(progress["sources"][0]["endOffset"]) == wanted:
            break
        time.sleep(0.2)
    query.stop()
    print(f"done batch={progress['batchId']}", flush=True)
    spark.stop()


def _json(value):  # type: ignore[no-untyped-def]
    return json.loads(value) if isinstance(value, str) else value


if __name__ == "__main__":
    main()
