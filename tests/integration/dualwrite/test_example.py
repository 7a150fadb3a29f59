"""The example application runs with one command against SQLite (starting a broker of its own)
and finds the database and the log in agreement."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.dualwrite.conftest import REPO


def test_the_order_service_example_runs_with_one_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "examples.order_service", "--orders", "4"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("placed order") == 4
    assert "orders in the database: 4; order-placed events in the log (read_committed): 4" \
        in proc.stdout
    assert "every order has exactly one event, and every event its order" in proc.stdout
