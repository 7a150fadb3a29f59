"""Failures on either side end the pair cleanly, with a clear error: a database that refuses
the commit aborts the log transaction; a broker that cannot be reached at prepare time rolls
the database back; a broker lost after the database committed leaves the log transaction for
recovery to commit; a transaction whose state was never stored is aborted by recovery even
after the broker restarted, and the LSO moves on."""

from __future__ import annotations

import signal

import pytest

from exactly.client import Admin
from exactly.dualwrite import (
    DatabaseCommitError,
    DualWriter,
    InDoubtError,
    LogWriteError,
    WriterFencedError,
)
from exactly.testing import EmbeddedBroker
from tests.helpers.dualwrite.helpers import ORDERS_DDL, Database, crash, event_ids
from tests.integration.dualwrite.conftest import BROKER_SETTINGS, run_worker
from tests.support import create_topic

FAST = {"request.timeout.ms": 2000, "delivery.timeout.ms": 3000,
        "socket.connection.setup.timeout.ms": 1000, "retry.backoff.ms": 50}


def open_writer(db: Database, bootstrap: str, txn_id: str, **extra: object
                ) -> tuple[object, DualWriter]:
    conn = db.connect()
    conn.cursor().execute(ORDERS_DDL)
    return conn, DualWriter(conn, {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                   **extra})


def place(writer: DualWriter, db: Database, topic: str, order_id: int) -> None:
    with writer.transaction() as tx:
        tx.db.execute(db.sql("INSERT INTO orders (id, item) VALUES (?, ?)"), (order_id, "x"))
        tx.send(topic, f"order-{order_id}", key=str(order_id))


def orders_in(db: Database) -> list[int]:
    return sorted(r[0] for r in db.query("SELECT id FROM orders"))


def test_an_exception_in_the_block_rolls_both_back(db: Database, dw_broker: EmbeddedBroker
                                                   ) -> None:
    topic = f"block-{db.kind}"
    create_topic(dw_broker.bootstrap, topic)
    conn, writer = open_writer(db, dw_broker.bootstrap, f"block-{db.kind}")
    with writer:
        place(writer, db, topic, 1)
        with pytest.raises(ZeroDivisionError), writer.transaction() as tx:
            tx.send(topic, "order-2", key="2")
            tx.db.execute(db.sql("INSERT INTO orders (id, item) VALUES (?, ?)"), (2, "x"))
            tx.send(topic, "order-2", key="2").result(10)  # on the broker, uncommitted
            _ = 1 / 0
        # A unique violation in the block: the driver's own error, both sides rolled back.
        with pytest.raises(Exception, match="(?i)unique|duplicate") as raised:
            place(writer, db, topic, 1)
        assert not isinstance(raised.value, DatabaseCommitError)
        place(writer, db, topic, 3)
    conn.close()
    assert orders_in(db) == [1, 3]
    assert sorted(event_ids(dw_broker.bootstrap, topic)) == [1, 3]


def test_a_transaction_without_records_is_a_database_transaction(
        db: Database, dw_broker: EmbeddedBroker) -> None:
    conn, writer = open_writer(db, dw_broker.bootstrap, f"dbonly-{db.kind}")
    with writer:
        for i in range(3):
            with writer.transaction() as tx:
                tx.db.execute(db.sql("INSERT INTO orders (id, item) VALUES (?, ?)"), (i, "x"))
    conn.close()
    assert orders_in(db) == [0, 1, 2]


DEFERRED_FK = {
    "sqlite": ["PRAGMA foreign_keys = ON",
               ("CREATE TABLE order_lines (order_id INTEGER NOT NULL REFERENCES orders (id) "
               "DEFERRABLE INITIALLY DEFERRED, qty INTEGER)")],
    "postgres": [("CREATE TABLE order_lines (order_id INTEGER NOT NULL REFERENCES orders (id) "
                 "DEFERRABLE INITIALLY DEFERRED, qty INTEGER)")],
}


