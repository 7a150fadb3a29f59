"""The database side: the state tables and what differs between SQLite and PostgreSQL.

KIP-939's prerequisite is a mapping transactional_id -> prepared transaction state, here

    kafka_transaction_state(transactional_id PRIMARY KEY, prepared_transaction_state, writer_id)

`writer_id` names the DualWriter instance that last recovered the transactional id: a writer
updates the state only where the row is still its own, so a stale instance (a paused process
whose successor already recovered) cannot commit a database transaction behind the recovery's
back. Atomic consumption keeps `kafka_consumer_offsets(group_id, topic, partition_id,
next_offset)`.

The writer owns the connection's transactions: it puts the connection in autocommit mode and
issues BEGIN / COMMIT / ROLLBACK itself, so that the commit mode is explicit:

    SQLite      deferred (default), immediate, exclusive   -> BEGIN DEFERRED|IMMEDIATE|EXCLUSIVE
    PostgreSQL  read committed (default), repeatable read, serializable
                                                           -> BEGIN ISOLATION LEVEL ...

Parameter styles differ (sqlite3: qmark `?`; psycopg: format `%s`): `Dialect.param` is the
placeholder, and `Dialect.sql()` turns this module's `?` into it.
"""

from __future__ import annotations

import logging
from typing import Any

from exactly.client import PreparedTxnState

log = logging.getLogger("exactly.dualwrite")

STATE_TABLE = "kafka_transaction_state"
OFFSETS_TABLE = "kafka_consumer_offsets"

_STATE_DDL = f"""CREATE TABLE IF NOT EXISTS {STATE_TABLE} (
    transactional_id VARCHAR(255) NOT NULL PRIMARY KEY,
    prepared_transaction_state VARCHAR(255) NOT NULL,
    writer_id VARCHAR(64) NOT NULL
)"""
_OFFSETS_DDL = f"""CREATE TABLE IF NOT EXISTS {OFFSETS_TABLE} (
    group_id VARCHAR(255) NOT NULL,
    topic VARCHAR(255) NOT NULL,
    partition_id INTEGER NOT NULL,
    next_offset BIGINT NOT NULL,
    PRIMARY KEY (group_id, topic, partition_id)
)"""


class Dialect:
    """What the dual-write code needs to know of a database and its DB-API driver."""

    name = "generic"
    param = "?"
    isolations: tuple[str, ...] = ()
    # How recovery reads the state row so that a writer in the middle of updating it is waited
    # for (the row stays locked until recovery's database transaction ends).
    locking_read = ""
    recovery_begin = "BEGIN"

    def sql(self, text: str) -> str:
        return text.replace("?", self.param) if self.param != "?" else text

    def check_isolation(self, isolation: str | None) -> str:
        value = (isolation or self.isolations[0]).strip().lower()
        if value not in self.isolations:
            raise ValueError(f"{self.name}: unknown commit mode {isolation!r}; use one of "
                             f"{', '.join(self.isolations)}")
        return value

    def prepare_connection(self, conn: Any) -> None:
        raise NotImplementedError

    def begin_sql(self, isolation: str) -> str:
        raise NotImplementedError

    def is_conflict(self, exc: BaseException) -> bool:
        """A lock or serialization conflict: the whole transaction may succeed if run again."""
        return False

    def in_transaction(self, conn: Any) -> bool:
        raise NotImplementedError

    def commit(self, cursor: Any) -> None:
        """COMMIT; raises if the database did not commit."""
        cursor.execute("COMMIT")

    def rollback(self, conn: Any, cursor: Any) -> None:
        if self.in_transaction(conn):
            cursor.execute("ROLLBACK")


class SQLite(Dialect):
    name = "sqlite"
    param = "?"
    isolations = ("deferred", "immediate", "exclusive")
    recovery_begin = "BEGIN IMMEDIATE"  # the write lock: no writer is half-way meanwhile

    def prepare_connection(self, conn: Any) -> None:
        if conn.in_transaction:
            raise ValueError("the sqlite3 connection has an open transaction: commit or roll "
                             "it back before handing the connection to exactly.dualwrite")
        conn.isolation_level = None  # no implicit BEGIN: the writer says BEGIN itself

    def begin_sql(self, isolation: str) -> str:
        return f"BEGIN {isolation.upper()}"

    def is_conflict(self, exc: BaseException) -> bool:
        import sqlite3

        if not isinstance(exc, sqlite3.OperationalError):
            return False
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes)
        text = str(exc).lower()
        return "locked" in text or "busy" in text

    def in_transaction(self, conn: Any) -> bool:
        return bool(conn.in_transaction)


class Postgres(Dialect):
    name = "postgresql"
    param = "%s"
    isolations = ("read committed", "repeatable read", "serializable")
    locking_read = " FOR UPDATE"
    recovery_begin = "BEGIN ISOLATION LEVEL READ COMMITTED"

    # 40001 serialization_failure, 40P01 deadlock_detected, 55P03 lock_not_available
    CONFLICTS = frozenset({"40001", "40P01", "55P03"})

    def prepare_connection(self, conn: Any) -> None:
        if self.in_transaction(conn):
            raise ValueError("the PostgreSQL connection has an open transaction: commit or roll "
                             "it back before handing the connection to exactly.dualwrite")
        conn.autocommit = True  # the writer says BEGIN itself, with the isolation level asked

    def begin_sql(self, isolation: str) -> str:
        return f"BEGIN ISOLATION LEVEL {isolation.upper()}"

    def is_conflict(self, exc: BaseException) -> bool:
        code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
        return code in self.CONFLICTS

    def in_transaction(self, conn: Any) -> bool:
        info = getattr(conn, "info", None)
        if info is not None:  # psycopg 3: IDLE=0, ACTIVE=1, INTRANS=2, INERROR=3, UNKNOWN=4
            return int(info.transaction_status) != 0
        status = conn.get_transaction_status()  # psycopg2
        return int(status) != 0

    def commit(self, cursor: Any) -> None:
        cursor.execute("COMMIT")
        # COMMIT of a transaction in which a statement failed answers ROLLBACK, not an error.
        status = (getattr(cursor, "statusmessage", None) or "").upper()
        if status and status != "COMMIT":
            raise DatabaseRolledBack("the database answered COMMIT with "
                                     f"{status}: a statement of the transaction had failed")


