"""The Spark pipeline of `exactly demo`, exactly-once vs at-least-once, side by side in one run.

Both runs read the same backlog of order events from one embedded broker, with 5-second
triggers and the same maxOffsetsPerTrigger, each on a fresh checkpoint; each is a Spark driver
process of its own (python -m exactly.demo.pipeline, local[2]). The first micro-batch of a run
is warm-up (JVM, Python workers) and is not counted. Throughput is the events of the remaining
batches of the `orders` query over the wall time they took; the `stats` query runs beside it as
in the demo. Rounds alternate the two modes.

    .venv/bin/python bench/spark_pipeline.py [--events 60000] [--per-trigger 12000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import random
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
from exactly.testing import EmbeddedBroker


def feed(bootstrap: str, events: int) -> None:
    rng = random.Random(1)
    base = int(time.time() * 1000)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        for i in range(events):
            key, value, _ = make_event(i, rng, base, 1000.0)
            producer.send(IN_TOPIC, value, key)
        producer.flush()


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=60000)
    parser.add_argument("--per-trigger", type=int, default=12000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="exactly-bench-spark-"))
    with EmbeddedBroker(data_dir=work / "broker") as broker:
        bootstrap = broker.bootstrap
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
