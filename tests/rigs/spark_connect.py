"""A Spark Connect server on this machine, from the jars the `pyspark` package ships.

    with SparkConnectServer() as server:                     # local[2], a free port
        spark = SparkSession.builder.remote(server.remote).getOrCreate()
        register(spark)                                      # format("exactly"), through Connect
        ...
        server.kill()                                        # kill -9 of the driver
        server.start()                                       # a new driver, same port

With Spark Connect the driver is a server (`org.apache.spark.sql.connect.service.
SparkConnectServer`, run by `bin/spark-submit` as `sbin/start-connect-server.sh` does) and the
application is a thin gRPC client. The server here listens on 127.0.0.1; its Spark master is
`local[2]` unless another is given (`spark://HOST:PORT` of a standalone cluster). Everything a
Python data source does runs in the server's Python workers (planning, the stream's commit on
the driver, the tasks in `local` mode), which run `python` (PYSPARK_PYTHON; this interpreter by
default): they need `exactly` installed there. Shipped by the client the Connect way
(`exactly.spark.ship`: SparkSession.addArtifacts(zip, pyfile=True)) it serves batch reads only:
in Spark 4.3 a stream's Python workers do not see a Connect session's artifacts
(tests/system/spark/test_connect.py shows the error).

The server runs in a session of its own, so that `kill()` takes the JVM and every Python worker
(pyspark's daemon gives its workers process groups of their own, but they stay in the session),
and so that a fault point's `crash` in one of them (EXACTLY_FAILPOINTS in `env`) kills the
whole server and nothing else. Its output goes to `log_path`, appended across starts, registered
(exactly.testing.logs): a test that fails while the server is open shows it on its report.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from exactly import failpoints
from exactly.demo.spark_cluster import spark_home
from exactly.testing.logs import ProcessLog, register_log

__all__ = ["SERVER_CLASS", "SparkConnectServer", "SparkConnectStartError"]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTED = "Spark Connect server started at"
PORT_TAKEN = "Address already in use"


class SparkConnectStartError(RuntimeError):
    """The Connect server did not come up; the message carries the end of its log."""


_live: weakref.WeakSet[SparkConnectServer] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_live):
        server.kill()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class SparkConnectServer:
    """A Spark Connect server process on `host`, a free port, with master `master`.

    python: the interpreter of the server's Python workers (PYSPARK_PYTHON). conf: extra Spark
    settings (`--conf`). env: extra environment of the server and its workers, read by each
    start(), so a test may change it between a kill() and the next start() (say, to drop
    EXACTLY_FAILPOINTS). work_dir: the server's working directory, warehouse and log (a
    temporary one, removed by close(), if None).
    """

    def __init__(self, master: str = "local[2]", *, python: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, conf: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None,
                 work_dir: str | os.PathLike[str] | None = None,
                 startup_timeout: float = 180.0) -> None:
        self.master, self.host = master, host
        self.python = python or sys.executable
        self.conf = dict(conf or {})
        self.env = dict(env or {})
        self.startup_timeout = startup_timeout
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="exactly-spark-connect-"))
        self.log_path = self.work_dir / "connect-server.log"
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log: ProcessLog | None = None
        _live.add(self)

    @property
    def remote(self) -> str:
        """The URL for SparkSession.builder.remote(...)."""
        return f"sc://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- life cycle -----------------------------------------------------------------------------

    def command(self) -> list[str]:
        settings = {"spark.connect.grpc.binding.address": self.host,
                    "spark.connect.grpc.binding.port": str(self.port),
                    "spark.driver.host": self.host, "spark.driver.bindAddress": self.host,
                    "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                    "spark.sql.warehouse.dir": str(self.work_dir / "warehouse"),
                    **self.conf}
        conf = [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]
        return [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS,
                "--master", self.master, "--name", "Spark Connect server", *conf]

    def start(self) -> Self:
        """Start the server (on the port of the previous start, if any) and return once it
        accepts connections."""
        if self.running:
            raise RuntimeError(f"Spark Connect server already running at {self.remote}")
        self._log = register_log(
            "Spark Connect server", self.log_path,
            temporary=self._own_dir and not os.environ.get("EXACTLY_KEEP_SPARK_CONNECT"))
        if not self.port:
            self.port = _free_port(self.host)
        try:
            self._spawn()
        except SparkConnectStartError as exc:
            if PORT_TAKEN not in str(exc):
                raise
            self._note(f"port {self.port} is taken; starting on another free port")
            self.port = _free_port(self.host)
            self._spawn()
        return self

    def _spawn(self) -> None:
        self.starts += 1
        cmd = self.command()
        self._note(f"start #{self.starts}: {' '.join(cmd)}")
        start_at = self.log_path.stat().st_size
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": self.host,
               "PYSPARK_PYTHON": self.python, **self.env}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(cmd, cwd=self.work_dir, env=env,
                                            stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while not (self._logged_since(start_at, STARTED) and self._accepts()):
            if self.process.poll() is not None:
                raise SparkConnectStartError(
                    f"the Spark Connect server exited with {self.process.returncode} before "
                    f"listening on {self.host}:{self.port}; its log {self.log_path} ends:\n"
                    f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise SparkConnectStartError(
                    f"the Spark Connect server did not listen on {self.host}:{self.port} within "
                    f"{self.startup_timeout:.0f} s (killed; a busy machine may need a larger "
                    f"startup_timeout); its log {self.log_path} ends:\n{self.log_tail()}")
            time.sleep(0.2)

    def _logged_since(self, start_at: int, text: str) -> bool:
        with self.log_path.open("rb") as f:
            f.seek(start_at)
            return text in f.read().decode(errors="replace")

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=5):
                return True
        except OSError:
            return False

    def kill(self) -> int | None:
        """SIGKILL of the whole server, the JVM and its Python workers (a driver crash); waits
        for it and returns the JVM's exit code."""
        proc = self.process
        if proc is None:
            return None
        if proc.returncode is None:  # not reaped yet: its pid, the session's id, is still ours
            # The JVM leads its session; everything it started is in it, so none survives it.
            failpoints.kill_session(proc.pid)
        return proc.wait()

    def wait(self, timeout: float) -> int:
        """Wait until the JVM has exited (a fault point crashed it, say), kill what it left in
        its session, and return its exit code."""
        proc = self.process
        if proc is None:
            raise RuntimeError("the Spark Connect server was never started")
        deadline = time.monotonic() + timeout
        # WNOWAIT: exited but not reaped, so its pid cannot be reused before kill().
        while proc.returncode is None and os.waitid(
                os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.command(), timeout)
            time.sleep(0.2)
        code = self.kill()
        assert code is not None
        return code

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Spark stops the session and its workers), then kill() what is left after
        `timeout` s."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
        self.kill()

    def close(self) -> None:
        """stop(), then remove the temporary work_dir (if this server made one)."""
        try:
            self.stop()
        finally:
            _live.discard(self)
            if self._log is not None:
                self._log.close()  # (a test running keeps a temporary log: logs.py)
                self._log = None
            if self._own_dir and not os.environ.get("EXACTLY_KEEP_SPARK_CONNECT"):
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"SparkConnectServer({self.remote}, {self.master}, {state})"

    # -- logs -----------------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(f"----- [SparkConnectServer {time.strftime('%H:%M:%S')}] {text}\n")

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
