"""The client's exceptions, and what each Kafka error code means to it. Kafka error codes keep
their names; the kinds a caller must tell apart (retry, abort the transaction, give up) are
distinct types.

The sets of error codes the client acts on (the coordinator moved, the producer was fenced, the
member must rejoin, ...) are written here once, and `classify` is the one reading of a code as
done / retry / rediscover / fail that every request path of the client shares (requests.py
sends and retries on it; session_state.py refines a failure into the session's kinds).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from exactly.protocol.errors import ErrorCode, error_name


class KafkaError(Exception):
    """An error answered by a broker (`code` is Kafka's error code) or found by the client."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code

    @property
    def name(self) -> str:
        return error_name(self.code) if self.code >= 0 else "CLIENT_ERROR"

    @property
    def retriable(self) -> bool:
        return is_retriable(self.code)


class ConfigError(KafkaError, ValueError):
    """A client configuration key or value that cannot be used."""


class KafkaConnectionError(KafkaError, ConnectionError):
    """A broker could not be reached, or the connection broke."""


class UnsupportedVersionError(KafkaError):
    """The broker does not speak a version of an API this client needs."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A request or an operation did not finish in time."""


class IllegalStateError(KafkaError):
    """A call that the current state does not allow; the message names the state."""


class TransactionError(KafkaError):
    """Base of the transaction errors."""


class ProducerFencedError(TransactionError):
    """A newer session with the same transactional id took over: this one can only close."""


class TransactionAbortableError(TransactionError):
    """The transaction cannot commit; abort it and begin a new one."""


class TransactionFatalError(TransactionError):
    """The session cannot go on (bad configuration, authorization, protocol errors): close it."""


def raise_for(code: int, context: str) -> None:
    """Raise the error a response's error code stands for, if any."""
    if code == ErrorCode.none:
        return
    raise KafkaError(f"{context}: {error_name(code)}", code)


class AuthenticationError(KafkaError):
    """TLS or SASL authentication failed (wrong password, unknown user, a mechanism the broker
    does not enable, an untrusted certificate); the message names the cause. Not retriable."""


class AdminError(KafkaError):
    """Some items of an admin call failed; `errors` maps each failed item to its error."""

    def __init__(self, message: str, code: int, errors: Mapping[Any, KafkaError]) -> None:
        super().__init__(message, code)
        self.errors = dict(errors)


# -- what an error code means -----------------------------------------------------------------
# Each set once, imported where it is used (tests/unit/client/test_floors.py checks that no two
# modules of the client spell out the same set).

# The coordinator is elsewhere, or nowhere yet: find it again (FindCoordinator), then retry.
COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
# ... or it is the right one, still loading its log. FindCoordinator retries all three, and the
# admin's calls and the share group's membership find the coordinator again on each of them;
# the session and the classic group retry a loading coordinator as it is (see requests.py).
COORDINATOR_UNSETTLED = COORDINATOR_MOVED | {ErrorCode.coordinator_load_in_progress}
# A newer producer with the same transactional id (or the coordinator) fenced this one.
FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})
# A transaction RPC's errors that only an abort clears (see session_state.classify).
TXN_ABORTABLE = frozenset({
    ErrorCode.transaction_abortable, ErrorCode.topic_authorization_failed,
    ErrorCode.group_authorization_failed, ErrorCode.unknown_producer_id,
    ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id})
# Not retriable by Kafka's flag, but a transaction RPC retries them: markers of the previous
# transaction still being written, a batch of the same request that failed.
TXN_RETRY = frozenset({ErrorCode.concurrent_transactions, ErrorCode.operation_not_attempted})
# A transactional Produce's errors after which the transaction can only be aborted.
PRODUCE_ABORTABLE = frozenset({ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state})
# The broker lost the producer's sequence state: an idempotent producer takes a new id.
SEQUENCE_LOST = frozenset({ErrorCode.unknown_producer_id, ErrorCode.out_of_order_sequence_number})
# After these a partition's leader may have moved: metadata is fetched again.
LEADER_MOVED = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error})
# A Fetch also waits out a leader that has no offsets to give yet.
FETCH_LEADER_MOVED = LEADER_MOVED | {ErrorCode.offset_not_available,
                                     ErrorCode.replica_not_available}
# A classic group member's generation is over: it joins again.
GROUP_REJOIN = frozenset({ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation,
                          ErrorCode.unknown_member_id})
# An OffsetCommit refused because the group rebalanced (CommitFailedError).
COMMIT_FAILED = GROUP_REJOIN | {ErrorCode.fenced_instance_id}
# A classic group membership cannot go on: the consumer raises it from poll.
GROUP_FATAL = frozenset({
    ErrorCode.inconsistent_group_protocol, ErrorCode.group_authorization_failed,
    ErrorCode.invalid_session_timeout, ErrorCode.group_max_size_reached,
    ErrorCode.fenced_instance_id, ErrorCode.invalid_group_id})
# A share group member joins again with epoch 0 (KIP-932).
SHARE_REJOIN = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})
# A share session with a leader is gone: open a new one (KIP-932).
SHARE_SESSION_LOST = frozenset({ErrorCode.share_session_not_found,
                                ErrorCode.invalid_share_session_epoch})


def is_retriable(code: int) -> bool:
    """Kafka's own flag for the code; False for a code this client does not know."""
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


class Verdict(enum.Flag):
    """What an answer's error code means for the request that got it, as aiokafka's response
    handlers decide it. REDISCOVER goes with RETRY (find the coordinator, then try again) or,
    in an answer with several codes, with FAIL (forget the coordinator, and give up)."""

    DONE = 0                  # no error, or one the caller reads itself
    RETRY = enum.auto()       # the same request again, after the backoff
    REDISCOVER = enum.auto()  # forget the coordinator: the next attempt looks it up again
    FAIL = enum.auto()        # final: raise


def classify(code: int, *, moved: Collection[int] = COORDINATOR_MOVED,
             retry: Collection[int] = (), fail: Collection[int] = (),
             otherwise: Verdict | None = None) -> Verdict:
    """The verdict on one error code, in this order: none is DONE; a code of `moved` is
    RETRY | REDISCOVER, of `fail` FAIL, of `retry` RETRY; any other is `otherwise`, or (None)
    RETRY if Kafka marks the code retriable and FAIL if not."""
    if code == ErrorCode.none:
        return Verdict.DONE
    if code in moved:
        return Verdict.RETRY | Verdict.REDISCOVER
    if code in fail:
        return Verdict.FAIL
    if code in retry:
        return Verdict.RETRY
    if otherwise is not None:
        return otherwise
    return Verdict.RETRY if is_retriable(code) else Verdict.FAIL


def classify_all(codes: Iterable[int], **rules: Any) -> Verdict:
    """The verdict on an answer with several codes (one per partition): every code's, joined;
    a FAIL among them wins over RETRY (a REDISCOVER is kept: the coordinator is forgotten
    before the error is raised)."""
    verdict = Verdict.DONE
    for code in codes:
        verdict |= classify(code, **rules)
    return verdict & ~Verdict.RETRY if Verdict.FAIL in verdict else verdict
