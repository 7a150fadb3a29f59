"""bench/soak.py --quick end to end: a broker process under the soak's mixed load for a minute
(connections.max.idle.ms cut to 15 s, so that the broker closes the 500 idle connections, and they
reconnect, a few times over), then kill -9 and a timed restart.

Asserted, none of it a speed of the machine (DESIGN.md):
- the run: every sample was taken with every figure in it, the load did its work (the compacted
  topic cleaned, idle connections closed by the broker and opened again), no client saw an error
  before the kill;
- no descriptor leak: the broker never held more descriptors than the idle connections plus half
  the connections it closed during the run (a descriptor leaked per closed connection would
  exceed it: what the broker holds besides its clients' sockets, its files and the load's other
  clients, is a hundred or two), and the most it held over the last three samples is no more than
  over the first three plus a quarter of those closes. The fitted slope is not the criterion over
  a minute: the idle connections are closed together, and a sample taken while they reconnect is
  up to 500 lower, which moves a fit of six points; the highest samples do not dip;
- no disk leak: the disk's slope after the warm-up is less than half the rate at which the load's
  records were written (retention of 10 s on 2 s segments keeps it about flat; without deletion
  it would follow that rate);
- the group's lag was read at every sample and never exceeded what its topics were written (its
  committed offsets are within the logs); that the lag grows is by design (the group consumes
  three quarters of what is written), and a minute is too short for retention to overtake it;
- the figures soak.py derives are consistent with what it measured: each slope is the least
  squares fit of the samples after the warm-up, each start's "ready" is the last of its steps (each
  after "listening"), and the restart's `target_met` is its "ready" against the fresh start's plus
  soak.TARGET_S, as printed.
The restart's and the fresh start's times themselves are printed, not asserted: they are timings.
The broker's RSS slope is printed only: a minute of a Python process's memory says nothing about
a leak.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import BENCH

sys.path.insert(0, str(BENCH))
import soak  # bench/ is not a package: found through the path above

SAMPLES = 6  # --quick: 1 minute, a sample every 10 s
STEPS = ("listening_s", "metadata_s", "produce_s", "commit_s")


def fitted_slope(samples: list[dict[str, Any]], name: str, warmup_s: float) -> tuple[float, float]:
    """(per hour, hours spanned) of the least-squares fit of `name` over the samples after the
    warm-up, as soak.slope_of fits it."""
    points = [(s["t_s"] / 3600, float(s[name])) for s in samples if s["t_s"] >= warmup_s]
    hours = [t for t, _ in points]
    return (statistics.linear_regression(hours, [v for _, v in points]).slope,
            hours[-1] - hours[0])


@pytest.mark.timeout(900)
def test_quick_soak_takes_every_sample_and_times_the_restart(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, str(BENCH / "soak.py"), "--quick", "--json", str(out),
         "--work-dir", str(tmp_path), "--set", "connections.max.idle.ms=15000"],
        check=False, capture_output=True, text=True, timeout=840)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-5000:]}"
    figures = json.loads(out.read_text())
    samples, totals = figures["samples"], figures["totals"]
    warmup_s = figures["params"]["warmup_minutes"] * 60

    # The run.
    assert figures["errors"] == []
    assert len(samples) == SAMPLES
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
    for s in samples:
        assert s["rss_mib"] > 0 and s["fds"] > 0 and s["disk_mib"] > 0, s
        assert s["produce"]["count"] > 0 and s["fetch"]["count"] > 0, s
        assert s["lag"] is not None and s["idle_open"] > 0, s
        assert s["txns_per_s"] > 0 and s["records_per_s"] > 0 and s["consumed_per_s"] > 0, s
    for name in ("txn_committed", "txn_aborted", "idem_acked", "compact_acked", "consumed"):
        assert totals[name] > 0, name
    closed = figures["idle_reconnects"]
    assert closed >= figures["params"]["idle_connections"]  # each closed and reopened once at least
    assert figures["cleaner"]["exactly_log_cleaner_runs_total"] > 0

    # The slopes soak.py reports are the fits of its samples.
    for name in ("rss_mib", "fds", "disk_mib"):
        reported = figures["slopes"][name]
        assert math.isclose(reported["per_hour"], fitted_slope(samples, name, warmup_s)[0],
                            rel_tol=1e-9, abs_tol=1e-9), name
        after = [s[name] for s in samples if s["t_s"] >= warmup_s]
        assert (reported["low"], reported["high"]) == (min(after), max(after)), name

    # No descriptor leak.
    fds = [s["fds"] for s in samples]
    assert max(fds) < figures["params"]["idle_connections"] + closed / 2, (fds, closed)
    assert max(fds[3:]) <= max(fds[:3]) + closed / 4, (fds, closed)

    # No disk leak.
    written_mib = (totals["idem_acked"] * len(soak.VALUE)
                   + totals["compact_acked"] * len(soak.COMPACT_VALUE)
                   + (totals["txn_committed"] + totals["txn_aborted"]) * soak.RECORDS_PER_TXN
                   * len(soak.VALUE)) / 2**20
    written_per_hour = written_mib / (samples[-1]["t_s"] / 3600)
    disk_per_hour, _ = fitted_slope(samples, "disk_mib", warmup_s)
    assert disk_per_hour < written_per_hour / 2, (disk_per_hour, written_per_hour)

    # The lag within what the group's topics were written: records (one warm-up record of the
    # idempotent producer), up to a marker per partition per transaction, and what may have been
    # appended and not yet counted (a second of records, a transaction per process).
    transactions = totals["txn_committed"] + totals["txn_aborted"] + soak.TXN_PROCESSES
    offsets = (totals["idem_acked"] + 1 + soak.IDEM_RATE
               + transactions * (soak.RECORDS_PER_TXN + soak.PARTITIONS))
    assert max(s["lag"] for s in samples) <= offsets, ([s["lag"] for s in samples], offsets)

    # The starts: consistent figures, the target's verdict from them; timings reported only.
    fresh, restart = figures["fresh"], figures["restart"]
    for start in (fresh, restart, *figures["fresh_runs"]):
        assert all(start[step] > 0 for step in STEPS), start
        assert all(start[step] >= start["listening_s"] for step in STEPS[1:]), start
        assert start["ready_s"] == max(start["metadata_s"], start["produce_s"], start["commit_s"])
    assert math.isclose(restart["ready_minus_fresh_s"], restart["ready_s"] - fresh["ready_s"],
                        abs_tol=1e-9)
    assert restart["target_met"] == (restart["ready_minus_fresh_s"] <= soak.TARGET_S)
    verdict = next(line.split()[-2] for line in run.stdout.splitlines()
                   if line.startswith("after kill -9"))
    assert verdict == ("met" if restart["target_met"] else "missed"), verdict
    assert "fresh, median of 1" in run.stdout

    print(f"\nrestart ready in {restart['ready_s']:.2f} s, fresh {fresh['ready_s']:.2f} s: "
          f"{restart['ready_minus_fresh_s']:+.2f} s, target (+{soak.TARGET_S:g} s) "
          f"{'met' if restart['target_met'] else 'missed'}; fds {fds} with {closed} "
          f"connections closed (after the warm-up {figures['slopes']['fds']['per_hour']:+.0f}/h), "
          f"disk {disk_per_hour:+.0f} MiB/h against {written_per_hour:.0f} MiB/h written, RSS "
          f"{figures['slopes']['rss_mib']['per_hour']:+.0f} MiB/h; lag "
          f"{[s['lag'] for s in samples]}")
