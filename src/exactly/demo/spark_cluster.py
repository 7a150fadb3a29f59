"""A Spark standalone cluster on this machine, from the jars the `pyspark` package ships.

    with SparkCluster(workers=2) as cluster:          # a master and two workers of 1 core each
        spark = (SparkSession.builder.master(cluster.master_url)
                 .config(map=cluster.driver_config()).getOrCreate())
        ...
        cluster.kill_executor(cluster.executor_pids()[0])   # kill -9 of one executor JVM
        cluster.kill_worker(1)                              # kill -9 of a worker and its executors
        cluster.restart_worker(1)

The master and each worker are JVMs started with `bin/spark-class` (what `sbin/start-master.sh`
and `start-worker.sh` run), bound to 127.0.0.1 on free ports, each worker in a process group of
its own: the executors a worker launches are in its group. PySpark's daemon moves itself and
its Python workers to a group of their own, so `kill_worker` kills the worker's group and every
descendant of the worker, all at once, as when a machine of a cluster dies. Executors are JVMs of
their own, not threads of the driver as in `local[N]`. Logs go to files in `work_dir`: the
master's, each worker's and each executor's (its stderr, where its Python workers' errors go
too), all registered (exactly.testing.logs): a test that fails while the cluster runs shows them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from exactly.testing.logs import ProcessLog, register_log

__all__ = ["SparkCluster", "SparkClusterError", "spark_home"]

MASTER_STARTED = re.compile(r"Starting Spark master at (spark://\S+)")
WORKER_REGISTERED = "Successfully registered with master"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class SparkClusterError(RuntimeError):
    """The master or a worker did not come up; the message carries the end of its log."""


def spark_home() -> Path:
    """The Spark installation inside the `pyspark` package (or $SPARK_HOME if set)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark
    return Path(pyspark.__file__).resolve().parent


