"""What a dual write can end in, besides success. Each error says which side committed.

    DualWriteError
    ├── TransactionAborted      neither the database nor the log committed anything
    │   ├── DatabaseConflictError   a lock or serialization conflict: `retriable`, run it again
    │   ├── DatabaseCommitError     the database refused the commit (e.g. a constraint)
    │   └── LogWriteError           the log transaction could not be written or prepared
    ├── InDoubtError            the database committed (or may have): recover() settles the log
    └── WriterFencedError       another DualWriter with this transactional.id took over
"""

from __future__ import annotations


class DualWriteError(Exception):
    """Base of the dual-write errors. `step` names the recipe step that failed (the names
    of the `dualwrite.<step>` fault points in exactly.failpoints)."""

    retriable = False

    def __init__(self, message: str, *, step: str = "") -> None:
        super().__init__(message)
        self.step = step


class TransactionAborted(DualWriteError):
    """Both sides were rolled back: nothing of this transaction is in the database or visible
    in the log (a log abort that could not reach the broker is finished by recover())."""


class DatabaseConflictError(TransactionAborted):
    """The database could not serialize this transaction (SQLite: database is locked/busy;
    PostgreSQL: serialization failure or deadlock). Both sides were rolled back: run the work
    again (DualWriter.run does)."""

    retriable = True


class DatabaseCommitError(TransactionAborted):
    """The database refused to commit (a deferred constraint, a statement that had failed);
    the log transaction was aborted."""


class LogWriteError(TransactionAborted):
    """Writing or preparing the log transaction failed (broker unreachable, write refused);
    the database transaction was rolled back."""


class InDoubtError(DualWriteError):
    """The pair is not finished, and the caller must not redo the work: `db_committed` is True
    when the database committed (the decision is commit) but committing the log did not finish,
    None when the database commit's outcome is unknown (connection lost). The log transaction
    stays prepared; recover() (run before the next transaction) makes the log agree with the
    database."""

    def __init__(self, message: str, *, step: str = "", db_committed: bool | None = None) -> None:
        super().__init__(message, step=step)
        self.db_committed = db_committed


class WriterFencedError(DualWriteError):
    """Another DualWriter recovered this transactional.id after this one did (a newer instance
    took over): this writer's transaction was rolled back and the writer cannot go on."""
