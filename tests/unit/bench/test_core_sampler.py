"""bench/measure.py CoreSampler (bench/run.py's "cores busy" line): the machine's busy cores over
a window, read from /proc/stat."""

from __future__ import annotations

import os
import sys
import time

from tests.paths import BENCH

sys.path.insert(0, str(BENCH))
import measure  # bench/ is not a package: found through the path above


def test_a_core_kept_busy_shows_in_the_window():
    sampler = measure.CoreSampler()
    sampler.start()
    try:
        time.sleep(1.0)  # a window before the spin, which the figure below must leave out
        started = time.monotonic()
        while time.monotonic() - started < 0.6:  # this process keeps one core busy
            pass
        busy, iowait = sampler.cores(started, time.monotonic())
    finally:
        sampler.stop()
    # At least the spinning core (the machine's other cores may be busy too, never more
    # than there are).
    assert 0.8 <= busy <= os.cpu_count() + 0.1
    assert 0.0 <= iowait <= os.cpu_count() + 0.1


def test_machine_cpu_counts_up():
    busy, iowait = measure.machine_cpu()
    started = time.process_time()
    while time.process_time() - started < 0.2:
        pass
    later_busy, later_iowait = measure.machine_cpu()
    assert later_busy >= busy + 0.1 and later_iowait >= iowait
