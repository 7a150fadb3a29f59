"""The TransactionSession's states and transitions (mapped from Kafka's
TransactionManager), and what each coordinator error code means for the session. Sans-IO:
plain method calls, no sockets, no asyncio.

    UNINITIALIZED --initialize--> INITIALIZING --> READY (or PREPARED: KIP-939 keep_prepared_txn)
    READY --begin--> IN_TRANSACTION --prepare--> PREPARED
    IN_TRANSACTION | PREPARED --commit--> COMMITTING --> READY
    IN_TRANSACTION | PREPARED | ABORTABLE_ERROR --abort--> ABORTING --> READY
    any error that only an abort can clear --> ABORTABLE_ERROR; fenced or fatal --> FATAL_ERROR

Heartbeats (KIP-1309) run while a transaction is open: from begin_transaction (or resume) to
commit, abort or prepare, and on close. `heartbeat_timing` reads their two settings.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from exactly.client.errors import (
    FENCED,
    TXN_ABORTABLE,
    TXN_RETRY,
    ConfigError,
    IllegalStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    Verdict,
)
from exactly.client.errors import classify as verdict_of
from exactly.protocol.errors import ErrorCode, error_name


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    PREPARED = "PREPARED"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"

    def __str__(self) -> str:
        return self.value


# call -> (states it may be made in, state it moves to; None: stays). Retrying a call that timed
# out is allowed from the state the first attempt left behind (INITIALIZING, COMMITTING, ABORTING).
CALLS: dict[str, tuple[frozenset[State], State | None]] = {
    "initialize": (frozenset({State.UNINITIALIZED, State.INITIALIZING}), State.INITIALIZING),
    "begin_transaction": (frozenset({State.READY}), State.IN_TRANSACTION),
    "add_partitions_to_transaction": (frozenset({State.IN_TRANSACTION}), None),
    "ensure_partitions": (frozenset({State.IN_TRANSACTION}), None),
    "send_offsets_to_transaction": (frozenset({State.IN_TRANSACTION}), None),
    "prepare_transaction": (frozenset({State.IN_TRANSACTION}), State.PREPARED),
    "commit_transaction": (frozenset({State.IN_TRANSACTION, State.PREPARED, State.COMMITTING}),
                           State.COMMITTING),
    "abort_transaction": (frozenset({State.IN_TRANSACTION, State.PREPARED, State.ABORTABLE_ERROR,
                                     State.ABORTING}), State.ABORTING),
    "complete_transaction": (frozenset({State.PREPARED}), None),
    "heartbeat": (frozenset({State.READY, State.IN_TRANSACTION, State.PREPARED, State.COMMITTING,
                             State.ABORTING, State.ABORTABLE_ERROR}), None),
}

# Completions of the calls above, made by the session once the coordinator answered.
EVENTS: dict[str, tuple[frozenset[State], State]] = {
    "initialized": (frozenset({State.INITIALIZING}), State.READY),
    "initialized_prepared": (frozenset({State.INITIALIZING}), State.PREPARED),
    "ended": (frozenset({State.COMMITTING, State.ABORTING}), State.READY),
}

_HINTS = {
    State.UNINITIALIZED: "call initialize() first",
    State.INITIALIZING: "initialize() has not finished; call it again",
    State.READY: "no transaction is open: call begin_transaction() first",
    State.IN_TRANSACTION: "a transaction is open: commit or abort it first",
    State.PREPARED: "the transaction is prepared: only commit_transaction(), abort_transaction() "
                    "or complete_transaction() may follow",
    State.COMMITTING: "a commit is under way: call commit_transaction() again to finish it",
    State.ABORTING: "an abort is under way: call abort_transaction() again to finish it",
    State.ABORTABLE_ERROR: "the transaction failed and can only be aborted: "
                           "call abort_transaction()",
    State.FATAL_ERROR: "the session cannot be used any more: close it",
}


class AbortableStateError(IllegalStateError, TransactionAbortableError):
    """A call made in ABORTABLE_ERROR: both an illegal call and a reason to abort."""


class FencedStateError(IllegalStateError, ProducerFencedError):
    """A call made in FATAL_ERROR after this session was fenced."""


class FatalStateError(IllegalStateError, TransactionFatalError):
    """A call made in FATAL_ERROR after a fatal error."""


class SessionStateMachine:
    def __init__(self, state: State = State.UNINITIALIZED) -> None:
        self.state = state
        self.closed = False
        self.last_error: KafkaError | None = None

    def illegal(self, call: str) -> IllegalStateError:
        """The error for `call` made in the current state: names the state, the call, what to do."""
        if self.closed:
            return IllegalStateError(f"cannot call {call}(): the session is closed")
        message = f"cannot call {call}() in state {self.state}: {_HINTS[self.state]}"
        cause = self.last_error
        if cause is not None:
            message += f" (cause: {cause})"
        if self.state is State.ABORTABLE_ERROR:
            return AbortableStateError(message, cause.code if cause else -1)
        if self.state is State.FATAL_ERROR:
            kind = FencedStateError if isinstance(cause, ProducerFencedError) else FatalStateError
            return kind(message, cause.code if cause else -1)
        return IllegalStateError(message)

    def check(self, call: str, *, also: frozenset[State] = frozenset()) -> None:
        """Raise if `call` is not allowed now (`also`: states the caller allows in addition)."""
        allowed, _ = CALLS[call]
        if self.closed or (self.state not in allowed and self.state not in also):
            raise self.illegal(call)

    def start(self, call: str, *, also: frozenset[State] = frozenset()) -> State:
        """Check `call` and make its transition; returns the state it was made in."""
        self.check(call, also=also)
        before = self.state
        target = CALLS[call][1]
        if target is not None:
            self.state = target
        return before

    def finish(self, event: str) -> None:
        sources, target = EVENTS[event]
        if self.state not in sources:
            raise IllegalStateError(f"{event} in state {self.state}")  # a bug in the session
        self.state = target
        self.last_error = None

    def fail(self, error: KafkaError) -> None:
        """An error answered for this session: fenced and fatal ones end it, others make the
        transaction abortable. During an abort the transaction is being ended anyway."""
        if self.state is State.FATAL_ERROR:
            return
        if isinstance(error, ProducerFencedError | TransactionFatalError):
            self.state, self.last_error = State.FATAL_ERROR, error
        elif self.state in (State.IN_TRANSACTION, State.PREPARED, State.COMMITTING,
                            State.ABORTABLE_ERROR):
            self.state, self.last_error = State.ABORTABLE_ERROR, error
        elif self.state is State.INITIALIZING:
            self.state, self.last_error = State.FATAL_ERROR, error


# -- heartbeats (KIP-1309) ------------------------------------------------------------------

NO_SESSION = -1
SESSION_PER_INTERVAL = 3  # KIP-1309: the coordinator aborts after 3 x the interval


def heartbeat_timing(interval: int, session: int) -> tuple[int, int]:
    """(heartbeat interval, session timeout) in ms from `transaction.heartbeat.interval.ms` (the
    KIP's, 0: not set) and `transaction.session.timeout.ms` (-1: off); (0, -1) when
    heartbeats are off. Either one alone sets the other (session = 3 x interval); both together
    must have the interval below the session timeout, as Kafka's consumer asks of its own pair."""
    if session == 0 or session < NO_SESSION:
        raise ConfigError(f"transaction.session.timeout.ms={session}: use -1 to turn transaction "
                          "heartbeats off, or a positive number of ms")
    if interval < 0:
        raise ConfigError(f"transaction.heartbeat.interval.ms={interval}: use 0 (not set) or a "
                          "positive number of ms")
    if session == NO_SESSION:
        return (interval, SESSION_PER_INTERVAL * interval) if interval else (0, NO_SESSION)
    if not interval:
        return max(session // SESSION_PER_INTERVAL, 1), session
    if interval >= session:
        raise ConfigError(f"transaction.heartbeat.interval.ms={interval} must be lower than "
                          f"transaction.session.timeout.ms={session} (a third of it is usual)")
    return interval, session


# -- coordinator error codes -----------------------------------------------------------------

class Kind(enum.Enum):
    NONE = "none"
    RETRY = "retry"                 # same request again after retry.backoff.ms
    REDISCOVER = "rediscover"       # find the coordinator again, then retry
    FENCED = "fenced"
    ABORTABLE = "abortable"
    FATAL = "fatal"


# Calls that add to the open transaction: under transaction version 1, a producer id the
# coordinator does not map (KIP-360) can be cleared by aborting. Ending a transaction with such
# an id cannot; and under transaction version 2 it is fatal for every call (KAFKA-18019, after
# KIP-890): the id was expired or taken over, and a session that aborted and went on could
# process again what the session that took over has already processed.
_ADDING = {"AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit"}
# Final for the session whatever Kafka's retriable flag says; which kind, `classify` tells.
_FINAL = FENCED | TXN_ABORTABLE | {ErrorCode.invalid_producer_id_mapping}


def classify(code: int, api: str, *, resumed: bool = False, tv2: bool = False) -> Kind:
    """The client's verdict on the code (errors.classify: the coordinator moved, retry, or
    fail), a failure told apart as the session's kinds."""
    verdict = verdict_of(code, fail=_FINAL, retry=TXN_RETRY)
    if verdict is Verdict.DONE:
        return Kind.NONE
    if Verdict.REDISCOVER in verdict:
        return Kind.REDISCOVER
    if Verdict.RETRY in verdict:
        return Kind.RETRY
    if code in FENCED:
        return Kind.FENCED
    if code in TXN_ABORTABLE:
        return Kind.ABORTABLE
    if code == ErrorCode.invalid_producer_id_mapping:
        return Kind.ABORTABLE if api in _ADDING and not (resumed or tv2) else Kind.FATAL
    return Kind.FATAL


_ADVICE: dict[int, str] = {
    ErrorCode.transactional_id_authorization_failed:
        "the principal needs WRITE on the transactional id (and, for two-phase commit, "
        "TWO_PHASE_COMMIT, with transaction.two.phase.commit.enable=true on the broker)",
    ErrorCode.invalid_txn_state:
        "the coordinator's transaction is not in a state that allows this call",
    ErrorCode.invalid_producer_id_mapping:
        "the coordinator does not map this producer id to the transactional id: the transaction "
        "was ended or taken over by another session",
    ErrorCode.invalid_transaction_timeout:
        "transaction.timeout.ms (or transaction.session.timeout.ms) is larger than the broker's "
        "transaction.max.timeout.ms",
}


def error_for(code: int, api: str, *, transactional_id: str, producer_id: int, epoch: int,
              resumed: bool = False, tv2: bool = False) -> TransactionError:
    """The exception a final error code of a transaction RPC stands for."""
    kind = classify(code, api, resumed=resumed, tv2=tv2)
    where = (f"transactional id {transactional_id!r} (producer id {producer_id}, epoch {epoch}): "
             f"{api} failed with {error_name(code)}")
    if kind is Kind.FENCED:
        return ProducerFencedError(f"{where}; this session is fenced: a newer session with the "
                                   "same transactional id took over (or the coordinator aborted "
                                   "the transaction): close this session", code)
    advice = _ADVICE.get(code)
    if resumed and code == ErrorCode.invalid_txn_state:
        advice = ("the transaction of this producer id and epoch was already ended with the "
                  "other outcome, or never began")
    detail = f" ({advice})" if advice else ""
    if kind is Kind.ABORTABLE:
        return TransactionAbortableError(f"{where}{detail}; abort the transaction and begin a "
                                         "new one", code)
    return TransactionFatalError(f"{where}{detail}; close the session", code)


def write_error(exc: Exception, transactional_id: str) -> TransactionError:
    """What a bound producer's failed transactional write means for its session: the session's
    own error as it is; fenced, the session can only be closed; otherwise the transaction can
    only be aborted."""
    code = exc.code if isinstance(exc, KafkaError) else -1
    if isinstance(exc, TransactionError):
        return exc
    if code in FENCED:
        return ProducerFencedError(f"transactional id {transactional_id!r}: a write was fenced "
                                   f"({error_name(code)}): close this session", code)
    return TransactionAbortableError(f"transactional id {transactional_id!r}: a transactional "
                                     f"write failed ({exc}); abort the transaction", code)


def first_error(codes: Mapping[Any, int], pending: set[Any] | dict[Any, Any], api: str,
                resumed: bool) -> int:
    """Drop what succeeded from `pending`; the error to act on: a final one before a retriable."""
    for key, code in codes.items():
        if code == ErrorCode.none and key in pending:
            if isinstance(pending, set):
                pending.discard(key)
            else:
                pending.pop(key)
    errors = [c for c in codes.values() if c != ErrorCode.none]
    final = [c for c in errors if classify(c, api, resumed=resumed)
             not in (Kind.RETRY, Kind.REDISCOVER)]
    return (final or errors or [ErrorCode.none])[0]
