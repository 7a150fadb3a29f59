"""bench/vs_kafka.py --quick end to end on tiny sizes, against Exactly and Apache Kafka 4.4: every
workload runs and has a figure for both brokers (the `os` pair only, to stay short). Timings are
not asserted (DESIGN.md): the benchmark reports them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import BENCH

BENCH = BENCH / "vs_kafka.py"
WORKLOADS = ("produce 100 B", "consume 100 B", "produce 1 KiB", "consume 1 KiB",
             "1-record transactions", "100 ms transactions", "kafka-producer-perf-test",
             "kafka-consumer-perf-test", "start to first answer", "serve again after kill -9",
             "first answer after kill -9")


@pytest.mark.timeout(600)
def test_quick_run_has_every_workload_for_both_brokers(tmp_path: Path) -> None:
    out = tmp_path / "vs_kafka.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--scale", "0.05", "--durability", "os",
         "--history", "100", "--producers", "1", "--consumers", "1", "--json", str(out)],
        check=False, capture_output=True, text=True, timeout=540, cwd=BENCH.parent)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-5000:]}"
    figures = json.loads(out.read_text())

    rows = figures["rows"]
    for name in WORKLOADS:
        found = [r for r in rows if r["workload"].startswith(name)]
        assert found, (name, [r["workload"] for r in rows])
        for r in found:
            for target in ("exactly", "kafka"):
                assert r[target]["value"] > 0, (name, target, r)
            assert r["ratio"] is not None and r["ratio"] > 0, r
    throughput = [r for r in rows if r["unit"] != "s"]
    for r in throughput:
        for target in ("exactly", "kafka"):
            f = r[target]
            assert f["cpu_s_per_gb"] is not None and f["cpu_s_per_gb"] >= 0, (r["workload"], f)
            assert f["rss_peak_mib"] > 0 and f["rss_end_mib"] > 0, (r["workload"], f)
            assert f["cores_busy"] is not None, (r["workload"], f)
    for target in ("exactly", "kafka"):
        assert figures["history"][target]["transactions"] == 100
        assert len(figures["fresh_starts"][target]) >= 1
    assert "start to first answer <= 0.2x Kafka's" in figures["targets"]
    assert "serve again after kill -9 <= Kafka's" in figures["targets"]
