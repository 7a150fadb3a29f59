"""Fixtures of the dual-write tests: a broker for the module, a private PostgreSQL server for
the session (started here, never skipped: no PostgreSQL is a failure), and a fresh database of
each kind per test."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly import failpoints
from exactly.testing import EmbeddedBroker
from exactly.testing.logs import attach_log, kept_logs_dir, unique_path
from tests.helpers.dualwrite.helpers import Database
from tests.paths import REPO
from tests.rigs.postgres import PrivatePostgres

_names = itertools.count()

BROKER_SETTINGS = {"log.flush.policy": "os", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="session")
def postgres() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL server (initdb + pg_ctl in a temporary directory, as the postgres
    OS user when run as root); fsync off: the tests kill applications, not machines."""
    with PrivatePostgres(settings={"fsync": "off", "max_connections": "100"}) as pg:
        yield pg


@pytest.fixture(scope="module")
def dw_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=BROKER_SETTINGS) as b:
        yield b


def _new_database(kind: str, postgres_factory: object, tmp_path: Path) -> Database:
    if kind == "sqlite":
        return Database("sqlite", str(tmp_path / f"db{next(_names)}.sqlite"))
    pg = postgres_factory
    assert isinstance(pg, PrivatePostgres)
    return Database("postgres", pg.create_database(f"dw{os.getpid()}_{next(_names)}"))


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    """A fresh, empty database: an SQLite file, or a new PostgreSQL database."""
    pg = request.getfixturevalue("postgres") if request.param == "postgres" else None
    return _new_database(request.param, pg, tmp_path)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Database:
    return _new_database("sqlite", None, tmp_path)


@pytest.fixture
def pg_db(postgres: PrivatePostgres, tmp_path: Path) -> Database:
    return _new_database("postgres", postgres, tmp_path)


def run_worker(module: str, *args: str, fault: str | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m tests.helpers.dualwrite.<module> args` from the repository root, in a session of
    its own (a fault point's crash kills its whole session); EXACTLY_FAILPOINTS set to `fault` (or
    unset). Its stdout and stderr go to files in the test's directory of kept logs, shown on the
    test's report if it fails (exactly.testing.logs), and come back in the result as text."""
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    if fault:
        env[failpoints.ENV] = fault
    cmd = [sys.executable, "-m", f"tests.helpers.dualwrite.{module}", *args]
    directory = kept_logs_dir()
    out_path = unique_path(directory, f"{module}.out")
    err_path = unique_path(directory, f"{module}.err")
    attach_log(f"{module} stdout", out_path)
    attach_log(f"{module} stderr", err_path)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                              stderr=err, timeout=timeout, check=False, start_new_session=True)
    return subprocess.CompletedProcess(cmd, done.returncode,
                                       out_path.read_text(errors="replace"),
                                       err_path.read_text(errors="replace"))