def test_a_database_commit_that_fails_aborts_the_log_transaction(
        db: Database, dw_broker: EmbeddedBroker) -> None:
    """A deferred foreign key is checked at COMMIT (step 7, after the log was prepared): the
    database refuses, the log transaction is aborted, the application gets DatabaseCommitError."""
    topic = f"fk-{db.kind}"
    create_topic(dw_broker.bootstrap, topic, partitions=2)
    conn, writer = open_writer(db, dw_broker.bootstrap, f"fk-{db.kind}")
    for statement in DEFERRED_FK[db.kind]:
        conn.cursor().execute(statement)
    with writer:
        place(writer, db, topic, 1)
        with (pytest.raises(DatabaseCommitError, match="(?s)refused to commit.*log transaction "
                                                       "was aborted") as raised,
              writer.transaction() as tx):
            tx.send(topic, "order-2", key="2")
            tx.db.execute(db.sql("INSERT INTO order_lines (order_id, qty) VALUES (?, ?)"),
                          (999, 1))  # no order 999: the constraint fails at COMMIT
            tx.db.execute(db.sql("INSERT INTO orders (id, item) VALUES (?, ?)"), (2, "x"))
        assert raised.value.step == "7-commit-database-transaction"
        assert not raised.value.retriable
        place(writer, db, topic, 3)  # the writer goes on
    conn.close()
    assert orders_in(db) == [1, 3]
    assert sorted(event_ids(dw_broker.bootstrap, topic)) == [1, 3]


def test_a_failed_statement_swallowed_in_the_block_never_commits(
        pg_db: Database, dw_broker: EmbeddedBroker) -> None:
    """A statement failed and the application went on: PostgreSQL refuses everything after it
    (and would answer COMMIT with ROLLBACK, not an error); the writer aborts the log side."""
    db = pg_db
    topic = "swallowed"
    create_topic(dw_broker.bootstrap, topic)
    conn, writer = open_writer(db, dw_broker.bootstrap, "swallowed")
    with writer:
        with (pytest.raises(DatabaseCommitError, match="(?s)transaction is aborted.*both"),
              writer.transaction() as tx):
            tx.send(topic, "order-1", key="1")
            tx.db.execute("INSERT INTO orders (id, item) VALUES (1, 'x')")
            try:
                tx.db.execute("INSERT INTO orders (id, item) VALUES (1, 'again')")
            except Exception:  # noqa: BLE001, S110 - the application's mistake under test
                pass
        place(writer, db, topic, 2)
    conn.close()
    assert orders_in(db) == [2]
    assert event_ids(dw_broker.bootstrap, topic) == [2]


def test_an_unreachable_broker_at_prepare_rolls_the_database_back(
        db: Database, broker_factory) -> None:
    broker = broker_factory(settings=BROKER_SETTINGS)
    topic = "unreachable"
    create_topic(broker.bootstrap, topic)
    conn, writer = open_writer(db, broker.bootstrap, f"unreachable-{db.kind}", **FAST)
    with writer:
        place(writer, db, topic, 1)
        broker.kill()
        with pytest.raises(LogWriteError, match="(?s)preparing the log transaction.*database "
                                                "transaction was rolled back") as raised:
            place(writer, db, topic, 2)
        assert raised.value.step == "4-prepare-transaction"
        assert orders_in(db) == [1]
        broker.start()
        place(writer, db, topic, 3)  # recovers first: the abort could not reach the broker
    conn.close()
    assert orders_in(db) == [1, 3]
    assert sorted(event_ids(broker.bootstrap, topic)) == [1, 3]


def test_a_broker_lost_after_the_database_committed_is_in_doubt_until_recovery(
        db: Database, broker_factory) -> None:
    """The database committed (the decision); the log commit (step 8) cannot reach the broker:
    InDoubtError(db_committed=True), and recovery commits the prepared log transaction."""
    broker = broker_factory(settings=BROKER_SETTINGS)
    topic = "lost-at-commit"
    create_topic(broker.bootstrap, topic)
    conn, writer = open_writer(db, broker.bootstrap, f"lost-{db.kind}", **FAST)
    with writer:
        place(writer, db, topic, 1)
        with pytest.raises(InDoubtError, match="do not redo") as raised, writer.transaction() as tx:
            tx.db.execute(db.sql("INSERT INTO orders (id, item) VALUES (?, ?)"), (2, "x"))
            tx.send(topic, "order-2", key="2").result(10)  # written, not committed
            broker.kill()
        assert raised.value.db_committed is True
        assert raised.value.step == "8-commit-transaction"
        broker.start()
        assert writer.recover().outcome == "commit"
        place(writer, db, topic, 3)
    conn.close()
    assert orders_in(db) == [1, 2, 3]
    assert sorted(event_ids(broker.bootstrap, topic)) == [1, 2, 3]


