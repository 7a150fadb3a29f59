"""DualWriter: a database transaction and a log transaction that commit together (KIP-939's
dual write recipe, seed 000).

    writer = DualWriter(sqlite3.connect("orders.db"),
                        {"bootstrap.servers": "localhost:9092", "transactional.id": "orders-1"})
    with writer.transaction() as tx:
        tx.db.execute("INSERT INTO orders (id, item) VALUES (?, ?)", (42, "book"))
        tx.send("order-events", b"order 42 placed", key=b"42")
    # both committed, or neither (an exception in the block rolls both back)

A block that only acknowledges share records in the log transaction (KIP-1289, seed 004's use
case 4.6: `consumer.acknowledge_transactionally(writer.session, offsets)`, no tx.send) is a dual
write like any other: the acknowledgements commit with the database transaction, through the
same prepare, state and recovery steps. Only a block that left nothing in the log transaction
(no record, no acknowledgement) is database-only.

The seed's normal-processing recipe, as the writer runs it:

    1 begin the database transaction          (entering the block)
    2 begin_transaction in the log            (entering the block)
    3 send messages                           (tx.send, in the block)
    5 update data                             (tx.db, in the block: before 4, which is allowed,
                                               nothing is visible before 7)
    4 prepare_transaction -> PreparedTxnState (leaving the block)
    6 store the state in kafka_transaction_state, in the database transaction
    7 commit the database transaction         <- the decision
    8 commit the log transaction

Recovery (writer.recover(), run before the first transaction and after any failure that left
the log undecided): read the stored state, `initialize(keep_prepared_txn=True)`, and
`complete_transaction(stored)`: the prepared log transaction commits if its state is the one
the database committed, and aborts otherwise.

One DualWriter per transactional.id at a time, each with its own connection; not thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from exactly import failpoints
from exactly.client import (
    IllegalStateError,
    PreparedTxnState,
    Producer,
    State,
    TransactionSession,
    UnsupportedVersionError,
)
from exactly.client.batch import FutureRecordMetadata
from exactly.dualwrite import store
from exactly.dualwrite.errors import (
    DatabaseCommitError,
    DatabaseConflictError,
    DualWriteError,
    InDoubtError,
    LogWriteError,
    TransactionAborted,
    WriterFencedError,
)
from exactly.dualwrite.store import Dialect

log = logging.getLogger("exactly.dualwrite")
T = TypeVar("T")

# Keys that belong to the session, not to the producer bound to it.
_SESSION_KEYS = ("transactional.id", "transaction.two.phase.commit.enable",
                 "transaction.timeout.ms")


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What recover() found and did. outcome: "commit", "abort" or "none" (nothing prepared)."""

    stored_state: PreparedTxnState
    prepared_state: PreparedTxnState
    outcome: str


class Transaction:
    """The open pair: `db` is a cursor in the database transaction, `send` writes to the log
    transaction. Made by DualWriter.transaction()."""

    def __init__(self, writer: DualWriter, cursor: Any) -> None:
        self.writer = writer
        self.db = cursor
        self.futures: list[FutureRecordMetadata] = []

    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             headers: Any = None, partition: int | None = None) -> FutureRecordMetadata:
        """Write a record in the log transaction (step 3). The returned future resolves once
        the broker has the record (result() waits for it, e.g. to store its offset)."""
        producer = self.writer._producer
        assert producer is not None
        future = producer.send(topic, value, key=key, partition=partition, headers=headers)
        self.futures.append(future)
        failpoints.hit("dualwrite.3-send")
        return future


