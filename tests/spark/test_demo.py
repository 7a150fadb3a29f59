"""`exactly demo`: its options, its place beside the connector, and a short run with a driver kill
that the demo verifies itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXACTLY = Path(sys.executable).parent / "exactly"


def test_demo_help_lists_the_demos_options() -> None:
    proc = subprocess.run([str(EXACTLY), "demo", "--help"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    for option in ("--crashes", "--seconds", "--rate", "--trigger-seconds", "--delivery",
                   "--seed", "--cluster", "--master"):
        assert option in proc.stdout, proc.stdout


def test_the_connector_does_not_import_the_demo() -> None:
    code = ("import sys, exactly.spark; "
            "print(sorted(m for m in sys.modules if m.startswith('exactly.demo')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def run_demo(*args: str) -> str:
    proc = subprocess.run([str(EXACTLY), "demo", *args], capture_output=True, text=True,
                          timeout=900, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert "open transactions of the queries: 0" in out
    assert "verified: every event exactly once" in out
    table = [line.split() for line in out.splitlines()
             if line.startswith(("orders-enriched", "orders-dlq", "order-stats"))]
    assert len(table) == 3
    for name, expected, records, duplicates, missing, wrong in table:
        assert expected == records and int(records) > 0, name
        assert duplicates == missing == wrong == "0", name
    return out


def test_demo_survives_a_driver_kill_and_verifies() -> None:
    out = run_demo("--seconds", "15", "--rate", "100", "--crashes", "1", "--seed", "7")
    assert "driver kills: 1" in out


@pytest.mark.timeout(600)  # seven JVMs and three restarts: over 300 s while the suite runs beside
def test_demo_on_a_cluster_survives_driver_executor_and_worker_kills() -> None:
    """`exactly demo --cluster 2`: a standalone master and two workers on this machine; the
    kills take turns: the driver, an executor JVM, a whole worker."""
    out = run_demo("--cluster", "2", "--seconds", "20", "--rate", "100", "--crashes", "3",
                   "--seed", "7")
    assert "starting a Spark cluster: a master and 2 workers" in out
    assert "driver kills: 1   executor kills: 1   worker kills: 1" in out
