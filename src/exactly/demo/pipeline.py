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
when "stop" arrives on stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
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


def build(spark: Any, bootstrap: str, checkpoint_dir: str, delivery: str,
          trigger_seconds: float, max_offsets: int | None) -> list[Any]:
    """Start the two queries; return them."""
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
        return (df.writeStream.format("exactly").queryName(name)
                .option("kafka.bootstrap.servers", bootstrap)
                .option("deliveryGuarantee", delivery)
                .option("checkpointLocation", os.path.join(checkpoint_dir, name))
                .trigger(processingTime=f"{trigger_seconds} seconds"))

    orders = sink(enriched.unionByName(dead), "orders").start()
    stats = (good.withColumn("event_time", F.timestamp_millis("ts"))
             .withWatermark("event_time", f"{WINDOW_SECONDS} seconds")
             .groupBy(F.window("event_time", f"{WINDOW_SECONDS} seconds"), "region")
             .agg(F.count(F.lit(1)).alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
             .select(F.to_json(F.struct(
                 (F.unix_millis(F.col("window.start"))).alias("window_start"), "region",
                 "orders", "total")).alias("value"))
             .withColumn("topic", F.lit(STATS_TOPIC)))
    return [orders, sink(stats, "stats").outputMode("append").start()]


def _report(queries: list[Any], stop: threading.Event) -> None:
    seen: dict[str, int] = {}
    while not stop.is_set():
        for q in queries:
            p = q.lastProgress
            if p and seen.get(q.name) != p["batchId"]:
                seen[q.name] = p["batchId"]
                print(json.dumps({"query": q.name, "batch": p["batchId"],
                                  "rows": p["numInputRows"],
                                  "ms": p["durationMs"].get("triggerExecution", 0),
                                  "end": p["sources"][0]["endOffset"] if p["sources"] else None}),
                      flush=True)
            if q.exception() is not None:
                print(json.dumps({"query": q.name, "error": str(q.exception())[:2000]}),
                      flush=True)
                os._exit(1)
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m exactly.demo.pipeline")
    parser.add_argument("bootstrap")
    parser.add_argument("checkpoint_dir")
    parser.add_argument("--delivery", default="exactly-once",
                        choices=["exactly-once", "at-least-once"])
    parser.add_argument("--trigger-seconds", type=float, default=2.0)
    parser.add_argument("--max-offsets", type=int, default=None)
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
    queries = build(spark, args.bootstrap, args.checkpoint_dir, args.delivery,
                    args.trigger_seconds, args.max_offsets)
    print(json.dumps({"started": [q.name for q in queries]}), flush=True)
    stop = threading.Event()
    threading.Thread(target=_report, args=(queries, stop), daemon=True).start()
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    for q in queries:  # between batches, so that no batch is cut short
        while q.status["isTriggerActive"]:
            time.sleep(0.05)
        q.stop()
    stop.set()
    spark.stop()
    print(json.dumps({"stopped": True}), flush=True)


if __name__ == "__main__":
    main()
