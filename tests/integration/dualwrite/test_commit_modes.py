"""Both commit modes of each database, and the conflicts they produce, end in a clean retry or
a clear error, never in a half-done pair.

SQLite: deferred transactions (the default: the write lock is taken at the first write, and
COMMIT waits for readers) in rollback-journal and WAL mode, and immediate ones (the write lock
at BEGIN); "database is locked" becomes DatabaseConflictError. PostgreSQL: read committed
(concurrent updates wait for each other) and serializable (a serialization failure, at a
statement or at COMMIT, becomes DatabaseConflictError); DualWriter.run retries them."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from exactly.dualwrite import DatabaseConflictError, DualWriter, Postgres, Transaction
from exactly.testing import EmbeddedBroker
from tests.helpers.dualwrite.helpers import ORDERS_DDL, Database, event_ids
from tests.support import create_topic


def writer_for(db: Database, bootstrap: str, txn_id: str, *, timeout: float = 5.0,
               isolation: str | None = None) -> tuple[Any, DualWriter]:
    conn = db.connect(timeout=timeout)
    conn.cursor().execute(ORDERS_DDL)
    writer = DualWriter(conn, {"bootstrap.servers": bootstrap, "transactional.id": txn_id},
                        isolation=isolation)
    writer.recover()
    return conn, writer


def insert_order(tx: Transaction, db: Database, topic: str, order_id: int) -> None:
    tx.db.execute(db.sql("INSERT INTO orders (id, item) VALUES (?, ?)"), (order_id, "x"))
    tx.send(topic, f"order-{order_id}", key=str(order_id))


def assert_consistent(db: Database, bootstrap: str, topic: str, expected: list[int]) -> None:
    orders = sorted(r[0] for r in db.query("SELECT id FROM orders"))
    events = event_ids(bootstrap, topic)
    assert not [i for i, n in Counter(events).items() if n > 1], events
    assert orders == sorted(events) == expected


def release_later(conn: Any, seconds: float = 0.6) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: conn.cursor().execute("COMMIT"))
    timer.start()
    return timer


# -- SQLite --------------------------------------------------------------------------------------

def test_sqlite_deferred_commit_blocked_by_a_reader(sqlite_db: Database,
                                                    dw_broker: EmbeddedBroker) -> None:
    """Rollback journal, deferred: COMMIT (step 7, the decision) needs every reader gone; a
    reader that stays past the busy timeout makes it fail: the log transaction is aborted and
    the error is a retriable conflict. run() retries until the reader leaves."""
    db, topic = sqlite_db, "sqlite-deferred"
    create_topic(dw_broker.bootstrap, topic)
    conn, writer = writer_for(db, dw_broker.bootstrap, "sqlite-deferred", timeout=0.2)
    assert writer.isolation == "deferred"
    reader = db.connect()
    reader.cursor().execute("BEGIN")
    reader.cursor().execute("SELECT count(*) FROM orders").fetchall()  # holds a SHARED lock
    with pytest.raises(DatabaseConflictError, match="locked") as raised, writer.transaction() as tx:
        insert_order(tx, db, topic, 1)
    assert raised.value.step == "7-commit-database-transaction" and raised.value.retriable
    timer = release_later(reader)
    writer.run(lambda tx: insert_order(tx, db, topic, 2), retries=20)
    timer.join()
    writer.close()
    conn.close()
    reader.close()
    assert_consistent(db, dw_broker.bootstrap, topic, [2])


def test_sqlite_immediate_begin_waits_for_the_write_lock(sqlite_db: Database,
                                                         dw_broker: EmbeddedBroker) -> None:
    db, topic = sqlite_db, "sqlite-immediate"
    create_topic(dw_broker.bootstrap, topic)
    conn, writer = writer_for(db, dw_broker.bootstrap, "sqlite-immediate", timeout=0.2,
                              isolation="immediate")
    other = db.connect()
    other.cursor().execute("BEGIN IMMEDIATE")  # holds the write lock
    with pytest.raises(DatabaseConflictError, match="locked") as raised, writer.transaction() as tx:
        insert_order(tx, db, topic, 1)
    assert raised.value.step == "1-begin-database-transaction"
    attempts = []
    timer = release_later(other)

    def work(tx: Transaction) -> None:
        attempts.append(1)
        insert_order(tx, db, topic, 2)

    writer.run(work, retries=20)
    timer.join()
    assert len(attempts) == 1  # BEGIN failed before the work ran: it runs once
    writer.close()
    conn.close()
    other.close()
    assert_consistent(db, dw_broker.bootstrap, topic, [2])


def test_sqlite_wal_stale_snapshot_is_retried(sqlite_db: Database,
                                              dw_broker: EmbeddedBroker) -> None:
    """WAL, deferred: the transaction read, another connection committed a write meanwhile, so
    its first write fails at once (SQLITE_BUSY_SNAPSHOT). Both sides roll back; run() retries
    the work, which the second time commits."""
    db, topic = sqlite_db, "sqlite-wal"
    create_topic(dw_broker.bootstrap, topic)
    conn, writer = writer_for(db, dw_broker.bootstrap, "sqlite-wal")
    conn.cursor().execute("PRAGMA journal_mode=WAL")
    other = db.connect()
    attempts: list[int] = []

    def work(tx: Transaction) -> None:
        attempts.append(1)
        tx.send(topic, "order-1", key="1")
        tx.db.execute("SELECT count(*) FROM orders").fetchall()
        if len(attempts) == 1:
            other.cursor().execute("INSERT INTO orders (id, item) VALUES (100, 'other')")
            # and no event for 100: the other writer is not a dual writer; removed below
        tx.db.execute("INSERT INTO orders (id, item) VALUES (1, 'x')")

    writer.run(work)
    assert len(attempts) == 2
    other.cursor().execute("DELETE FROM orders WHERE id = 100")
    writer.close()
    conn.close()
    other.close()
    assert_consistent(db, dw_broker.bootstrap, topic, [1])


# -- PostgreSQL ----------------------------------------------------------------------------------

def test_postgres_read_committed_concurrent_writers(pg_db: Database,
                                                    dw_broker: EmbeddedBroker) -> None:
    """Read committed: two writers update one row concurrently; the second waits for the
    first's commit, nothing fails, nothing is lost."""
    db, topic = pg_db, "pg-read-committed"
    create_topic(dw_broker.bootstrap, topic, partitions=2)
    db.execute(ORDERS_DDL, "CREATE TABLE counters (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
               "INSERT INTO counters VALUES (1, 0)")
    errors: list[BaseException] = []

    def run(base: int) -> None:
        try:
            conn, writer = writer_for(db, dw_broker.bootstrap, f"pg-rc-{base}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            return
        try:
            for i in range(base, base + 15):
                def work(tx: Transaction, i: int = i) -> None:
                    tx.db.execute("UPDATE counters SET n = n + 1 WHERE id = 1")
                    insert_order(tx, db, topic, i)
                writer.run(work, retries=0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            writer.close()
            conn.close()

    threads = [threading.Thread(target=run, args=(base,)) for base in (0, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert db.query("SELECT n FROM counters") == [(30,)]
    assert_consistent(db, dw_broker.bootstrap, topic, [*range(15), *range(100, 115)])


class CommitTogether(Postgres):
    """PostgreSQL, with every COMMIT of the armed writers held until all of them reached it."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier
        self.armed = False

    def commit(self, cursor: Any) -> None:
        if self.armed:
            self.barrier.wait()
        super().commit(cursor)


def test_postgres_serializable_write_skew_fails_one_at_commit_and_is_retried(
        pg_db: Database, dw_broker: EmbeddedBroker) -> None:
    """Serializable: two transactions each read both rows and update their own (write skew),
    and both reach COMMIT (step 7, the decision) before either commits. PostgreSQL commits one
    and fails the other's COMMIT with a serialization failure: that one's log transaction is
    aborted, the error is a retriable DatabaseConflictError, and a retry commits it."""
    db, topic = pg_db, "pg-serializable"
    create_topic(dw_broker.bootstrap, topic, partitions=2)
    db.execute(ORDERS_DDL, "CREATE TABLE duty (id INTEGER PRIMARY KEY, on_call INTEGER NOT NULL)",
               "INSERT INTO duty VALUES (1, 1), (2, 1)")
    barrier = threading.Barrier(2, timeout=30)
    failures: dict[int, BaseException] = {}
    writers: dict[int, tuple[Any, DualWriter, CommitTogether]] = {}
    for me in (1, 2):
        conn = db.connect()
        dialect = CommitTogether(barrier)
        writer = DualWriter(conn, {"bootstrap.servers": dw_broker.bootstrap,
                                   "transactional.id": f"pg-ser-{me}"},
                            isolation="serializable", dialect=dialect)
        writer.recover()
        dialect.armed = True
        writers[me] = (conn, writer, dialect)

    def work(me: int, tx: Transaction) -> None:
        tx.db.execute("SELECT sum(on_call) FROM duty").fetchall()
        tx.db.execute("UPDATE duty SET on_call = on_call + 10 WHERE id = %s", (me,))
        insert_order(tx, db, topic, me)

    def attempt(me: int) -> None:
        try:
            with writers[me][1].transaction() as tx:
                work(me, tx)
        except BaseException as exc:  # noqa: BLE001 - examined below
            failures[me] = exc

    threads = [threading.Thread(target=attempt, args=(me,)) for me in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(failures) == 1, f"expected one serialization failure, got {failures}"
    ((me, exc),) = failures.items()
    assert isinstance(exc, DatabaseConflictError), exc
    assert exc.step == "7-commit-database-transaction"
    assert exc.retriable and "serializ" in str(exc.__cause__), exc
    assert sorted(event_ids(dw_broker.bootstrap, topic)) == [3 - me]  # the other one only
    writers[me][2].armed = False
    writers[me][1].run(lambda tx: work(me, tx))
    for conn, writer, _ in writers.values():
        writer.close()
        conn.close()
    assert db.query("SELECT id, on_call FROM duty ORDER BY id") == [(1, 11), (2, 11)]
    assert_consistent(db, dw_broker.bootstrap, topic, [1, 2])