class DatabaseRolledBack(Exception):
    """COMMIT ended in a rollback without raising (PostgreSQL after a failed statement)."""


def detect(conn: Any) -> Dialect:
    """The dialect of a DB-API connection: sqlite3, or psycopg (3, or 2) for PostgreSQL."""
    module = type(conn).__module__ or ""
    if module.startswith("sqlite3"):
        return SQLite()
    if module.startswith("psycopg"):
        return Postgres()
    raise ValueError(f"exactly.dualwrite does not know the database of a {module}."
                     f"{type(conn).__name__} connection: it supports sqlite3 and psycopg "
                     "(PostgreSQL); pass dialect=SQLite() or dialect=Postgres() if yours "
                     "behaves like one of them")


_CREATE_RACE = {"23505", "42710", "42P07"}  # unique_violation, duplicate_object, duplicate_table


def ensure_tables(conn: Any, dialect: Dialect, *, offsets: bool = False) -> None:
    """Create the state table (and the offsets table) when missing; autocommit mode."""
    cursor = conn.cursor()
    try:
        for ddl in (_STATE_DDL, *((_OFFSETS_DDL,) if offsets else ())):
            try:
                cursor.execute(ddl)
            except Exception as exc:
                # Two PostgreSQL sessions creating the same table at once: one loses the race
                # on the catalog although IF NOT EXISTS was said, as unique_violation or as
                # duplicate_object/duplicate_table (the table's row type), by timing.
                if getattr(exc, "sqlstate", None) not in _CREATE_RACE:
                    raise
    finally:
        cursor.close()


def claim_state(conn: Any, dialect: Dialect, transactional_id: str, writer_id: str
                ) -> PreparedTxnState:
    """Recovery step 1: read the stored state of `transactional_id` and make `writer_id` the
    row's writer, in one database transaction that waits for a writer holding the row."""
    cursor = conn.cursor()
    try:
        cursor.execute(dialect.recovery_begin)
        try:
            cursor.execute(dialect.sql(
                f"INSERT INTO {STATE_TABLE} (transactional_id, prepared_transaction_state, "
                "writer_id) VALUES (?, '', ?) ON CONFLICT (transactional_id) DO NOTHING"),
                (transactional_id, writer_id))
            cursor.execute(dialect.sql(
                f"SELECT prepared_transaction_state FROM {STATE_TABLE} WHERE transactional_id = ?"
                + dialect.locking_read), (transactional_id,))
            row = cursor.fetchone()
            cursor.execute(dialect.sql(
                f"UPDATE {STATE_TABLE} SET writer_id = ? WHERE transactional_id = ?"),
                (writer_id, transactional_id))
            dialect.commit(cursor)
        except BaseException:
            dialect.rollback(conn, cursor)
            raise
    finally:
        cursor.close()
    return PreparedTxnState(row[0] if row else "")


def read_state(conn: Any, dialect: Dialect, transactional_id: str) -> PreparedTxnState:
    """The committed state of `transactional_id` (autocommit: a statement of its own)."""
    cursor = conn.cursor()
    try:
        cursor.execute(dialect.sql(f"SELECT prepared_transaction_state FROM {STATE_TABLE} "
                                   "WHERE transactional_id = ?"), (transactional_id,))
        row = cursor.fetchone()
    finally:
        cursor.close()
    return PreparedTxnState(row[0] if row else "")


def write_state(cursor: Any, dialect: Dialect, transactional_id: str, writer_id: str,
                state: PreparedTxnState) -> bool:
    """Step 6, inside the open database transaction: store `state`. False if the row is not
    this writer's any more (another writer recovered the transactional id)."""
    cursor.execute(dialect.sql(
        f"UPDATE {STATE_TABLE} SET prepared_transaction_state = ? "
        "WHERE transactional_id = ? AND writer_id = ?"), (str(state), transactional_id, writer_id))
    return int(cursor.rowcount) == 1


def read_offsets(conn: Any, dialect: Dialect, group_id: str) -> dict[tuple[str, int], int]:
    cursor = conn.cursor()
    try:
        cursor.execute(dialect.sql(f"SELECT topic, partition_id, next_offset FROM {OFFSETS_TABLE} "
                                   "WHERE group_id = ?"), (group_id,))
        return {(str(t), int(p)): int(o) for t, p, o in cursor.fetchall()}
    finally:
        cursor.close()


def write_offsets(cursor: Any, dialect: Dialect, group_id: str,
                  offsets: dict[tuple[str, int], int]) -> None:
    """Inside the open database transaction: the next offset to read, per partition."""
    for (topic, partition), offset in sorted(offsets.items()):
        cursor.execute(dialect.sql(
            f"INSERT INTO {OFFSETS_TABLE} (group_id, topic, partition_id, next_offset) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (group_id, topic, partition_id) "
            "DO UPDATE SET next_offset = excluded.next_offset"),
            (group_id, topic, partition, offset))
