"""Dual write (KIP-939, seed 000): a database transaction and a log transaction that commit
together, with recovery, and atomic consumption from the log into a database.

    from exactly.dualwrite import DualWriter
    writer = DualWriter(connection, {"bootstrap.servers": ..., "transactional.id": "orders-1"})
    with writer.transaction() as tx:
        tx.db.execute("INSERT INTO orders ...", (...))
        tx.send("order-events", value, key=key)

Modules: writer (DualWriter, the recipe and recovery), consumer (AtomicConsumer), store (the
state tables, SQLite and PostgreSQL), errors. The crash tests' fault points are named
`dualwrite.<step>` in `exactly.failpoints`; a private PostgreSQL server for tests and benchmarks
is `tests.rigs.postgres`.
"""

from exactly.dualwrite.consumer import AtomicConsumer
from exactly.dualwrite.errors import (
    DatabaseCommitError,
    DatabaseConflictError,
    DualWriteError,
    InDoubtError,
    LogWriteError,
    TransactionAborted,
    WriterFencedError,
)
from exactly.dualwrite.store import Dialect, Postgres, SQLite
from exactly.dualwrite.writer import DualWriter, RecoveryResult, Transaction

__all__ = [
    "AtomicConsumer",
    "DatabaseCommitError",
    "DatabaseConflictError",
    "Dialect",
    "DualWriteError",
    "DualWriter",
    "InDoubtError",
    "LogWriteError",
    "Postgres",
    "RecoveryResult",
    "SQLite",
    "Transaction",
    "TransactionAborted",
    "WriterFencedError",
]
