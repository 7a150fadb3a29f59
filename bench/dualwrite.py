"""What atomicity costs a dual write, side by side in one run, on SQLite and PostgreSQL.

The same order loop, one order per iteration (an INSERT of the order and a 100-byte event):

    dual write       DualWriter: begin, send, insert, prepare, store the state, commit the
                     database, commit the log (KIP-939's recipe; a 2PC log transaction)
    plain, awaited   a database transaction (insert, commit) and a plain log send with an
                     idempotent producer (acks=all), flushed: waiting for its acknowledgement
    plain, async     the same, without waiting: the usual non-atomic dual write, flushed at the
                     end of the run

Each is timed for --seconds (best of two runs, interleaved). "cost" is plain / dual write: how
many times more orders per second the non-atomic loop manages. Exactly runs with its default
`log.flush.policy=fsync`; SQLite in WAL mode with synchronous=FULL; PostgreSQL a private server
(initdb, like the tests) with its defaults (fsync, synchronous_commit on).

    .venv/bin/python bench/dualwrite.py [--seconds 4] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from exactly.client import Producer
from exactly.dualwrite import DualWriter
from exactly.testing import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.rigs
from tests.rigs.postgres import PrivatePostgres

PAYLOAD = b"x" * 100
DDL = "CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, item VARCHAR(100) NOT NULL)"


class Ids:
    def __init__(self) -> None:
        self.next = 0

    def take(self) -> int:
        self.next += 1
        return self.next


def timed(seconds: float, one: Callable[[], None], finish: Callable[[], None] = lambda: None
          ) -> float:
    one()  # warm-up (metadata, producer id)
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        one()
        done += 1
    finish()
    return done / (time.perf_counter() - started)


def dual(conn: Any, param: str, bootstrap: str, topic: str, ids: Ids, seconds: float) -> float:
    writer = DualWriter(conn, {"bootstrap.servers": bootstrap,
                               "transactional.id": f"bench-{time.monotonic_ns()}"})
    writer.recover()
    sql = f"INSERT INTO orders (id, item) VALUES ({param}, {param})"

    def one() -> None:
        order = ids.take()
        with writer.transaction() as tx:
            tx.send(topic, PAYLOAD, key=str(order))
            tx.db.execute(sql, (order, "book"))

    try:
        return timed(seconds, one)
    finally:
        writer.close()


def plain(conn: Any, param: str, bootstrap: str, topic: str, ids: Ids, seconds: float, *,
          await_ack: bool) -> float:
    # The connection is in autocommit mode (DualWriter put it there): BEGIN/COMMIT as it does.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all"})
    sql = f"INSERT INTO orders (id, item) VALUES ({param}, {param})"
    cursor = conn.cursor()

    def one() -> None:
        order = ids.take()
        cursor.execute("BEGIN")
        cursor.execute(sql, (order, "book"))
        cursor.execute("COMMIT")
        producer.send(topic, PAYLOAD, key=str(order))
        if await_ack:
            producer.flush()  # send now (no linger.ms wait) and wait for the acknowledgement

    try:
        return timed(seconds, one, producer.flush)
    finally:
        producer.close()


def measure(name: str, conn: Any, param: str, bootstrap: str, seconds: float, runs: int
            ) -> dict[str, float]:
    conn.cursor().execute(DDL)
    ids = Ids()
    best = {"dual": 0.0, "awaited": 0.0, "async": 0.0}
    for _ in range(runs):
        best["dual"] = max(best["dual"], dual(conn, param, bootstrap, f"{name}-dual", ids,
                                              seconds))
        best["awaited"] = max(best["awaited"], plain(conn, param, bootstrap, f"{name}-plain",
                                                     ids, seconds, await_ack=True))
        best["async"] = max(best["async"], plain(conn, param, bootstrap, f"{name}-plain", ids,
                                                 seconds, await_ack=False))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="per run (default 4)")
    parser.add_argument("--quick", action="store_true", help="1 s runs, one each")
    args = parser.parse_args()
    seconds, runs = (1.0, 1) if args.quick else (args.seconds, 2)
    results: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(EmbeddedBroker())
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        lite = sqlite3.connect(tmp / "orders.db", isolation_level=None)
        lite.execute("PRAGMA journal_mode=WAL")
        lite.execute("PRAGMA synchronous=FULL")
        stack.callback(lite.close)
        results["SQLite"] = measure("sqlite", lite, "?", broker.bootstrap, seconds, runs)
        pg = stack.enter_context(PrivatePostgres())
        pg_conn = psycopg.connect(pg.create_database("bench"), autocommit=True)
        stack.callback(pg_conn.close)
        results["PostgreSQL"] = measure("pg", pg_conn, "%s", broker.bootstrap, seconds, runs)

    print(f"\none order per transaction, {seconds:g} s per run, best of {runs}; Exactly with "
          "log.flush.policy=fsync\n")
    print(f"{'database':<11} {'dual write/s':>13} {'plain awaited/s':>16} {'cost':>6} "
          f"{'plain async/s':>14} {'cost':>6}")
    for name, r in results.items():
        print(f"{name:<11} {r['dual']:>13,.0f} {r['awaited']:>16,.0f} "
              f"{r['awaited'] / r['dual']:>5.2f}x {r['async']:>14,.0f} "
              f"{r['async'] / r['dual']:>5.2f}x")


if __name__ == "__main__":
    main()
