"""Fairness between connections (issue 14, item 4): a canary producer's acks=all latency on an
idle broker and while eight connections flood it with pipelined Metadata, Fetch or Produce
requests (tests/helpers/server/flood.py: each flooder sends 256 requests per write, never waiting
for answers, and reads the answers on another thread).

For each flush policy (`fsync`, the default, and `os`) and each flood, a fresh broker process:
the canary's p50/p99/max idle, then under the flood, their ratio, and the MB of answers the
flooders got (they are served too). The flooders run on this machine, niced, and take CPU from
the broker and the canary: on a 2-core machine the figures include that.

    .venv/bin/python bench/fairness.py [--records N] [--policy fsync|os] [--flood KIND]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from exactly.testing import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.server.flood import canary_latencies, flood_frame, p99, under_flood

FLOODS = ("metadata", "fetch", "produce")


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("canary", 1, 1),
              NewTopic("flooded", 1, 1, config={"retention.bytes": str(8 << 20),
                                                "segment.bytes": str(1 << 20)})]
    for future in admin.create_topics(topics).values():
        future.result(30)


def fill(bootstrap: str) -> None:
    """3 MB for the Fetch flood to read over and over."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for _ in range(3000):
        producer.produce("flooded", os.urandom(1000))
    if producer.flush(60) != 0:
        raise RuntimeError("could not fill the fetched topic")


def ms(values: list[float]) -> str:
    return (f"{statistics.median(values) * 1e3:7.1f} {p99(values) * 1e3:7.1f} "
            f"{max(values) * 1e3:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500, help="canary records per run [500]")
    parser.add_argument("--policy", choices=("fsync", "os"), action="append",
                        help="log.flush.policy (repeatable) [fsync and os]")
    parser.add_argument("--flood", choices=FLOODS, action="append",
                        help="flood (repeatable) [all three]")
    args = parser.parse_args()
    print(f"{'policy':6} {'flood':9} | {'idle p50':>8} {'p99':>7} {'max':>7} | "
          f"{'flood p50':>9} {'p99':>7} {'max':>7} | {'p99 ratio':>9} | answers MB")
    for policy in args.policy or ("fsync", "os"):
        for flood in args.flood or FLOODS:
            with EmbeddedBroker(settings={"log.flush.policy": policy}) as broker:
                create_topics(broker.bootstrap)
                if flood == "fetch":
                    fill(broker.bootstrap)
                idle = canary_latencies(broker.bootstrap, "canary", args.records)
                # served=0: the flood lasts as long as the canary, as the figures say.
                loaded, answered = under_flood(broker, flood_frame(flood, "flooded"),
                                               count=args.records, served=0)
            print(f"{policy:6} {flood:9} | {ms(idle)} | {ms(loaded):>25} | "
                  f"{p99(loaded) / p99(idle):8.1f}x | {answered / 1e6:10.0f}", flush=True)


if __name__ == "__main__":
    main()
