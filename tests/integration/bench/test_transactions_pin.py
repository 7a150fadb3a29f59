"""bench/transactions.py --pin puts every thread of a broker process on the broker's CPU, the
threads it had before the call and those it starts after (they inherit the affinity)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import BENCH

sys.path.insert(0, str(BENCH))
import transactions  # bench/ is not a package: found through the path above

# Starts one thread, says so, waits for a line, starts another, says so, then waits to be killed.
CHILD = """\
import sys, threading, time
def idle(): time.sleep(60)
threading.Thread(target=idle, daemon=True).start()
print("one", flush=True)
sys.stdin.readline()
threading.Thread(target=idle, daemon=True).start()
print("two", flush=True)
time.sleep(60)
"""


def _allowed(pid: int) -> dict[int, str]:
    allowed = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                allowed[int(task)] = line.split(":", 1)[1].strip()
    return allowed


def test_pin_moves_every_thread_and_the_threads_started_after() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "one"
        before = _allowed(child.pid)
        assert len(before) == 2 and set(before.values()) != {str(transactions.BROKER_CPU)}
        transactions._pin(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "two"
        after = _allowed(child.pid)
        assert len(after) == 3
        assert set(after.values()) == {str(transactions.BROKER_CPU)}
    finally:
        child.kill()
        child.wait()
