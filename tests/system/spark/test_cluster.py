"""The exactly-once streaming pipeline on a real Spark standalone cluster (issue 15, items 2-3).

The module shares a cluster of a master and two workers of one core each
(exactly.demo.spark_cluster.SparkCluster), so the two write tasks of a micro-batch run in two
executor JVMs of their own, and an embedded broker. The driver is
tests/workers/spark_stream_worker.py in a process of its own, as in test_stream_faults.py. The
input is 600 records, 300 in each of 2 partitions, read in three micro-batches (0, 1, 2) of 100
records per partition.

- Executors whose Python lacks exactly (a virtualenv with exactly's dependencies, not exactly) get
  it from the job by exactly.spark.ship.
- Faults in the middle of micro-batch 2: the first attempt of each of its tasks pauses after
  sending its rows (fault point spark.task.write=pause, set in the executors' environment by
  spark.executorEnv), and the test waits until one of them has rows in the output's log in its
  open transaction, so the fault lands in the middle of a task's write, never after it. Then
  kill -9 of the executor JVM running that task, of its whole worker, of the driver (restarted
  from its checkpoint), or of the broker. Which executor runs which task, the tests read in the
  executors' logs.

Each test ends with the output read back with read_committed equal to the transformed input
exactly, and no transaction of the query left open.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exactly import failpoints
from exactly.client import Admin, Producer, ProducerFencedError, TransactionSession
from exactly.client.admin import TransactionDescription
from exactly.demo.spark_cluster import SparkCluster
from exactly.testing import EmbeddedBroker
from tests.paths import REPO, WORKERS
from tests.support import consume_confluent, create_topic
from tests.system.spark.test_stream_faults import difference, read_committed, still_open

WORKER = WORKERS / "spark_stream_worker.py"
PARTITIONS = 2
PER_PARTITION = 300
RECORDS = PARTITIONS * PER_PARTITION
MAX_OFFSETS = 200  # 100 offsets of each partition per micro-batch: batches 0, 1 and 2
FAULT_BATCH = 2
PAUSE = 15.0  # seconds the first attempt of each task of FAULT_BATCH waits in mid-write
DRIVER_TIMEOUT = 420.0

# an application starts in 10-20 s on this cluster; a test runs one to four of them
pytestmark = pytest.mark.timeout(900)

# In an executor's log (its stderr, where its Python workers' stderr goes too).
RUNNING = re.compile(r"Running task (\d+)\.\d+ in stage")
PAUSED = re.compile(r"event=failpoint point=spark\.task\.write action=pause n=(\d+) pid=(\d+)")


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- the driver ---------------------------------------------------------------------------------

@dataclass
class Driver:
    """One run of the driver process; its output goes to `log`."""

    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, chars: int = 6000) -> str:
        return f"driver output ({self.log}):\n{self.output()[-chars:]}"

    def app_id(self, timeout: float = 180) -> str:
        """Spark's id of the application, once the driver has printed it."""
        deadline = time.monotonic() + timeout
        while (found := re.search(r"^app (\S+)$", self.output(), re.MULTILINE)) is None:
            assert self.proc.poll() is None, f"the driver ended early\n{self.tail()}"
            assert time.monotonic() < deadline, f"no application after {timeout} s\n{self.tail()}"
            time.sleep(0.2)
        return found[1]

    def wait(self, timeout: float = DRIVER_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            failpoints.kill_session(self.proc.pid)
            self.proc.wait()
            raise AssertionError(f"the driver did not end in {timeout} s\n{self.tail()}") from None


class ClusterPipeline:
    """A query from a new input topic to a new output topic, driven on the cluster."""

    def __init__(self, bootstrap: str, cluster: SparkCluster, tmp: Path) -> None:
        self.bootstrap, self.cluster, self.tmp = bootstrap, cluster, tmp
        self.src, self.dst, self.name = _name("in"), _name("out"), _name("q")
        self.prefix = f"exactly-spark-{self.name}"  # the query's transactional ids: prefix-<n>
        self.checkpoint = tmp / "checkpoint"
        self.runs = 0
        create_topic(bootstrap, self.src, partitions=PARTITIONS)
        create_topic(bootstrap, self.dst, partitions=PARTITIONS)
        self.expected = self._feed()

    def _feed(self) -> Counter[tuple[bytes, bytes]]:
        """The input, the same number of records in each partition (so the micro-batches are
        the same every run); the expected output as a multiset of (key, value)."""
        expected: Counter[tuple[bytes, bytes]] = Counter()
        with Producer({"bootstrap.servers": self.bootstrap}) as producer:
            for i in range(RECORDS):
                key, value = f"k{i % 97}".encode(), f"v{i}".encode()
                producer.send(self.src, value, key, partition=i % PARTITIONS)
                expected[key, b"out:" + value] += 1
            producer.flush()
        return expected

    def start(self, *, pause: bool = False, executor_python: Path | None = None,
              ship: bool = False) -> Driver:
        """Start the driver; with `pause`, the tasks of FAULT_BATCH pause in mid-write."""
        confs = {**self.cluster.driver_config(), "spark.task.maxFailures": "4"}
        if pause:
            confs[f"spark.executorEnv.{failpoints.ENV}"] = (
                f"spark.task.write=pause:{PAUSE}@{FAULT_BATCH}")
        args = [sys.executable, str(WORKER), self.bootstrap, self.src, self.dst,
                str(self.checkpoint), self.name, "exactly-once", str(MAX_OFFSETS),
                "--master", self.cluster.master_url, *(f"--conf={k}={v}" for k, v in confs.items())]
        if executor_python is not None:
            args += ["--executor-python", str(executor_python)]
        if ship:
            args.append("--ship")
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop(failpoints.ENV, None)
        self.runs += 1
        log = self.tmp / f"driver-{self.runs}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(args, env=env, start_new_session=True,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        return Driver(proc, log)

    def run(self) -> int:
        """Run the driver to its end; its exit code."""
        driver = self.start()
        code = driver.wait()
        if code != 0:
            print(driver.tail())
        return code

    def check(self) -> None:
        """The output is the transformed input exactly; no transaction of the query is open."""
        duplicates, missing = difference(self.expected, read_committed(self.bootstrap, self.dst))
        assert (duplicates, missing) == (0, 0), f"{duplicates} duplicates, {missing} missing"
        assert still_open(self.bootstrap, self.name) == []


# -- what runs where ----------------------------------------------------------------------------

@dataclass(frozen=True)
class PausedTask:
    """A task of FAULT_BATCH paused in mid-write, found in its executor's log."""

    worker: int        # the index of its Spark worker
    log: Path          # its executor's stderr
    partition: int     # its transactional id is <prefix>-<partition>
    python_pid: int    # the Python worker running it


def paused_tasks(cluster: SparkCluster, app_id: str) -> list[PausedTask]:
    found = []
    for log in sorted(cluster.work_dir.glob(f"worker-*/{app_id}/*/stderr")):
        partition = None  # an executor of one core runs one task at a time: the last started
        for line in log.read_text(errors="replace").splitlines():
            if running := RUNNING.search(line):
                partition = int(running[1])
            elif (paused := PAUSED.search(line)) and int(paused[1]) == FAULT_BATCH:
                assert partition is not None, f"a pause before any task in {log}"
                worker = int(log.relative_to(cluster.work_dir).parts[0].removeprefix("worker-"))
                found.append(PausedTask(worker, log, partition, int(paused[2])))
    return found


def wait_for_task_mid_write(pipe: ClusterPipeline, driver: Driver
                            ) -> tuple[PausedTask, TransactionDescription]:
    """A task of FAULT_BATCH paused in mid-write, and its transaction, once that is open with
    some of the task's rows in the output's log: the moment for a fault."""
    app_id = driver.app_id()
    deadline = time.monotonic() + 300
    while not (tasks := paused_tasks(pipe.cluster, app_id)):
        assert driver.proc.poll() is None, f"the driver ended early\n{driver.tail()}"
        assert time.monotonic() < deadline, f"no task of batch {FAULT_BATCH} paused\n{driver.tail()}"
        time.sleep(0.1)
    txn_id = f"{pipe.prefix}-{tasks[0].partition}"
    return tasks[0], wait_for_written_transaction(pipe.bootstrap, txn_id, pipe.dst)


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat.rsplit(b")", 1)[1].split()[1])  # after the command: state, ppid


