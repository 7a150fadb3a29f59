"""Transaction states and the per-transactional-id metadata (Kafka's TransactionState and
TransactionMetadata).

Theory of operation
-------------------

One state machine per transactional id. `TransactionCoordinator` (coordinator.py) applies the
rules; its `TransactionStateManager` (state_manager.py) keeps the current `TxnMetadata` of every
id and writes each new version to `__transaction_state`. The states are Kafka's:

    Empty              an identity (producer id, epoch), no transaction
    Ongoing            partitions added, their data being written
    PrepareCommit      commit decided: markers to write
    PrepareAbort       abort decided: markers to write
    CompleteCommit     the commit markers are written; the id is idle again
    CompleteAbort      the abort markers are written; the id is idle again
    PrepareEpochFence  in memory only, for the instant of a fence (Ongoing -> PrepareAbort)
    Dead               the id expired: written as a tombstone, never as a state

The events that move them, and who sends each:

    InitProducerId               client    idle -> Empty, epoch + 1 (a new producer id when the
                                           epoch is spent); Ongoing -> fence, below; with
                                           KeepPreparedTxn (KIP-939) Ongoing stays, kept
    AddPartitionsToTxn,          client    idle -> Ongoing (a transaction begins),
    AddOffsetsToTxn                        Ongoing -> Ongoing with more partitions
    EndTxn                       client    Ongoing -> PrepareCommit/PrepareAbort; with no
                                           partition, on to CompleteX in the same batch. A
                                           transaction-version-2 abort with nothing open:
                                           idle -> PrepareAbort -> CompleteAbort, epoch + 1
    transaction timeout, fence,  coordinator (tick, InitProducerId)
    session timeout (KIP-1309)             Ongoing -> PrepareEpochFence -> PrepareAbort with
                                           epoch + 1: the producer is fenced, its data aborted
    TxnHeartbeat (KIP-1309)      client    no move: the producer is alive (see Sessions)
    markers written              broker    PrepareX -> CompleteX (`markers_written`)
    id expiration                coordinator (tick)
                                           idle past transactional.id.expiration.ms -> Dead

`VALID_PREVIOUS` below is the table of allowed moves; `TxnMetadata.transition` refuses any other.
While a transaction is in PrepareX, InitProducerId, AddPartitionsToTxn and a retried EndTxn get
CONCURRENT_TRANSACTIONS: the client retries once the markers are out.

What is durable when:

- Every call that changes state appends its record(s) to `__transaction_state`, one batch per
  call, before it returns, and changes memory only once that append succeeded. The broker makes
  the partition durable (`log_for`) before it answers the client.
- PrepareCommit/PrepareAbort durable is the decision point (DESIGN invariant 4): EndTxn is
  answered there, the outcome is fixed, and a restarted coordinator rolls it forward
  (`pending_markers`).
- CompleteCommit/CompleteAbort is written only after the markers are durable in every partition
  of the transaction.

Identities:

- KIP-890 (transaction version 2): every EndTxn bumps the epoch with the decision. PrepareX
  carries epoch + 1, the markers too, and the answer gives the client that identity, so a late
  write under the old epoch is fenced. When the epoch is spent the client gets NextProducerId
  with epoch 0, which CompleteX makes ProducerId.
- No client is left holding Short.MaxValue for data: it is the epoch of the markers of a
  transaction begun at Short.MaxValue - 1. So the coordinator's own abort (timeout, session,
  the fence of InitProducerId, forceTerminate) rotates the id too when the identity it would
  complete to is Short.MaxValue (KAFKA-20090): markers with the old id, CompleteAbort with
  NextProducerId at epoch 0 and PrevProducerId, and the fenced client's retried EndTxn is
  answered with the new id (Kafka's retryOnOverflow).
- KIP-939 KeepPreparedTxn keeps an ongoing transaction across a client restart with two pairs:
  ProducerId/ProducerEpoch stay the transaction's own (its data and markers use them), and
  NextProducerId/NextProducerEpoch are the client's. Each such InitProducerId moves the client's
  pair on, which fences every earlier instance; only commit or abort may follow.

Sessions (KIP-1309): InitProducerId v7 announces a session timeout (`session_timeout_ms`, -1
for none). While a transaction is Ongoing, every TxnHeartbeat, AddPartitionsToTxn or
AddOffsetsToTxn of its producer counts as a sign of life (`last_heard_ms`, memory only); when none
came for the session timeout, the tick aborts the transaction as a transaction timeout would, long
before `transaction.timeout.ms`. The timeout is written with the id's records (a tagged field), so
after a restart an open transaction keeps its session with a fresh deadline counted from the load.

Rules that must never break:

1. An epoch never goes down for one producer id (a record that would lower it is refused on load).
2. Once PrepareX is in the log the outcome never changes (invariant 4).
3. A fenced identity (an older epoch, or a kept transaction's own pair) never adds to, commits or
   aborts a newer transaction (invariant 6).
4. A 2PC transaction (Enable2Pc, timeout -1) never times out, has no session (a missing
   heartbeat never aborts it) and is never aborted by InitProducerId with KeepPreparedTxn: only
   its client's EndTxn or a force-terminate (InitProducerId without it) ends it (invariant 5).
5. Memory never runs ahead of the log: a failed append leaves the state as it was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition

MAX_EPOCH = 32767  # Short.MaxValue
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_TIMEOUT = -1  # TransactionTimeoutMs of a 2PC transaction (KIP-939): it never times out
NO_SESSION = -1  # TransactionSessionTimeoutMs of a producer without heartbeats (KIP-1309)


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, with its byte value in the transaction log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name Kafka prints (DescribeTransactions, ListTransactions, kafka-transactions.sh)."""
        return _NAMES[self]

    @classmethod
    def from_display_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_open(self) -> bool:
        """A transaction holds partitions whose markers are not written yet: its data keeps
        the LSO of those partitions back."""
        return self in _OPEN

    @property
    def is_logged(self) -> bool:
        """Written to `__transaction_state` as a state: Dead is a tombstone there, and
        PrepareEpochFence lives only for the instant of a fence."""
        return self not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)

    @property
    def is_idle(self) -> bool:
        """No transaction in progress: a new one may begin, the id may expire."""
        return self in _IDLE


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_OPEN = frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                   TxnState.PREPARE_EPOCH_FENCE})
_IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

