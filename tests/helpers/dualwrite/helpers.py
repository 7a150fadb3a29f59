"""What the dual-write tests and their worker processes share: opening the test databases,
reading what reached the log, and the fault points of the crash tests."""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from exactly import failpoints
from exactly.client import Admin, Consumer

PREFIX = "dualwrite."


def _steps(pattern: str) -> tuple[str, ...]:
    """The dual-write steps of the fault-point catalogue whose name matches `pattern`, without
    the prefix and in the catalogue's order: the crash tests kill the application at each."""
    names = (p.removeprefix(PREFIX) for p in failpoints.CATALOGUE if p.startswith(PREFIX))
    return tuple(n for n in names if re.fullmatch(pattern, n))


STEPS = _steps(r"\d-.+")                # normal processing, the seed's eight steps
RECOVERY_STEPS = _steps(r"recovery-.+")  # DualWriter.recover
CONSUME_STEPS = _steps(r"consume-.+")    # atomic consumption


def crash(step: str, at: int | None = None) -> str:
    """The EXACTLY_FAILPOINTS value that kills the application after `step`, at its `at`-th time
    (the first without one)."""
    return f"{PREFIX}{step}=crash" + (f"@{at}" if at else "")


@dataclass(frozen=True)
class Database:
    """A test database: SQLite file or PostgreSQL DSN. `args` hands it to a worker process."""

    kind: str    # "sqlite" or "postgres"
    target: str  # the file, or the DSN

    def connect(self, timeout: float = 5.0) -> Any:
        if self.kind == "sqlite":
            return sqlite3.connect(self.target, timeout=timeout, isolation_level=None,
                                   check_same_thread=False)
        import psycopg

        return psycopg.connect(self.target, autocommit=True)

    @property
    def args(self) -> list[str]:
        return [f"--{self.kind}", self.target]

    @classmethod
    def from_args(cls, sqlite: str | None, postgres: str | None) -> Database:
        return cls("sqlite", sqlite) if sqlite else cls("postgres", str(postgres))

    def sql(self, text: str) -> str:
        return text.replace("?", "%s") if self.kind == "postgres" else text

    def query(self, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute(self.sql(text), params)
            return list(cur.fetchall())
        finally:
            conn.close()

    def execute(self, *statements: str) -> None:
        conn = self.connect()
        try:
            cur = conn.cursor()
            for s in statements:
                cur.execute(s)
        finally:
            conn.close()


ORDERS_DDL = ("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item VARCHAR(100) "
              "NOT NULL)")


def partitions_of(bootstrap: str, topic: str) -> list[tuple[str, int]]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        (description,) = admin.describe_topics([topic]).values()
    return [(topic, p.partition) for p in description.partitions]


def end_offsets(bootstrap: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"})
    try:
        c.assign(tps)
        c.seek_to_end(tps)
        return {tp: c.position(tp) for tp in tps}
    finally:
        c.close()


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every record of `topic` a read_committed consumer gets, reading up to the high watermark
    of each partition. A transaction left open would hold the LSO back: that fails here."""
    tps = partitions_of(bootstrap, topic)
    ends = end_offsets(bootstrap, tps)
    c = Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest"})
    got: list[Any] = []
    try:
        c.assign(tps)
        c.seek_to_beginning(tps)
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"read_committed of {topic} stuck below the high watermark "
                f"{ends} at {({tp: c.position(tp) for tp in tps})}: an open transaction holds "
                "the LSO back")
            got += c.poll(200)
    finally:
        c.close()
    return got


def event_ids(bootstrap: str, topic: str, timeout: float = 30.0) -> list[int]:
    """The order ids of the events (value b"order-<id>"), in the order read, duplicates kept."""
    return [int(r.value.decode().split("-", 1)[1])
            for r in read_committed(bootstrap, topic, timeout)]
