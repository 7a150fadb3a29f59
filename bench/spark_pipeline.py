"""The Spark pipeline of `exactly demo`, exactly-once vs at-least-once, side by side in one run.

Both runs read the same backlog of order events from one embedded broker, with 5-second
triggers and the same maxOffsetsPerTrigger, each on a fresh checkpoint; each is a Spark driver
process of its own (python -m exactly.demo.pipeline, local[2]). The first micro-batch of a run
is warm-up (JVM, Python workers) and is not counted. Throughput is the events of the remaining
batches of the `orders` query over the wall time they took; the `stats` query runs beside it as
in the demo. Rounds alternate the two modes.

    .venv/bin/python bench/spark_pipeline.py [--events 60000] [--per-trigger 12000] [--rounds 2]

--part connector: the connector's own path (read -> write, no transform, bench/spark_copy.py),
exactly-once against at-least-once, on local[2] and on a standalone cluster of 2 workers of one
core (exactly.demo.spark_cluster.SparkCluster), and Spark's `rate` source into the `noop` sink on
the same cluster as the engine's ceiling on this machine. --part twopc: what the two-phase commit
adds to a micro-batch with 4, 16 and 64 output partitions (tasks): the tasks' initialize + prepare,
the driver's decision record and completion, as the sink logs them, and the micro-batch's addBatch
time against at-least-once.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from exactly.client import Admin, NewTopic, Producer
from exactly.demo.app import input_end, make_event
from exactly.demo.pipeline import IN_TOPIC, OUTPUT_TOPICS
from exactly.demo.spark_cluster import SparkCluster
from exactly.testing import EmbeddedBroker

COPY = Path(__file__).resolve().parent / "spark_copy.py"
COMMIT_LINE = re.compile(r"event=spark_batch_committed ([^\n]*)")


def feed(bootstrap: str, events: int) -> None:
    feed_topic(bootstrap, IN_TOPIC, events)


def run(bootstrap: str, checkpoint: Path, delivery: str, per_trigger: int,
        target: dict[str, Any]) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "exactly.demo.pipeline", bootstrap, str(checkpoint),
         "--delivery", delivery, "--trigger-seconds", "5", "--max-offsets", str(per_trigger),
         "--master", "local[2]"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    warm_at: float | None = None
    warm_offsets = 0
    done: dict[str, bool] = {}
    batches = 0
    ends: dict[str, float] = {}
    timer = threading.Timer(900, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            msg = json.loads(line) if line.startswith("{") else {}
            if "error" in msg:
                raise RuntimeError(msg["error"])
            if "batch" not in msg or msg["end"] is None:
                continue
            end = json.loads(msg["end"]) if isinstance(msg["end"], str) else msg["end"]
            reached = sum(end[IN_TOPIC].values())
            if msg["query"] == "orders":
                if warm_at is None:
                    warm_at, warm_offsets = time.monotonic(), reached
                else:
                    batches += 1
            ends[msg["query"]] = time.monotonic()
            done[msg["query"]] = end == target
            if done.get("orders") and done.get("stats"):
                break
        finished = ends["orders"]
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        proc.wait(timeout=120)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    total = sum(target[IN_TOPIC].values())
    assert warm_at is not None
    seconds = finished - warm_at
    return {"events": total - warm_offsets, "seconds": seconds, "batches": batches,
            "rate": (total - warm_offsets) / seconds if seconds > 0 else float("nan")}


def copy_run(args: list[str], timeout: float = 900) -> list[dict[str, Any]]:
    """Run bench/spark_copy.py; its JSON lines."""
    proc = subprocess.run([sys.executable, str(COPY), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for match in COMMIT_LINE.finditer(proc.stderr):  # the sink's log (--log-commits)
        lines.append({"commit": dict(item.split("=", 1) for item in match[1].split())})
    errors = [line["error"] for line in lines if "error" in line]
    if proc.returncode != 0 or errors:
        raise RuntimeError(f"spark_copy failed ({proc.returncode}): {errors or proc.stderr[-3000:]}")
    return lines


def steady_rate(lines: list[dict[str, Any]]) -> float:
    """Rows per second of the micro-batches after the first (warm-up), by their trigger time."""
    batches = [line for line in lines if "batch" in line and line["rows"]][1:]
    rows = sum(b["rows"] for b in batches)
    ms = sum(b["durations"].get("triggerExecution", 0) for b in batches)
    return rows * 1000 / ms if ms else float("nan")


def feed_copy_input(bootstrap: str, topic: str, events: int, partitions: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions)])
    feed_topic(bootstrap, topic, events)


def feed_topic(bootstrap: str, topic: str, events: int) -> None:
    rng = random.Random(1)
    base = int(time.time() * 1000)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        for i in range(events):
            key, value, _ = make_event(i, rng, base, 1000.0)
            producer.send(topic, value, key)
        producer.flush()


def connector_part(args: argparse.Namespace, work: Path, bootstrap: str) -> None:
    feed_copy_input(bootstrap, "copy-in", args.events, 4)
    per_trigger, batches = args.per_trigger, args.events // args.per_trigger
    print(f"connector: {args.events} events in 'copy-in' (4 partitions), read -> write with no "
          f"transform, maxOffsetsPerTrigger {per_trigger}, {batches} batches a run (the first "
          f"not counted), {args.rounds} rounds", flush=True)
    with SparkCluster(workers=2, work_dir=work / "spark") as cluster:
        cluster_args = ["--master", cluster.master_url,
                        *(a for k, v in cluster.driver_config().items() for a in ("--conf", f"{k}={v}"))]
        places = {"local[2]": ["--master", "local[2]"], "cluster 2x1": cluster_args}
        rates: dict[tuple[str, str], list[float]] = {}
        n = 0
        for r in range(args.rounds):
            for place, place_args in places.items():
                for delivery in ("at-least-once", "exactly-once"):
                    n += 1
                    lines = copy_run(["copy", bootstrap, "copy-in", f"copy-out-{n}",
                                      str(work / f"ckpt-copy-{n}"), "--delivery", delivery,
                                      "--max-offsets", str(per_trigger), "--batches",
                                      str(batches), *place_args])
                    rate = steady_rate(lines)
                    rates.setdefault((place, delivery), []).append(rate)
                    print(f"round {r + 1} {place:>11} {delivery:>13}: {rate:8.0f} events/s",
                          flush=True)
        ceiling = steady_rate(copy_run(["rate", "-", "-", "-", str(work / "ckpt-rate"),
                                        "--batches", "8", *cluster_args]))
    print()
    for place in places:
        alo = sum(rates[place, "at-least-once"]) / args.rounds
        eo = sum(rates[place, "exactly-once"]) / args.rounds
        print(f"{place}: at-least-once {alo:.0f} events/s, exactly-once {eo:.0f} events/s, "
              f"ratio {eo / alo:.2f} (target >= 0.9)")
    print(f"cluster 2x1: Spark's rate source -> noop sink {ceiling:.0f} rows/s (the engine's "
          f"ceiling here)")


def twopc_part(args: argparse.Namespace, work: Path, bootstrap: str) -> None:
    feed_copy_input(bootstrap, "twopc-in", 40000, 4)
    print("twopc: 40,000 events, maxOffsetsPerTrigger 5,000, repartitioned to N output "
          "partitions, local[2]; means over the batches after the first", flush=True)
    n = 0
    for partitions in (4, 16, 64):
        add_batch: dict[str, float] = {}
        phases: dict[str, float] = {}
        for delivery in ("at-least-once", "exactly-once"):
            n += 1
            lines = copy_run(["copy", bootstrap, "twopc-in", f"twopc-out-{n}",
                              str(work / f"ckpt-twopc-{n}"), "--delivery", delivery,
                              "--max-offsets", "5000", "--batches", "8", "--partitions",
                              str(partitions), "--log-commits"])
            batches = [line for line in lines if "batch" in line and line["rows"]][1:]
            add_batch[delivery] = sum(b["durations"].get("addBatch", 0)
                                      for b in batches) / len(batches)
            commits = [line["commit"] for line in lines if "commit" in line][1:]
            for key in ("prepare_ms", "decision_ms", "complete_ms"):
                if commits:
                    phases[key] = sum(float(c[key]) for c in commits) / len(commits)
        print(f"{partitions:3d} partitions: addBatch at-least-once {add_batch['at-least-once']:.0f}"
              f" ms, exactly-once {add_batch['exactly-once']:.0f} ms (+"
              f"{add_batch['exactly-once'] - add_batch['at-least-once']:.0f} ms); tasks' "
              f"initialize+prepare {phases.get('prepare_ms', float('nan')):.0f} ms summed, "
              f"decision {phases.get('decision_ms', float('nan')):.0f} ms, completion "
              f"{phases.get('complete_ms', float('nan')):.0f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=60000)
    parser.add_argument("--per-trigger", type=int, default=12000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--part", choices=["demo", "connector", "twopc"], default="demo")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="exactly-bench-spark-"))
    with EmbeddedBroker(data_dir=work / "broker") as broker:
        bootstrap = broker.bootstrap
        if args.part == "connector":
            return connector_part(args, work, bootstrap)
        if args.part == "twopc":
            return twopc_part(args, work, bootstrap)
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic(IN_TOPIC, 4)] + [NewTopic(t, 2) for t in OUTPUT_TOPICS])
        feed(bootstrap, args.events)
        target = input_end(bootstrap)
        print(f"{args.events} order events in {IN_TOPIC!r}; 5 s triggers, maxOffsetsPerTrigger "
              f"{args.per_trigger}; {args.rounds} rounds", flush=True)
        results: dict[str, list[dict[str, float]]] = {"at-least-once": [], "exactly-once": []}
        for r in range(args.rounds):
            for delivery in ("at-least-once", "exactly-once"):
                result = run(bootstrap, work / f"ckpt-{delivery}-{r}", delivery,
                             args.per_trigger, target)
                results[delivery].append(result)
                print(f"round {r + 1} {delivery:>13}: {result['rate']:8.0f} events/s "
                      f"({result['events']:.0f} events, {result['batches']:.0f} batches, "
                      f"{result['seconds']:.1f} s)", flush=True)
    rate = {d: sum(x["events"] for x in rs) / sum(x["seconds"] for x in rs)
            for d, rs in results.items()}
    loss = 1 - rate["exactly-once"] / rate["at-least-once"]
    print(f"\nat-least-once {rate['at-least-once']:.0f} events/s, exactly-once "
          f"{rate['exactly-once']:.0f} events/s: ratio {rate['exactly-once'] / rate['at-least-once']:.2f}, "
          f"exactly-once throughput loss {loss:.1%} (target <= 10%)")


if __name__ == "__main__":
    main()
