"""`exactly demo`, short: the Spark pipeline with a driver kill, verified by the demo itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_demo_survives_a_driver_kill_and_verifies() -> None:
    exe = Path(sys.executable).parent / "exactly"
    proc = subprocess.run([str(exe), "demo", "--seconds", "15", "--rate", "100", "--crashes", "1",
                           "--seed", "7"], capture_output=True, text=True, timeout=600,
                          check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert "driver kills: 1" in out
    assert "open transactions of the queries: 0" in out
    assert "verified: every event exactly once" in out
    table = [line.split() for line in out.splitlines()
             if line.startswith(("orders-enriched", "orders-dlq", "order-stats"))]
    assert len(table) == 3
    for name, expected, records, duplicates, missing, wrong in table:
        assert expected == records and int(records) > 0, name
        assert duplicates == missing == wrong == "0", name
