"""Fairness between connections (issue 14, item 4): one client pipelining requests as fast as it
can must not starve the others. Eight connections flood the broker with pipelined Metadata, Fetch
or Produce requests, each sending the next requests without waiting for answers; a canary producer
(acks=all) is timed record by record, first on an idle broker, then under the flood. The broker
runs with `log.flush.policy=os` here: an fsync's time depends on everything else this machine's
disk is doing, and would hide what is measured, the turns between connections. bench/fairness.py
measures the same under fsync.

Before: under a Metadata flood the canary's client could not even get its ApiVersions answered
within librdkafka's 10 s (each connection's buffer of thousands of requests was handled in one go);
with turns between connections but the interpreter's 5 ms GIL switch interval, its p99 was about
250 ms (the fsync thread waited for the busy event loop at every hand-over).

The bound asserted is loose on purpose (ten times the idle p99, and at least 50 ms): the machine
also runs the flooding processes, and tests here never assert speed. It is far below both
failures above; the measured figures are printed and in the README.
"""

from __future__ import annotations

import os
import statistics

import pytest

from tests.server.flood import canary_latencies, flood_frame, p99, under_flood
from tests.support import create_topic, produce_confluent

pytestmark = pytest.mark.serial  # measures the broker: run alone (see tests/conftest.py)


@pytest.mark.parametrize("flood", ["metadata", "fetch", "produce"])
def test_a_flood_does_not_starve_a_producer(broker_factory, flood: str) -> None:
    broker = broker_factory(settings={"log.flush.policy": "os"})
    create_topic(broker.bootstrap, "canary")
    create_topic(broker.bootstrap, "flooded", config={"retention.bytes": str(8 << 20),
                                                      "segment.bytes": str(1 << 20)})
    if flood == "fetch":  # a few MiB to read over and over
        produce_confluent(broker.bootstrap, "flooded", [os.urandom(1000) for _ in range(3000)])
    frame = flood_frame(flood, "flooded")
    idle = canary_latencies(broker.bootstrap, "canary")
    loaded, answered = under_flood(broker, frame)
    print(f"\n{flood} flood: canary p50/p99 idle {statistics.median(idle) * 1e3:.1f}/"
          f"{p99(idle) * 1e3:.1f} ms, under the flood {statistics.median(loaded) * 1e3:.1f}/"
          f"{p99(loaded) * 1e3:.1f} ms; flooders got {answered / 1e6:.0f} MB of answers")
    assert answered > 1_000_000, "the flooders were not served"
    assert p99(loaded) <= max(10 * p99(idle), 0.050), (
        f"canary p99 {p99(loaded) * 1e3:.1f} ms under a {flood} flood, "
        f"{p99(idle) * 1e3:.1f} ms idle")
