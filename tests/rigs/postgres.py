"""A private PostgreSQL server for tests, benchmarks and demos, as EmbeddedBroker is for the log.

    with PrivatePostgres() as pg:
        conn = psycopg.connect(pg.dsn("postgres"))
        pg.create_database("orders")

`initdb` into a temporary directory, then `pg_ctl start` on a free TCP port of 127.0.0.1 with
its unix socket in that directory; `stop()` (or leaving the block) shuts it down and removes
it; its log is registered (exactly.testing.logs), so a test that fails while the server runs
shows it on its report. PostgreSQL refuses to run as root, so as root the server runs as the
`postgres` OS user (`runuser -u postgres`), which owns the directory. Binaries come from PATH or
/usr/lib/postgresql/*/bin (Debian's `postgresql` package). Anything that goes wrong raises
PostgresStartError with the server's log: a test that needs PostgreSQL fails, it never skips.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from exactly.testing.logs import ProcessLog, register_log

__all__ = ["PostgresStartError", "PrivatePostgres", "find_pg_bin"]


class PostgresStartError(RuntimeError):
    """PostgreSQL could not be found, initialised or started; the message says why."""


def find_pg_bin() -> Path:
    """The directory holding initdb, pg_ctl and postgres."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if candidates:
        return Path(candidates[-1]).parent
    raise PostgresStartError(
        "PostgreSQL is not installed: no pg_ctl on PATH or in /usr/lib/postgresql/*/bin; "
        "install it with `apt-get install -y postgresql` (Debian)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """A throwaway PostgreSQL server; `settings` are extra `-c key=value` server settings."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.bin = find_pg_bin()
        self.settings = dict(settings or {})
        self.root: Path | None = None
        self.port = 0
        self.host = "127.0.0.1"
        self.user = "postgres"
        self._as_postgres = os.geteuid() == 0
        self._log: ProcessLog | None = None

    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "start() first"
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        assert self.root is not None, "start() first"
        return self.root / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname}"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def start(self) -> Self:
        self.root = Path(tempfile.mkdtemp(prefix="exactly-pg-"))
        if self._as_postgres:
            self.root.chmod(0o755)
            shutil.chown(self.root, "postgres", "postgres")
        else:
            self.user = os.environ.get("USER") or "postgres"
        init = self._run("initdb", "-D", str(self.data_dir), "-U", self.user, "--auth=trust",
                         "--encoding=UTF8", "--no-sync")
        if init.returncode != 0:
            raise PostgresStartError(f"initdb failed ({init.returncode}):\n{init.stdout}\n"
                                     f"{init.stderr}")
        self.port = _free_port()
        self._log = register_log("PostgreSQL", self.log_path, temporary=True)
        options = [f"-p {self.port}", f"-k {self.root}", "-c listen_addresses=127.0.0.1",
                   *(f"-c {k}={v}" for k, v in self.settings.items())]
        started = self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path),
                            "-o", " ".join(options), "-w", "-t", "60", "start")
        if started.returncode != 0:
            log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            raise PostgresStartError(f"pg_ctl start failed ({started.returncode}):\n"
                                     f"{started.stdout}\n{started.stderr}\n"
                                     f"--- server log ---\n{log}")
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise PostgresStartError(f"PostgreSQL did not accept connections on "
                                             f"{self.host}:{self.port} within {timeout}s") from None
                time.sleep(0.05)

    def create_database(self, name: str) -> str:
        """CREATE DATABASE name; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            if self.data_dir.exists():
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop",
                          timeout=60)
        finally:
            if self._log is not None:
                self._log.close()  # (a test running keeps it: logs.py)
                self._log = None
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
