"""The driver's side of an exactly-once stream makes its clients once, not per micro-batch: each
Python worker that runs it (the one that makes the writer for the tasks, the one that runs
commit()) holds them in the query's QueryCoordinator (exactly.spark.coordinator). Read from the
workers' log, which reaches the driver's output with EXACTLY_SPARK_LOG_LEVEL set:
`event=spark_batch_committed ... bootstraps=N` (the clients a batch's driver work made in the
commit's worker) and, at DEBUG, `event=spark_writer_created pid=P bootstraps=N` (those each
writer's construction made). Resumed sessions, one per participant, are not counted.

The driver is tests/workers/spark_stream_worker.py, a process of its own (local[2,4]).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exactly import failpoints
from exactly.testing import EmbeddedBroker
from tests.paths import REPO
from tests.system.spark.test_stream_faults import WORKER, Pipeline, still_open

MAX_OFFSETS = 200  # 1200 records in 2 partitions: seven micro-batches (0..6)
STEADY = 2  # the most a micro-batch after the first may make
COMMITTED = re.compile(r"event=spark_batch_committed batch=(\d+) .* bootstraps=(\d+)")
CREATED = re.compile(r"event=spark_writer_created prefix=\S+ pid=(\d+) bootstraps=(\d+)")


def run_logged(pipe: Pipeline) -> str:
    """Run the pipeline's driver to its end with the connector's DEBUG log; its output."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "EXACTLY_SPARK_LOG_LEVEL": "DEBUG"}
    env.pop(failpoints.ENV, None)
    proc = subprocess.run(
        [sys.executable, str(WORKER), pipe.bootstrap, pipe.src, pipe.dst, str(pipe.checkpoint),
         pipe.name, "exactly-once", str(MAX_OFFSETS)], check=False, env=env,
        start_new_session=True, timeout=540, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc.stdout


@pytest.mark.timeout(600)  # one driver of seven micro-batches: over 300 s on a loaded machine
def test_micro_batches_after_the_first_make_at_most_two_clients(tmp_path: Path) -> None:
    with EmbeddedBroker() as broker:
        pipe = Pipeline(broker.bootstrap, tmp_path, "exactly-once")
        output = run_logged(pipe)
        assert pipe.check() == (0, 0)
        assert still_open(broker.bootstrap, pipe.name) == []

    committed = {int(batch): int(made) for batch, made in COMMITTED.findall(output)}
    assert sorted(committed) == list(range(len(committed))) and len(committed) >= 5, output[-6000:]
    assert committed[0] > 0  # the first batch makes the clients (the count counts)
    later = {batch: made for batch, made in committed.items() if batch > 0}
    assert all(made <= STEADY for made in later.values()), committed

    # The writer the tasks get is made in a worker of its own (the commit's worker makes its
    # own too): after its first, each makes at most STEADY in its worker.
    created: dict[str, list[int]] = {}
    for pid, made in CREATED.findall(output):
        created.setdefault(pid, []).append(int(made))
    assert sum(len(v) for v in created.values()) >= 2 * len(committed), created
    assert all(made <= STEADY for per_worker in created.values() for made in per_worker[1:]), \
        created