def executor_of(cluster: SparkCluster, task: PausedTask) -> int:
    """The pid of the executor JVM whose Python worker runs `task`."""
    executors = set(cluster.executor_pids(task.worker))
    pid = task.python_pid
    while pid > 1 and pid not in executors:
        pid = _parent(pid)
    assert pid in executors, f"no executor of worker {task.worker} above pid {task.python_pid}"
    return pid


def logs_with_rerun(cluster: SparkCluster, app_id: str, partition: int) -> list[Path]:
    """The executor logs in which a second (or later) attempt of `partition`'s task started."""
    rerun = re.compile(rf"Running task {partition}\.[1-9]\d* in stage")
    return [log for log in sorted(cluster.work_dir.glob(f"worker-*/{app_id}/*/stderr"))
            if rerun.search(log.read_text(errors="replace"))]


def wait_for_written_transaction(bootstrap: str, txn_id: str, topic: str,
                                 timeout: float = 60) -> TransactionDescription:
    """`txn_id`'s transaction, once it is open with some of its records in `topic`'s log."""
    deadline = time.monotonic() + timeout
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        while time.monotonic() < deadline:
            txn = admin.describe_transactions([txn_id])[txn_id]
            if txn.state == "Ongoing":
                producers = admin.describe_producers([(topic, p) for p in range(PARTITIONS)])
                if any(s.producer_id == txn.producer_id and s.producer_epoch == txn.producer_epoch
                       and s.current_txn_start_offset >= 0
                       for states in producers.values() for s in states):
                    return txn
            time.sleep(0.1)
    raise AssertionError(f"{txn_id} wrote nothing into {topic} in {timeout} s")


