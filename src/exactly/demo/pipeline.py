"""The demo's Spark job: order events through Structured Streaming, exactly-once to topics.

Two streaming queries read the topic `orders` (JSON order events) with format("exactly"):

- `orders`: parse; records that are not valid orders go to the dead-letter topic `orders-dlq`
  as they came; valid ones are enriched (the customer's region from a lookup table, an amount
  band) and go to `orders-enriched` as JSON. One sink, rows routed by a `topic` column.
- `stats`: per region, the number and total amount of orders in 10-second event-time windows,
  with a 10-second watermark, appended to `order-stats` when a window closes.

Both sinks are exactly-once (deliveryGuarantee, default) or at-least-once. Run as a process:

    python -m exactly.demo.pipeline BOOTSTRAP CHECKPOINT_DIR [--delivery at-least-once]
                                    [--trigger-seconds 2] [--max-offsets N]
                                    [--master spark://HOST:PORT] [--conf KEY=VALUE ...] [--ship]

With --ship the `exactly` package is shipped to the executors with the job (exactly.spark.ship),
for executors whose Python does not have it installed.

It prints one JSON line per finished micro-batch and stops both queries, between batches,
when "stop" arrives on stdin. A query that ends because Spark's Python worker did not connect
back in time is started again on its checkpoint, up to MAX_RESTARTS times (see CONNECT_BACK).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

IN_TOPIC = "orders"
ENRICHED_TOPIC = "orders-enriched"
DLQ_TOPIC = "orders-dlq"
STATS_TOPIC = "order-stats"
OUTPUT_TOPICS = (ENRICHED_TOPIC, DLQ_TOPIC, STATS_TOPIC)
QUERIES = ("orders", "stats")
WINDOW_SECONDS = 10
REGIONS = {f"c{i:02d}": ("north", "south", "east", "west")[i % 4] for i in range(40)}

ORDER_SCHEMA = "order_id string, customer string, amount double, ts long"

# Spark starts a query's Python data source worker and waits a fixed 10 s for it to connect back
# (PythonWorkerFactory.createSimpleWorker, not configurable). On a loaded machine the start of a
# Python that imports pyspark, pyarrow and the connector can take longer; the query then ends
# with this error before it ran a batch. The driver starts it again on its checkpoint, as a
# supervisor would, a few times.
CONNECT_BACK = "Python worker failed to connect back"
MAX_RESTARTS = 3


def build(spark: Any, bootstrap: str, checkpoint_dir: str, delivery: str,
          trigger_seconds: float, max_offsets: int | None,
          resume: str | None = None) -> dict[str, Callable[[], Any]]:
    """The two queries, each as a function that starts it (again, on its checkpoint).
    `resume`: the sinks' transactionResume (None: the connector's default)."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("exactly").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", IN_TOPIC).option("startingOffsets", "earliest"))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    raw = reader.load().select("key", "value")
    parsed = raw.withColumn("order", F.from_json(F.col("value").cast("string"), ORDER_SCHEMA))
    valid = (F.col("order").isNotNull() & F.col("order.order_id").isNotNull()
             & F.col("order.customer").isNotNull() & (F.col("order.amount") >= 0)
             & F.col("order.ts").isNotNull())
    regions = spark.createDataFrame(list(REGIONS.items()), "customer string, region string")

    good = (parsed.where(valid).select("key", "order.*")
            .join(F.broadcast(regions), "customer", "left")
            .withColumn("region", F.coalesce("region", F.lit("unknown")))
            .withColumn("band", F.when(F.col("amount") < 20, "small")
                        .when(F.col("amount") < 100, "medium").otherwise("large")))
    enriched = good.select(
        F.lit(ENRICHED_TOPIC).alias("topic"), "key",
        F.to_json(F.struct("order_id", "customer", "region", "amount", "band", "ts")).alias("value"))
    dead = parsed.where(~valid | F.col("order").isNull()).select(
        F.lit(DLQ_TOPIC).alias("topic"), "key", "value")

    def sink(df: Any, name: str) -> Any:
        writer = (df.writeStream.format("exactly").queryName(name)
                  .option("kafka.bootstrap.servers", bootstrap)
                  .option("deliveryGuarantee", delivery)
                  .option("checkpointLocation", os.path.join(checkpoint_dir, name))
                  .trigger(processingTime=f"{trigger_seconds} seconds"))
        return writer.option("transactionResume", resume) if resume else writer

    stats = (good.withColumn("event_time", F.timestamp_millis("ts"))
             .withWatermark("event_time", f"{WINDOW_SECONDS} seconds")
             .groupBy(F.window("event_time", f"{WINDOW_SECONDS} seconds"), "region")
             .agg(F.count(F.lit(1)).alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
             .select(F.to_json(F.struct(
                 (F.unix_millis(F.col("window.start"))).alias("window_start"), "region",
                 "orders", "total")).alias("value"))
             .withColumn("topic", F.lit(STATS_TOPIC)))
    return {"orders": lambda: sink(enriched.unionByName(dead), "orders").start(),
            "stats": lambda: sink(stats, "stats").outputMode("append").start()}


class Queries:
    """The running queries by name. `watch` reports their batches and starts a query that ended
    with CONNECT_BACK again; it runs on the thread that registered the data source, where Spark
    finds it (the active session is per thread)."""

    def __init__(self, starters: dict[str, Callable[[], Any]]) -> None:
        self.starters = starters
        self.running = {name: start() for name, start in starters.items()}
        self.restarts = dict.fromkeys(starters, 0)
        self.seen: dict[str, int] = {}

    def watch(self, stop: threading.Event) -> None:
        """Until `stop` is set; a query failing otherwise ends the process."""
        while not stop.wait(0.2):
            for name, q in list(self.running.items()):
                p = q.lastProgress
                if p and self.seen.get(name) != p["batchId"]:
                    self.seen[name] = p["batchId"]
                    print(json.dumps({
                        "query": name, "batch": p["batchId"], "rows": p["numInputRows"],
                        "ms": p["durationMs"].get("triggerExecution", 0),
                        "end": p["sources"][0]["endOffset"] if p["sources"] else None}),
                        flush=True)
                if (error := q.exception()) is None:
                    continue
                if CONNECT_BACK in str(error) and self.restarts[name] < MAX_RESTARTS:
                    self.restarts[name] += 1
                    print(json.dumps({"query": name, "restarted": (
                        f"{CONNECT_BACK} (Spark waits a fixed 10 s for it); started again on "
                        f"its checkpoint, {self.restarts[name]} of at most {MAX_RESTARTS} "
                        f"times")}), flush=True)
                    self.running[name] = self.starters[name]()
                    continue
                print(json.dumps({"query": name, "error": str(error)[:2000]}), flush=True)
                os._exit(1)

    def stop(self) -> None:
        """Stop every query between batches, so that no batch is cut short."""
        for q in self.running.values():
            while q.status["isTriggerActive"]:
                time.sleep(0.05)
            q.stop()


def _wait_for_stop(stop: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m exactly.demo.pipeline")
    parser.add_argument("bootstrap")
    parser.add_argument("checkpoint_dir")
    parser.add_argument("--delivery", default="exactly-once",
                        choices=["exactly-once", "at-least-once"])
    parser.add_argument("--trigger-seconds", type=float, default=2.0)
    parser.add_argument("--max-offsets", type=int, default=None)
    parser.add_argument("--resume", default=None, choices=["keep-prepared", "producer-id"],
                        help="the sinks' transactionResume (default: the connector's)")
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting (repeatable)")
    parser.add_argument("--ship", action="store_true",
                        help="ship the exactly package to the executors with the job")
    args = parser.parse_args(argv)
    confs = dict(item.split("=", 1) for item in args.conf)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from exactly.spark import register, ship

    spark = (SparkSession.builder.master(args.master).appName("exactly-pipeline")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config(map=confs)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if args.ship:
        ship(spark)
    register(spark)
    queries = Queries(build(spark, args.bootstrap, args.checkpoint_dir, args.delivery,
                            args.trigger_seconds, args.max_offsets, args.resume))
    print(json.dumps({"started": list(queries.running)}), flush=True)
    stop = threading.Event()
    threading.Thread(target=_wait_for_stop, args=(stop,), daemon=True).start()
    queries.watch(stop)
    queries.stop()
    spark.stop()
    print(json.dumps({"stopped": True}), flush=True)


if __name__ == "__main__":
    main()
