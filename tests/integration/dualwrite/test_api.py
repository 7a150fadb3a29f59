"""The library's checks of its own use: clear errors for what cannot work."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from exactly.dualwrite import DualWriter, Postgres, SQLite
from exactly.failpoints import ENV


def test_a_connection_of_an_unknown_driver_is_refused() -> None:
    class Other:
        pass

    with pytest.raises(ValueError, match="supports sqlite3 and psycopg"):
        DualWriter(Other(), {"bootstrap.servers": "localhost:1", "transactional.id": "t"})


def test_commit_modes_are_checked() -> None:
    assert SQLite().check_isolation(None) == "deferred"
    assert Postgres().check_isolation("SERIALIZABLE") == "serializable"
    with pytest.raises(ValueError, match="deferred, immediate, exclusive"):
        SQLite().check_isolation("serializable")


def test_a_transactional_id_is_required() -> None:
    with pytest.raises(ValueError, match="transactional.id"):
        DualWriter(sqlite3.connect(":memory:"), {"bootstrap.servers": "localhost:1"})


def test_placeholders_follow_the_driver() -> None:
    sql = "UPDATE t SET a = ? WHERE b = ?"
    assert SQLite().sql(sql) == sql
    assert Postgres().sql(sql) == "UPDATE t SET a = %s WHERE b = %s"


def test_an_unknown_fault_point_is_an_error() -> None:
    proc = subprocess.run([sys.executable, "-c", "import exactly.dualwrite"],
                          env={ENV: "dualwrite.9-nonsense=crash"}, capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0
    assert "unknown fault point 'dualwrite.9-nonsense'" in proc.stderr
    assert "dualwrite.1-begin-database-transaction" in proc.stderr  # the known ones are named