# -- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def whole_cluster() -> Iterator[SparkCluster]:
    with SparkCluster(workers=2) as cluster:
        yield cluster


@pytest.fixture
def cluster(whole_cluster: SparkCluster) -> SparkCluster:
    """The module's cluster with both workers up: a test that kills one restarts it, and if that
    failed, the next test does."""
    for index, proc in enumerate(whole_cluster.workers):
        if proc is None or proc.poll() is not None:
            whole_cluster.restart_worker(index)
    return whole_cluster


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


# -- the tests ----------------------------------------------------------------------------------

def test_executors_without_exactly_get_it_shipped(cluster: SparkCluster, broker: EmbeddedBroker,
                                                  lean_python: Path, tmp_path: Path) -> None:
    pipe = ClusterPipeline(broker.bootstrap, cluster, tmp_path)
    driver = pipe.start(executor_python=lean_python, ship=True)
    assert driver.wait() == 0, driver.tail()
    # the driver's probe job, run before ship(): the tasks' Python and whether it had exactly
    probed = re.search(r"^probe (.*)$", driver.output(), re.MULTILINE)
    assert probed is not None, driver.tail()
    assert [tuple(p) for p in json.loads(probed[1])] == [(str(lean_python), False)] * 2
    pipe.check()


def test_executor_killed_mid_batch(cluster: SparkCluster, broker: EmbeddedBroker,
                                   tmp_path: Path) -> None:
    pipe = ClusterPipeline(broker.bootstrap, cluster, tmp_path)
    driver = pipe.start(pause=True)
    task, killed = wait_for_task_mid_write(pipe, driver)
    cluster.kill_executor(executor_of(cluster, task))
    assert driver.wait() == 0, driver.tail()
    pipe.check()
    # the task ran again in another executor
    reran = logs_with_rerun(cluster, driver.app_id(), task.partition)
    assert reran and task.log not in reran, (task, reran)
    # the killed attempt is fenced: its epoch is behind, its identity can no longer commit,
    # and the rows it had written are in the log but read_committed does not return them
    txn_id = f"{pipe.prefix}-{task.partition}"
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        now = admin.describe_transactions([txn_id])[txn_id]
    assert (now.producer_id, now.state) == (killed.producer_id, "CompleteCommit")
    assert now.producer_epoch > killed.producer_epoch
    with (TransactionSession.resume(txn_id, killed.producer_id, killed.producer_epoch,
                                    {"bootstrap.servers": broker.bootstrap}) as zombie,
          pytest.raises(ProducerFencedError)):
        zombie.commit_transaction()
    consume_confluent(broker.bootstrap, pipe.dst, RECORDS + 1,
                      extra={"isolation.level": "read_uncommitted"})


def test_worker_killed_mid_batch(cluster: SparkCluster, broker: EmbeddedBroker,
                                 tmp_path: Path) -> None:
    pipe = ClusterPipeline(broker.bootstrap, cluster, tmp_path)
    driver = pipe.start(pause=True)
    task, _ = wait_for_task_mid_write(pipe, driver)
    cluster.kill_worker(task.worker)
    try:
        assert driver.wait() == 0, driver.tail()
    finally:
        cluster.restart_worker(task.worker)
    pipe.check()
    # the task ran again on the other worker
    reran = logs_with_rerun(cluster, driver.app_id(), task.partition)
    assert reran and all(log.is_relative_to(cluster.work_dir / f"worker-{1 - task.worker}")
                         for log in reran), (task, reran)


def test_driver_killed_mid_batch_then_restarted(cluster: SparkCluster, broker: EmbeddedBroker,
                                                tmp_path: Path) -> None:
    pipe = ClusterPipeline(broker.bootstrap, cluster, tmp_path)
    driver = pipe.start(pause=True)
    wait_for_task_mid_write(pipe, driver)
    failpoints.kill_session(driver.proc.pid)  # kill -9 of the driver and its Python workers
    assert driver.wait() == -9
    assert still_open(broker.bootstrap, pipe.name), "the kill should leave the batch in doubt"
    assert pipe.run() == 0  # from the checkpoint
    pipe.check()


def test_broker_killed_mid_batch(cluster: SparkCluster, tmp_path: Path) -> None:
    with EmbeddedBroker() as broker:
        pipe = ClusterPipeline(broker.bootstrap, cluster, tmp_path)
        driver = pipe.start(pause=True)
        wait_for_task_mid_write(pipe, driver)
        broker.restart(kill=True)
        runs = [driver.wait()]
        while runs[-1] != 0 and len(runs) < 4:  # a failed query is restarted from its checkpoint
            runs.append(pipe.run())
        assert runs[-1] == 0, runs
        pipe.check()