def test_a_state_never_stored_is_aborted_after_a_broker_restart(db: Database, broker_factory
                                                                ) -> None:
    """The application dies after preparing (step 4), before its state reached the database;
    the broker is killed and restarted on its data. The 2PC transaction survives both (it never
    times out) and holds the LSO back, until recovery aborts it; then the LSO moves on."""
    broker = broker_factory(settings=BROKER_SETTINGS)
    topic, txn_id = "never-stored", f"never-stored-{db.kind}"
    create_topic(broker.bootstrap, topic, partitions=2)
    args = [*db.args, "--bootstrap", broker.bootstrap, "--transactional-id", txn_id,
            "--topic", topic]
    crashed = run_worker("worker", *args, "--orders", "0:3",
                         fault=crash("4-prepare-transaction", 2))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    broker.restart()  # kill -9 and start again on the same data dir
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        (open_txn,) = admin.describe_transactions([txn_id]).values()
    assert open_txn.state == "Ongoing", open_txn
    with pytest.raises(AssertionError, match="LSO"):
        event_ids(broker.bootstrap, topic, timeout=3)  # read_committed cannot pass it
    again = run_worker("worker", *args, "--orders", "10:1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "recovered abort" in again.stdout
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        (ended,) = admin.describe_transactions([txn_id]).values()
    assert ended.state in ("CompleteAbort", "CompleteCommit", "Empty"), ended
    assert orders_in(db) == [0, 10]
    assert sorted(event_ids(broker.bootstrap, topic)) == [0, 10]  # the LSO moved on


def test_a_writer_whose_transactional_id_was_recovered_by_another_is_fenced(
        pg_db: Database, dw_broker: EmbeddedBroker) -> None:
    """Two instances with one transactional.id: the newer one's recovery takes the state row
    over, so the older one cannot commit its database transaction behind the recovery's back
    (the log side fences it too: recovery aborted its prepared transaction)."""
    db = pg_db
    topic = "fenced"
    create_topic(dw_broker.bootstrap, topic)
    conn_a, old = open_writer(db, dw_broker.bootstrap, "fenced")
    conn_b, new = open_writer(db, dw_broker.bootstrap, "fenced")
    old.recover()
    place(old, db, topic, 1)
    with (pytest.raises(WriterFencedError, match="belongs to another DualWriter"),
          old.transaction() as tx):
        tx.db.execute("INSERT INTO orders (id, item) VALUES (2, 'x')")
        tx.send(topic, "order-2", key="2").result(10)
        assert new.recover().outcome == "abort"  # the newer instance starts meanwhile
    with pytest.raises(WriterFencedError):
        place(old, db, topic, 3)
    place(new, db, topic, 4)
    old.close()
    new.close()
    conn_a.close()
    conn_b.close()
    assert orders_in(db) == [1, 4]
    assert sorted(event_ids(dw_broker.bootstrap, topic)) == [1, 4]


def test_a_connection_lost_at_commit_is_settled_by_recovery_on_a_new_one(
        db: Database, dw_broker: EmbeddedBroker) -> None:
    """COMMIT went through but the connection broke before the answer: the writer cannot know,
    raises InDoubtError(db_committed=None) and leaves the log transaction prepared; recover()
    on a new connection reads the committed state and commits the log transaction."""
    from exactly.dualwrite import Postgres, SQLite

    base = SQLite if db.kind == "sqlite" else Postgres

    class LosesTheAnswer(base):  # type: ignore[misc, valid-type]
        lose = False

        def commit(self, cursor: object) -> None:
            super().commit(cursor)
            if self.lose:
                cursor.connection.close()  # type: ignore[attr-defined]
                raise ConnectionError("server closed the connection unexpectedly")

    topic = f"lost-answer-{db.kind}"
    create_topic(dw_broker.bootstrap, topic)
    conn = db.connect()
    conn.cursor().execute(ORDERS_DDL)
    dialect = LosesTheAnswer()
    writer = DualWriter(conn, {"bootstrap.servers": dw_broker.bootstrap,
                               "transactional.id": f"lost-answer-{db.kind}"}, dialect=dialect)
    writer.recover()
    place(writer, db, topic, 1)
    dialect.lose = True
    with pytest.raises(InDoubtError, match="new connection") as raised:
        place(writer, db, topic, 2)
    assert raised.value.db_committed is None
    dialect.lose = False
    assert writer.recover(connection=db.connect()).outcome == "commit"
    place(writer, db, topic, 3)
    writer.close()
    writer.connection.close()
    assert orders_in(db) == [1, 2, 3]
    assert sorted(event_ids(dw_broker.bootstrap, topic)) == [1, 2, 3]