# Kafka's validPreviousStates. PrepareAbort may also follow Empty/CompleteCommit/CompleteAbort:
# Apache Kafka 4 allows that so a transaction-version-2 client can abort a transaction that never
# added a partition (the epoch is still bumped).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _IDLE,
    TxnState.ONGOING: _IDLE | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: _IDLE | {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _IDLE,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTransitionError(RuntimeError):
    """A transition Kafka's state machine does not allow: a bug in the coordinator."""


def is_epoch_exhausted(epoch: int) -> bool:
    # Kafka keeps the last epoch (Short.MaxValue) for fencing: a producer never gets it.
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    txn_last_update_ms: int
    txn_start_ms: int = -1
    partitions: set[TopicPartition] = field(default_factory=set)
    # Set by an EndTxn whose client identity differs from ProducerId of the record (the client's
    # id, so a retry is recognised) or, after an InitProducerId that rotated an exhausted id, the
    # old id (a retry may still name it). -1 otherwise: the seed's PrevProducerId.
    prev_producer_id: int = NO_PRODUCER_ID
    # The client-facing identity while it differs from ProducerId/ProducerEpoch (KIP-939): in
    # PrepareX, the identity the client continues with (an exhausted epoch rotated to a new id,
    # or a kept transaction's newer identity); in Ongoing, set only by InitProducerId with
    # KeepPreparedTxn: the transaction keeps ProducerId/ProducerEpoch (its markers use them),
    # the client got NextProducerId/NextProducerEpoch.
    next_producer_id: int = NO_PRODUCER_ID
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    # Not in the log (as in Kafka): the identity a retried InitProducerId/EndTxn may still carry.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    # KIP-1309: abort an Ongoing transaction when nothing was heard from its producer for this
    # long (ms); NO_SESSION for none. In the log (a tagged field), unlike the time last heard,
    # which is a clock reading, not state: left out of comparisons.
    session_timeout_ms: int = NO_SESSION
    last_heard_ms: int = field(default=-1, compare=False)

    def copy(self) -> TxnMetadata:
        return TxnMetadata(
            self.transactional_id, self.producer_id, self.producer_epoch, self.txn_timeout_ms,
            self.state, self.txn_last_update_ms, self.txn_start_ms, set(self.partitions),
            self.prev_producer_id, self.next_producer_id, self.next_producer_epoch,
            self.last_producer_epoch, self.last_producer_id, self.client_transaction_version,
            self.session_timeout_ms, self.last_heard_ms)

    def transition(self, new_state: TxnState) -> None:
        if self.state not in VALID_PREVIOUS[new_state]:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id!r}: {self.state.display_name} -> "
                f"{new_state.display_name} is not a valid transition")
        self.state = new_state

    def sorted_partitions(self) -> list[TopicPartition]:
        return sorted(self.partitions)

    @property
    def is_kept(self) -> bool:
        """An ongoing transaction kept by InitProducerId(KeepPreparedTxn): its producer id/epoch
        are not the client's any more."""
        return self.state is TxnState.ONGOING and self.next_producer_id != NO_PRODUCER_ID

    @property
    def is_two_phase(self) -> bool:
        """Initialized with Enable2Pc: no timeout (KIP-939 stores -1)."""
        return self.txn_timeout_ms == NO_TIMEOUT

    @property
    def client_identity(self) -> tuple[int, int]:
        """The producer id and epoch the current client instance holds."""
        if self.is_kept:
            return self.next_producer_id, self.next_producer_epoch
        return self.producer_id, self.producer_epoch


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    segment_bytes: int = 262_144  # transaction.state.log.segment.bytes
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    coordinator_epoch: int = 0


@dataclass(frozen=True, slots=True)
class TxnMarkers:
    """Markers the broker must write now, then call `markers_written(transactional_id, now_ms)`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    markers: TxnMarkers | None = None
    # KIP-939 (InitProducerId v6): the kept transaction's identity, -1/-1 if none was kept.
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class EndResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    markers: TxnMarkers | None = None