class DualWriter:
    """A DB-API 2.0 connection (sqlite3 or psycopg) and a 2PC log session that commit together.

    config: Kafka client config with bootstrap.servers and transactional.id (one stable id per
    writer instance, e.g. "order-service-1"); transaction.two.phase.commit.enable is set.
    isolation: the database's commit mode, SQLite "deferred" (default) / "immediate" /
    "exclusive", PostgreSQL "read committed" (default) / "repeatable read" / "serializable".
    The writer takes over the connection's transactions (autocommit mode, explicit BEGIN).
    """

    def __init__(self, connection: Any, config: Mapping[str, Any], *, isolation: str | None = None,
                 dialect: Dialect | None = None, writer_id: str | None = None) -> None:
        self.connection = connection
        self.dialect = dialect if dialect is not None else store.detect(connection)
        self.isolation = self.dialect.check_isolation(isolation)
        cfg = dict(config)
        txn_id = cfg.get("transactional.id")
        if not txn_id:
            raise ValueError("DualWriter needs transactional.id in its config: one stable id per "
                             "writer instance, e.g. 'order-service-1'")
        self.transactional_id = str(txn_id)
        self.config = {**cfg, "transaction.two.phase.commit.enable": True}
        self._producer_config = {k: v for k, v in cfg.items() if k not in _SESSION_KEYS}
        self.writer_id = writer_id or uuid.uuid4().hex
        self.dialect.prepare_connection(connection)
        self.session: TransactionSession | None = None
        self._producer: Producer | None = None
        self._needs_recovery = True
        self._open = False
        self._fenced = False
        self.last_recovery: RecoveryResult | None = None

    # -- recovery -------------------------------------------------------------------------------

    def recover(self, connection: Any = None) -> RecoveryResult:
        """The seed's recovery recipe: read the stored PreparedTxnState, then complete the log
        transaction with it (commit if it is the prepared one, abort otherwise). Leaves the
        writer ready, with a new session that fenced any older one of the transactional id.
        `connection` replaces a database connection that was lost."""
        if self._open:
            raise IllegalStateError("recover() inside an open transaction")
        if connection is not None:
            self.dialect.prepare_connection(connection)
            self.connection = connection
        self._close_log()
        store.ensure_tables(self.connection, self.dialect)
        stored = self._retry_conflicts(lambda: store.claim_state(
            self.connection, self.dialect, self.transactional_id, self.writer_id))
        failpoints.hit("dualwrite.recovery-1-read-state")
        session = TransactionSession(self.config)
        try:
            try:
                session.initialize(keep_prepared_txn=True)
            except UnsupportedVersionError as exc:
                raise UnsupportedVersionError(
                    "exactly.dualwrite needs KIP-939's two-phase commit: a log transaction "
                    "prepared before a crash must survive the restart (InitProducerId v6 with "
                    "KeepPreparedTxn), or recovery could not commit what the database "
                    f"committed; the broker lacks it ({exc}). Apache Kafka up to 4.4 does not "
                    "offer it; Exactly's broker does", exc.code) from exc
            failpoints.hit("dualwrite.recovery-2-keep-prepared-txn")
            prepared = session.prepared_state
            outcome = "none"
            if session.state is State.PREPARED:
                outcome = "commit" if prepared == stored else "abort"
                session.complete_transaction(stored)
            failpoints.hit("dualwrite.recovery-2-complete-transaction")
            if not session.uses_transaction_v2:
                raise UnsupportedVersionError(
                    "exactly.dualwrite needs transaction version 2 (KIP-890): each transaction "
                    "must have its own producer epoch, or a stored PreparedTxnState could match "
                    "the next transaction; the broker does not offer it (transaction.version >= 2, "
                    "EndTxn v5, Produce v12)")
        except BaseException:
            with contextlib.suppress(Exception):
                session.close()
            raise
        self.session = session
        self._producer = Producer(self._producer_config, session=session)
        self._needs_recovery = False
        self._fenced = False
        self.last_recovery = RecoveryResult(stored, prepared, outcome)
        log.info("event=dualwrite_recovered transactional_id=%r stored=%r prepared=%r outcome=%s",
                 self.transactional_id, str(stored), str(prepared), outcome)
        return self.last_recovery

    def _retry_conflicts(self, fn: Callable[[], T], attempts: int = 5) -> T:
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as exc:
                if not self.dialect.is_conflict(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 * 2 ** attempt)
        raise AssertionError("unreachable")

    # -- normal processing ----------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One dual write: `with writer.transaction() as tx:` (see the module doc). Leaving the
        block commits both; an exception in it rolls both back and is re-raised (a database
        conflict as DatabaseConflictError). Failures of the recipe raise a DualWriteError."""
        if self._open:
            raise IllegalStateError("a DualWriter runs one transaction at a time")
        if self._fenced:
            raise WriterFencedError(f"transactional id {self.transactional_id!r} was taken over "
                                    "by another DualWriter; this one cannot go on")
        if self._needs_recovery:
            self.recover()
        session, dialect = self.session, self.dialect
        assert session is not None
        self._open = True
        cursor = self.connection.cursor()
        try:
            try:
                cursor.execute(dialect.begin_sql(self.isolation))
            except Exception as exc:
                dialect.rollback(self.connection, cursor)
                if dialect.is_conflict(exc):
                    raise DatabaseConflictError(f"could not begin the database transaction "
                                                f"({exc}); nothing was written: run it again",
                                                step="1-begin-database-transaction") from exc
                raise
            failpoints.hit("dualwrite.1-begin-database-transaction")
            try:
                session.begin_transaction()
            except BaseException:
                dialect.rollback(self.connection, cursor)
                raise
            failpoints.hit("dualwrite.2-begin-transaction")
            tx = Transaction(self, cursor)
            try:
                yield tx
            except BaseException as exc:
                self._rollback_both(cursor, "the block raised")
                if isinstance(exc, Exception) and dialect.is_conflict(exc):
                    raise DatabaseConflictError(
                        f"database conflict in the transaction ({exc}); both the database and "
                        "the log transaction were rolled back: run it again",
                        step="5-update-data") from exc
                raise
            failpoints.hit("dualwrite.5-update-data")
            self._finish(cursor, tx)
        finally:
            self._open = False
            with contextlib.suppress(Exception):
                cursor.close()

    def run(self, work: Callable[[Transaction], T], *, retries: int = 5,
            backoff: float = 0.02) -> T:
        """`work(tx)` in a dual write, run again (up to `retries` times, with jittered backoff)
        when the database reports a conflict (DatabaseConflictError). Returns what work returns."""
        attempt = 0
        while True:
            try:
                with self.transaction() as tx:
                    return work(tx)
            except DualWriteError as exc:
                if not exc.retriable or attempt >= retries:
                    raise
                log.info("event=dualwrite_retry transactional_id=%r attempt=%d step=%s error=%s",
                         self.transactional_id, attempt + 1, exc.step, exc)
            attempt += 1
            time.sleep(backoff * 2 ** min(attempt, 8) * (0.5 + random.random()))

    def _finish(self, cursor: Any, tx: Transaction) -> None:
        session, dialect = self.session, self.dialect
        assert session is not None
        if not tx.futures and not session.share_acknowledgements:
            # Nothing reached the log: a database-only transaction. An empty log transaction
            # would keep the session's epoch (no EndTxn reached the broker) and so its state
            # could equal the next transaction's; there is nothing to prepare anyway. A block
            # that staged share acknowledgements (KIP-1289) but sent no record is not one: its
            # transaction is open at the coordinator, aborting it would release the records
            # for redelivery, so it is prepared and committed with the database below.
            try:
                dialect.commit(cursor)
            except Exception as exc:
                self._rollback_both(cursor, "database commit failed")
                raise self._commit_error(exc) from exc
            session.abort_transaction()  # client-side only: nothing reached the coordinator
            return
        # 4: prepare. A write the broker refused makes the session abortable, and prepare raises.
        try:
            state = session.prepare_transaction()
            failed = [f.exception(0) for f in tx.futures if not f.done() or f.exception(0)]
            if failed:
                raise LogWriteError(f"{len(failed)} record(s) were not written: {failed[0]}",
                                    step="4-prepare-transaction")
        except Exception as exc:
            self._rollback_both(cursor, "prepare failed")
            if isinstance(exc, LogWriteError):
                raise
            raise LogWriteError(
                f"preparing the log transaction of {self.transactional_id!r} failed ({exc}); the "
                "database transaction was rolled back and the log transaction aborted",
                step="4-prepare-transaction") from exc
        failpoints.hit("dualwrite.4-prepare-transaction")
        # 6: the state goes into the database transaction that carries the data.
        try:
            mine = store.write_state(cursor, dialect, self.transactional_id, self.writer_id, state)
        except Exception as exc:
            self._rollback_both(cursor, "storing the state failed")
            if dialect.is_conflict(exc):
                raise DatabaseConflictError(f"database conflict while storing the transaction "
                                            f"state ({exc}); both sides were rolled back: run "
                                            "it again", step="6-update-transaction-state") from exc
            raise DatabaseCommitError(f"storing the transaction state failed ({exc}); both the "
                                      "database and the log transaction were rolled back",
                                      step="6-update-transaction-state") from exc
        if not mine:
            self._rollback_both(cursor, "fenced")
            self._fenced = True
            raise WriterFencedError(
                f"the {store.STATE_TABLE} row of {self.transactional_id!r} belongs to another "
                "DualWriter (it recovered the transactional id after this one): this "
                "transaction was rolled back; close this writer", step="6-update-transaction-state")
        failpoints.hit("dualwrite.6-update-transaction-state")
        # 7: the decision.
        try:
            dialect.commit(cursor)
        except Exception as exc:  # noqa: BLE001 - the database says what happened, below
            self._after_failed_commit(cursor, state, exc)
            return
        failpoints.hit("dualwrite.7-commit-database-transaction")
        # 8: the database committed, so must the log.
        self._commit_log("8-commit-transaction")
        failpoints.hit("dualwrite.8-commit-transaction")

    def _commit_log(self, step: str) -> None:
        session = self.session
        assert session is not None
        try:
            session.commit_transaction()
        except Exception as exc:
            self._needs_recovery = True
            raise InDoubtError(
                f"the database committed but committing the log transaction of "
                f"{self.transactional_id!r} failed ({exc}); it stays prepared and recover() "
                "(run before the next transaction) commits it: do not redo this work",
                step=step, db_committed=True) from exc

    def _after_failed_commit(self, cursor: Any, state: PreparedTxnState, exc: Exception) -> None:
        """COMMIT raised. Whether it committed is what the database says: read the state back
        (the seed's recovery recipe) and complete the log transaction with it."""
        step = "7-commit-database-transaction"
        with contextlib.suppress(Exception):
            self.dialect.rollback(self.connection, cursor)
        try:
            if self.dialect.in_transaction(self.connection):
                raise DualWriteError("the connection is still in the failed transaction")
            stored = store.read_state(self.connection, self.dialect, self.transactional_id)
        except Exception as read_exc:  # noqa: BLE001 - raised as InDoubtError
            self._needs_recovery = True
            raise InDoubtError(
                f"committing the database transaction failed ({exc}) and the stored state could "
                f"not be read back ({read_exc}); the log transaction stays prepared until "
                "recover() (given a new connection if this one is lost) makes it agree with the "
                "database", step=step) from exc
        if stored == state:  # the commit happened after all; the error came later
            log.warning("event=dualwrite_commit_error_but_committed transactional_id=%r error=%s",
                        self.transactional_id, exc)
            self._commit_log(step)
            return
        self._abort_log("database commit failed")
        raise self._commit_error(exc) from exc

    def _commit_error(self, exc: Exception) -> TransactionAborted:
        step = "7-commit-database-transaction"
        if self.dialect.is_conflict(exc):
            return DatabaseConflictError(f"the database could not commit ({exc}): a conflict; the "
                                         "log transaction was aborted: run it again", step=step)
        return DatabaseCommitError(f"the database refused to commit ({exc}); the log transaction "
                                   "was aborted", step=step)

    def _rollback_both(self, cursor: Any, why: str) -> None:
        with contextlib.suppress(Exception):
            self.dialect.rollback(self.connection, cursor)
        self._abort_log(why)

    def _abort_log(self, why: str) -> None:
        """Abort the open log transaction; if that cannot be done now (broker unreachable,
        session fenced), recover() finishes it before the next transaction."""
        session = self.session
        if session is None or session.state is State.READY:
            return
        try:
            session.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - recovery finishes the abort
            self._needs_recovery = True
            log.warning("event=dualwrite_abort_deferred transactional_id=%r why=%r error=%s",
                        self.transactional_id, why, exc)
        else:
            log.info("event=dualwrite_aborted transactional_id=%r why=%r",
                     self.transactional_id, why)

    # -- lifecycle ------------------------------------------------------------------------------

    def _close_log(self) -> None:
        producer, session = self._producer, self.session
        self._producer = self.session = None
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close(timeout=5)
        if session is not None:
            with contextlib.suppress(Exception):
                session.close()

    def close(self) -> None:
        """Close the log session (a prepared transaction stays prepared for recover()). The
        database connection is the caller's to close."""
        self._close_log()

    def __enter__(self) -> Self:
        if self._needs_recovery:
            self.recover()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