_live: weakref.WeakSet[SparkCluster] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for cluster in list(_live):
        cluster.stop(grace=0)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process in process group `pgid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pgid:
                continue
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except (OSError, ProcessLookupError):
            continue
        found.append((int(entry.name), cmdline))
    return found


def _descendants(pid: int) -> list[int]:
    """Pids of the live descendants of `pid`: its children, their children, and so on."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(b")", 1)[1].split()[1])  # after the command: state, ppid
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


class SparkCluster:
    """A standalone master and `workers` workers of `cores` cores and `memory` each.

    work_dir: logs and the workers' directories (a temporary one, removed by stop(), if None).
    env: extra environment of the master and workers (e.g. SPARK_WORKER_OPTS).
    """

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "1g",
                 work_dir: str | os.PathLike[str] | None = None, host: str = "127.0.0.1",
                 startup_timeout: float = 120.0, env: Mapping[str, str] | None = None) -> None:
        self.workers_wanted = workers
        self.cores, self.memory, self.host = cores, memory, host
        self.startup_timeout = startup_timeout
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="exactly-spark-cluster-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.extra_env = dict(env or {})
        self.master: subprocess.Popen[bytes] | None = None
        self.master_url = ""
        self.workers: list[subprocess.Popen[bytes] | None] = []
        self._logs: list[ProcessLog] = []
        _live.add(self)

    # -- life cycle -----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": self.host,
                "SPARK_DAEMON_MEMORY": "512m", "SPARK_NO_DAEMONIZE": "1",
                # no REST submission server: it binds the fixed port 6066
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                **self.extra_env}

    def _temporary(self) -> bool:
        return self._own_dir and not os.environ.get("EXACTLY_KEEP_SPARK_CLUSTER")

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        entry = register_log(f"Spark {name}", self.work_dir / f"{name}.log",
                             temporary=self._temporary())
        if entry not in self._logs:
            self._logs.append(entry)
        if name.startswith("worker-"):  # its executors' logs, in its --work-dir
            entry = register_log(f"Spark executor ({name})", self.work_dir / name,
                                 pattern="app-*/*/std*", temporary=self._temporary())
            if entry not in self._logs:
                self._logs.append(entry)
        log = (self.work_dir / f"{name}.log").open("ab")
        try:
            return subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], cwd=self.work_dir,
                env=self._env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        finally:
            log.close()

    def _wait_for(self, name: str, proc: subprocess.Popen[bytes], found: re.Pattern[str] | str,
                  start_at: int) -> str:
        """Wait until `found` appears in the log of `name` after byte `start_at`; the match."""
        path = self.work_dir / f"{name}.log"
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            with path.open("rb") as f:
                f.seek(start_at)
                text = f.read().decode(errors="replace")
            match = found.search(text) if isinstance(found, re.Pattern) else (
                found if found in text else None)
            if match is not None:
                return match if isinstance(match, str) else match.group(1)
            if proc.poll() is not None:
                raise SparkClusterError(f"Spark {name} exited with {proc.returncode}:\n"
                                        f"{_tail(path)}")
            time.sleep(0.1)
        raise SparkClusterError(f"Spark {name} not up after {self.startup_timeout:.0f} s:\n"
                                f"{_tail(path)}")

    def _log_size(self, name: str) -> int:
        path = self.work_dir / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def start(self) -> Self:
        """Start the master and the workers; return once every worker is registered."""
        start_at = self._log_size("master")
        self.master = self._spawn("master", [
            "org.apache.spark.deploy.master.Master", "--host", self.host, "--port", "0",
            "--webui-port", "0"])
        self.master_url = self._wait_for("master", self.master, MASTER_STARTED, start_at)
        for _ in range(self.workers_wanted):
            self.add_worker()
        return self

    def add_worker(self) -> int:
        """Start one more worker; its index once it is registered with the master."""
        self.workers.append(None)
        index = len(self.workers) - 1
        self._start_worker(index)
        return index

    def _start_worker(self, index: int) -> None:
        name = f"worker-{index}"
        (self.work_dir / name).mkdir(exist_ok=True)
        start_at = self._log_size(name)
        proc = self._spawn(name, [
            "org.apache.spark.deploy.worker.Worker", "--host", self.host, "--port", "0",
            "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(self.work_dir / name), self.master_url])
        self.workers[index] = proc
        self._wait_for(name, proc, WORKER_REGISTERED, start_at)

    def stop(self, grace: float = 10.0) -> None:
        """Stop the workers (with their executors) and the master; remove a temporary work_dir."""
        for proc in [*self.workers, self.master]:
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
            try:
                proc.wait(timeout=grace if grace > 0 else 10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for proc in [*self.workers, self.master]:  # executors outliving a SIGTERMed worker
            if proc is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        _live.discard(self)
        for entry in self._logs:
            entry.close()  # (a test running keeps a temporary log: logs.py)
        self._logs.clear()
        if self._temporary():
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop(grace=0)
            raise

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- what a driver needs --------------------------------------------------------------------

    def driver_config(self, executor_memory: str = "512m") -> dict[str, str]:
        """Spark settings for a driver of this cluster: one executor of one core per worker."""
        return {"spark.master": self.master_url, "spark.driver.host": self.host,
                "spark.driver.bindAddress": self.host, "spark.executor.cores": str(self.cores),
                "spark.executor.memory": executor_memory, "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false"}

    # -- faults ---------------------------------------------------------------------------------

    def executor_pids(self, worker: int | None = None) -> list[int]:
        """Pids of the executor JVMs running on `worker` (on every worker if None)."""
        indexes = range(len(self.workers)) if worker is None else [worker]
        pids = []
        for i in indexes:
            proc = self.workers[i]
            if proc is not None and proc.poll() is None:
                pids += [pid for pid, cmd in _group_members(proc.pid) if EXECUTOR_CLASS in cmd]
        return sorted(pids)

    def wait_for_executors(self, count: int, timeout: float = 120.0) -> list[int]:
        """Wait until at least `count` executor JVMs run; their pids."""
        deadline = time.monotonic() + timeout
        while len(pids := self.executor_pids()) < count:
            if time.monotonic() > deadline:
                raise SparkClusterError(f"{len(pids)} executors after {timeout:.0f} s, "
                                        f"wanted {count}")
            time.sleep(0.1)
        return pids

    @staticmethod
    def kill_executor(pid: int) -> None:
        """kill -9 of one executor JVM (its Python workers notice and exit)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def kill_worker(self, index: int) -> None:
        """kill -9 of worker `index` with everything it started: executors, Python workers."""
        proc = self.workers[index]
        if proc is None:
            return
        # taken before the kill: orphans are adopted by init and no longer found from the worker
        others = _descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in others:  # PySpark's daemons and Python workers, in groups of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def restart_worker(self, index: int) -> None:
        """Start worker `index` again (after kill_worker) and wait until it is registered."""
        proc = self.workers[index]
        if proc is not None and proc.poll() is None:
            raise SparkClusterError(f"worker {index} is running")
        self._start_worker(index)
