"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnHeartbeat, marker completion and timers, as a sans-IO state machine.

The rules are KIP-98's "Transaction Coordinator Request Handling", with the epoch bump of KIP-360
(InitProducerId with a producer id and epoch) and KIP-890 (verifyOnly, an epoch bump on every
EndTxn of a transaction-version-2 client, producer id rotation when the epoch overflows), as Apache
Kafka's TransactionCoordinator implements them, and KIP-939 (Enable2Pc: no timeout;
KeepPreparedTxn: a second producer id/epoch pair, its rules in `two_phase.py`), and KIP-1309
(a session timeout announced with InitProducerId v7, kept alive by TxnHeartbeat; the tick aborts
an Ongoing transaction whose producer went silent, never a 2PC one). Every call that
changes state appends its record(s) to `__transaction_state` before it returns; the caller makes
that durable (`log_for(transactional_id)`) before it answers the client. The states, the events
that move them and the rules that must never break are in state.py.

As Apache Kafka's TransactionCoordinator, it holds its collaborators by name: the
`TransactionStateManager` (`state_manager`: the metadata of every id and `__transaction_state`)
and the `ProducerIdManager` (`producer_ids`). Markers are written by the broker, which reports
them done with `markers_written`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition
from exactly.txn.config import TxnConfig
from exactly.txn.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SESSION,
    NO_TIMEOUT,
    EndResult,
    InitResult,
    TxnMarkers,
    TxnMetadata,
    TxnState,
    is_epoch_exhausted,
)
from exactly.txn.state_manager import TransactionStateManager
from exactly.txn.two_phase import end_kept, keep_identity

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog
    from exactly.txn.producer_ids import ProducerIdManager

log = logging.getLogger("exactly.txn")


class TxnStateError(RuntimeError):
    """The broker asked for something the coordinator's state does not allow (a broker bug)."""


class TransactionCoordinator:
    def __init__(self, logs: LogManager, producer_ids: ProducerIdManager, config: TxnConfig, *,
                 now_ms: int) -> None:
        self.config = config
        self.producer_ids = producer_ids
        self.loaded_ms = now_ms
        self.state_manager = TransactionStateManager(logs, config.num_partitions,
                                                     config.segment_bytes)
        # Transactions the tick aborted, by reason: "timeout" (transaction.timeout.ms) and
        # "session" (KIP-1309: no heartbeat for the session timeout). The broker's metrics.
        self.expired_aborts: dict[str, int] = {"timeout": 0, "session": 0}

    # -- InitProducerId -------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                         producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = NO_PRODUCER_EPOCH, *, now_ms: int,
                         enable_2pc: bool = False, keep_prepared_txn: bool = False,
                         session_timeout_ms: int = NO_SESSION) -> InitResult:
        """InitProducerId with a transactional id (the broker answers the idempotent-only case).

        `producer_id`/`producer_epoch` are the KIP-360 form (v3+): a producer that already has an
        id asks for a bump. The caller maps PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for old
        request versions. KIP-939 (v6): with `enable_2pc` the transaction never times out (the
        timeout is stored as -1, `txn_timeout_ms` is ignored); with `keep_prepared_txn` an
        ongoing transaction is kept, not aborted (see `_keep`). Whether 2PC is allowed at all
        (`transaction.two.phase.commit.enable`, ACLs) is the broker's decision, made before.

        KIP-1309 (v7): `session_timeout_ms` > 0 aborts the producer's Ongoing transaction when
        nothing is heard from it for that long; -1 for none. A 2PC producer has no session: a
        prepared transaction waits for its decision however long it takes.
        """
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if session_timeout_ms != NO_SESSION and not (
                0 < session_timeout_ms <= self.config.max_timeout_ms):
            return InitResult(ErrorCode.invalid_transaction_timeout)
        if enable_2pc:
            txn_timeout_ms = NO_TIMEOUT
            session_timeout_ms = NO_SESSION
        elif not 0 < txn_timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return InitResult(ErrorCode.invalid_request)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        meta = self.state_manager.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, self.producer_ids.generate(), NO_PRODUCER_EPOCH,
                               txn_timeout_ms, TxnState.EMPTY, now_ms)
        state = meta.state
        if state.is_prepare or state is TxnState.PREPARE_EPOCH_FENCE:
            # Wait for the markers; the client retries. (Before the identity check, unlike Kafka:
            # a version-2 client may already hold the NextProducerId of an overflow.)
            return InitResult(ErrorCode.concurrent_transactions)
        if expected is not None and not _valid_producer_id(meta, *expected):
            return InitResult(ErrorCode.producer_fenced)
        if state is TxnState.ONGOING:
            if expected is not None and expected != meta.client_identity:
                # Stricter than Kafka: a stale producer must not abort a newer transaction.
                return InitResult(ErrorCode.producer_fenced)
            if keep_prepared_txn:
                return self._keep(meta, txn_timeout_ms, session_timeout_ms, now_ms)
            # Fence the current instance: abort its transaction with a bumped epoch. That epoch
            # is never returned; the client retries and gets a second bump once it is aborted.
            return InitResult(ErrorCode.concurrent_transactions,
                              markers=self._fence_and_abort(meta, now_ms))
        return self._init_idle(meta, txn_timeout_ms, session_timeout_ms, expected, now_ms)

    def _keep(self, meta: TxnMetadata, txn_timeout_ms: int, session_timeout_ms: int,
              now_ms: int) -> InitResult:
        """KIP-939 KeepPreparedTxn on an ongoing transaction: it keeps its producer id and epoch
        (its markers will use them, +1); the client gets a newer identity, NextProducerId/
        NextProducerEpoch, which fences every earlier instance."""
        new = meta.copy()
        new.next_producer_id, new.next_producer_epoch = keep_identity(
            meta, self.producer_ids.generate)
        new.txn_timeout_ms = txn_timeout_ms
        new.session_timeout_ms, new.last_heard_ms = session_timeout_ms, now_ms
        new.txn_last_update_ms = now_ms
        new.last_producer_id, new.last_producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        new.transition(TxnState.ONGOING)
        self.state_manager.commit(new, transactional_id=new.transactional_id, now_ms=now_ms)
        log.info("event=txn_init_keep transactional_id=%r producer_id=%d epoch=%d "
                 "ongoing_producer_id=%d ongoing_epoch=%d two_phase=%s", new.transactional_id,
                 new.next_producer_id, new.next_producer_epoch, new.producer_id,
                 new.producer_epoch, new.is_two_phase)
        return InitResult(ErrorCode.none, new.next_producer_id, new.next_producer_epoch,
                          ongoing_producer_id=new.producer_id,
                          ongoing_producer_epoch=new.producer_epoch)

    def _init_idle(self, meta: TxnMetadata, txn_timeout_ms: int, session_timeout_ms: int,
                   expected: tuple[int, int] | None, now_ms: int) -> InitResult:
        new = meta.copy()
        new.txn_timeout_ms = txn_timeout_ms
        new.session_timeout_ms, new.last_heard_ms = session_timeout_ms, now_ms
        new.txn_last_update_ms = now_ms
        new.txn_start_ms = -1
        new.partitions.clear()
        new.next_producer_id, new.next_producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        new.last_producer_id = NO_PRODUCER_ID  # InitProducerId retries compare the epoch only
        current = (meta.producer_id, meta.producer_epoch)
        if is_epoch_exhausted(meta.producer_epoch) and expected in (None, current):
            new.prev_producer_id = meta.producer_id  # a retry may still name the old id
            new.producer_id = self.producer_ids.generate()
            new.producer_epoch = 0
            new.last_producer_epoch = meta.producer_epoch if expected else NO_PRODUCER_EPOCH
        elif expected is None:
            new.prev_producer_id = NO_PRODUCER_ID
            new.producer_epoch = meta.producer_epoch + 1
            new.last_producer_epoch = NO_PRODUCER_EPOCH
        elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected == current:
            new.prev_producer_id = NO_PRODUCER_ID
            new.producer_epoch = meta.producer_epoch + 1
            new.last_producer_epoch = meta.producer_epoch
        elif expected[1] == meta.last_producer_epoch:
            # A retry of a bump whose answer was lost, or the first call of a producer whose
            # transaction the coordinator aborted with a bump (timeout, KIP-360 recovery): the
            # same epoch again, written as Empty with the new timeout (Kafka's
            # prepareIncrementProducerEpoch).
            new.prev_producer_id = meta.prev_producer_id
            new.producer_epoch = meta.producer_epoch
            new.last_producer_epoch = meta.last_producer_epoch
        else:
            return InitResult(ErrorCode.producer_fenced)
        new.transition(TxnState.EMPTY)
        self.state_manager.commit(new, transactional_id=new.transactional_id, now_ms=now_ms)
        log.info("event=txn_init transactional_id=%r producer_id=%d epoch=%d",
                 new.transactional_id, new.producer_id, new.producer_epoch)
        return InitResult(ErrorCode.none, new.producer_id, new.producer_epoch)

    def _fence_and_abort(self, meta: TxnMetadata, now_ms: int) -> TxnMarkers | None:
        """Ongoing -> PrepareEpochFence -> PrepareAbort with epoch + 1 (KIP-98 expiration step i
        and the InitProducerId fence). PrepareEpochFence only lives in memory, as in Kafka."""
        new = meta.copy()
        new.transition(TxnState.PREPARE_EPOCH_FENCE)
        # The markers' epoch. A client begins a transaction at Short.MaxValue - 1 at most (an
        # exhausted id is rotated first), so this is at most Short.MaxValue; only a version-1
        # client that kept the Short.MaxValue of KeepPreparedTxn (KIP-939) begins one there,
        # and its markers carry that epoch again: a partition takes a marker of its epoch.
        new.producer_epoch = min(meta.producer_epoch + 1, MAX_EPOCH)
        # As Kafka's abort with an epoch bump, the epoch before it is the last epoch: the fenced
        # producer itself may still recover with it (KIP-360 InitProducerId with its id and epoch:
        # the aborted transaction's epoch, no second bump), as Kafka 4.4 answers. A kept
        # transaction's (KIP-939) client identity is NextProducerId's: nothing to recover here.
        new.last_producer_id = NO_PRODUCER_ID
        new.last_producer_epoch = NO_PRODUCER_EPOCH if meta.is_kept else meta.producer_epoch
        new.prev_producer_id = NO_PRODUCER_ID  # not a client's EndTxn: no retry may match it
        # Written as no client's version: no client sent an EndTxn for it, so a restarted
        # coordinator reconstructs no client identity (store._ended_by). The producer's own
        # version-2 abort one epoch below is still taken for a retry (end_txn, as Kafka's
        # retryOnEpochBump).
        new.client_transaction_version = 0
        if not meta.is_kept:
            new.next_producer_id, new.next_producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        # A kept transaction's client-facing identity stays NextProducerId/NextProducerEpoch;
        # the abort completes to it, so no id or epoch ever goes back.
        client_id, client_epoch = meta.client_identity
        after = new.next_producer_epoch if meta.is_kept else new.producer_epoch
        if after >= MAX_EPOCH:
            # KAFKA-20090: the identity the abort completes to would be Short.MaxValue, with
            # which no transaction can begin and still be fenced (a late EndTxn of the fenced
            # producer, taken for a retry, was answered with it). The id rotates, as a
            # version-2 EndTxn of an exhausted epoch does (KIP-890): the markers keep the old
            # id, CompleteAbort records NextProducerId at epoch 0, and PrevProducerId keeps the
            # client's old id so that its retried EndTxn is answered with the new one.
            new.next_producer_id, new.next_producer_epoch = self.producer_ids.generate(), 0
            new.prev_producer_id = client_id  # in the log: known again after a restart
            new.last_producer_id, new.last_producer_epoch = client_id, client_epoch
        log.info("event=txn_fence transactional_id=%r producer_id=%d epoch=%d "
                 "next_producer_id=%d", meta.transactional_id, new.producer_id,
                 new.producer_epoch, new.next_producer_id)
        return self._prepare_end(new, commit=False, now_ms=now_ms)

    def _prepare_end(self, new: TxnMetadata, *, commit: bool, now_ms: int) -> TxnMarkers | None:
        """Write PrepareCommit/PrepareAbort (the decision). Without partitions there are no
        markers to write, so CompleteX goes into the same batch and None is returned."""
        new.transition(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
        new.txn_last_update_ms = now_ms
        if new.txn_start_ms < 0 or not new.partitions:
            new.txn_start_ms = now_ms
        if new.partitions:
            self.state_manager.commit(new, transactional_id=new.transactional_id, now_ms=now_ms)
            return self._markers(new)
        done = _completed(new, now_ms)
        self.state_manager.commit(new, done, transactional_id=new.transactional_id, now_ms=now_ms)
        return None

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Sequence[tuple[str, int]], *, now_ms: int,
                       client_transaction_version: int = 0) -> dict[tuple[str, int], ErrorCode]:
        """Add partitions to the transaction (starting it if none is open). One error for all,
        keyed by the caller's own (topic, partition) pairs: plain tuples or TopicPartition.

        `client_transaction_version` is 2 when the broker adds a partition implicitly for a
        KIP-890 client (AddPartitionsToTxn v5+), else 0."""
        error = self._add(transactional_id, producer_id, producer_epoch, partitions, now_ms,
                          client_transaction_version)
        return dict.fromkeys(partitions, error)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str, offsets_partition: TopicPartition, *, now_ms: int,
                    client_transaction_version: int = 0) -> ErrorCode:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction.
        An empty group id is a group like any other, as in Kafka."""
        return self._add(transactional_id, producer_id, producer_epoch, [offsets_partition],
                         now_ms, client_transaction_version)

    def add_to_ongoing(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Sequence[tuple[str, int]], *, now_ms: int) -> ErrorCode:
        """A write the broker makes for a producer joins its open transaction (KIP-1289: the
        `__share_group_state` partition where TxnShareAcknowledge stages acknowledgements), as
        KIP-890's implicit add does for Produce. Unlike Produce it begins no transaction: one
        must be Ongoing for this producer id and epoch, else INVALID_TXN_STATE (or the
        identity's error: PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING). The client's
        transaction version is kept as it is."""
        meta = self._heard_from(transactional_id, producer_id, producer_epoch, now_ms)
        if isinstance(meta, ErrorCode):
            return meta
        if meta.state is not TxnState.ONGOING:
            return ErrorCode.invalid_txn_state
        return self._add(transactional_id, producer_id, producer_epoch, partitions, now_ms,
                         meta.client_transaction_version)

    def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
             partitions: Sequence[tuple[str, int]], now_ms: int, ctv: int) -> ErrorCode:
        meta = self._heard_from(transactional_id, producer_id, producer_epoch, now_ms)
        if isinstance(meta, ErrorCode):
            return meta
        if meta.is_kept:
            # KIP-939: after KeepPreparedTxn only commit/abort may follow; a write under the new
            # identity would get no marker (the markers carry the kept transaction's id).
            return ErrorCode.invalid_txn_state
        wanted = set(partitions)
        if not wanted or (meta.state is TxnState.ONGOING and wanted <= meta.partitions):
            return ErrorCode.none  # nothing new: no record
        new = meta.copy()
        if meta.state.is_idle:
            new.txn_start_ms = now_ms  # a new transaction begins
        new.transition(TxnState.ONGOING)
        new.partitions.update(TopicPartition(*tp) for tp in wanted - new.partitions)
        new.txn_last_update_ms = now_ms
        new.client_transaction_version = ctv
        self.state_manager.commit(new, transactional_id=transactional_id, now_ms=now_ms)
        return ErrorCode.none

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Sequence[tuple[str, int]],
                          ) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn with verifyOnly (KIP-890 part 1): is each partition in the open
        transaction of this producer id and epoch? Writes nothing."""
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.invalid_request)
        meta = self.state_manager.get(transactional_id)
        if meta is not None and meta.is_kept:
            # The kept transaction takes no more writes: from its new owner (only commit/abort
            # may follow) nor from an older instance, which that owner fenced.
            if (producer_id, producer_epoch) == meta.client_identity:
                return dict.fromkeys(partitions, ErrorCode.invalid_txn_state)
            if producer_id in (meta.producer_id, meta.next_producer_id):
                return dict.fromkeys(partitions, ErrorCode.producer_fenced)
        if meta is None or meta.producer_id != producer_id:
            return dict.fromkeys(partitions, ErrorCode.invalid_producer_id_mapping)
        if meta.producer_epoch != producer_epoch:
            return dict.fromkeys(partitions, ErrorCode.producer_fenced)
        if meta.state.is_prepare or meta.state is TxnState.PREPARE_EPOCH_FENCE:
            return dict.fromkeys(partitions, ErrorCode.concurrent_transactions)
        # As Kafka (KIP-890, KAFKA-16314): a partition the transaction does not hold is
        # TRANSACTION_ABORTABLE; the broker answers older Produce versions INVALID_TXN_STATE.
        ongoing = meta.state is TxnState.ONGOING
        return {tp: (ErrorCode.none if ongoing and tp in meta.partitions
                     else ErrorCode.transaction_abortable)
                for tp in partitions}

    # -- TxnHeartbeat (KIP-1309) ------------------------------------------------------------------

    def heartbeat(self, transactional_id: str, producer_id: int, producer_epoch: int, *,
                  now_ms: int) -> ErrorCode:
        """The producer holding this identity is alive: its open transaction's session deadline
        moves to `now_ms` + the session timeout. Writes nothing.

        The identity is checked as for EndTxn: an older epoch (a newer session of the id, or a
        transaction the coordinator aborted) is PRODUCER_FENCED, another producer id
        INVALID_PRODUCER_ID_MAPPING. With no transaction open the answer is NONE (the session
        may begin one; the coordinator learns of it with its first partition); while markers are
        being written, CONCURRENT_TRANSACTIONS."""
        meta = self._heard_from(transactional_id, producer_id, producer_epoch, now_ms)
        return meta if isinstance(meta, ErrorCode) else ErrorCode.none

    def _heard_from(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    now_ms: int) -> TxnMetadata | ErrorCode:
        """The checks of a producer's request within its transaction (KIP-98 steps 1-2, and no
        markers being written): the id's metadata if they pass, and then the producer counts as
        heard from (KIP-1309; memory only, not state); the error to answer otherwise."""
        if not transactional_id:
            return ErrorCode.invalid_request
        meta = self.state_manager.get(transactional_id)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping
        error = _check_identity(meta, producer_id, producer_epoch)
        if error is not None:
            return error
        if meta.state.is_prepare or meta.state is TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        meta.last_heard_ms = now_ms
        return meta

    def _session_expired(self, meta: TxnMetadata, now_ms: int) -> bool:
        """KIP-1309: an Ongoing transaction whose producer was silent for its session timeout.
        Never a 2PC transaction (invariant 5). After a restart the deadline counts from the
        load: the producer gets a whole session to be heard again."""
        if (meta.state is not TxnState.ONGOING or meta.is_two_phase
                or meta.session_timeout_ms == NO_SESSION):
            return False
        return now_ms > max(meta.last_heard_ms, self.loaded_ms) + meta.session_timeout_ms

    # -- EndTxn ---------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                *, bump_epoch: bool, now_ms: int) -> EndResult:
        """EndTxn. `bump_epoch` is KIP-890 part 2 (EndTxn v5+ with transaction.version >= 2): the
        epoch is bumped with the decision and the answer carries the new producer id/epoch."""
        if not transactional_id:
            return EndResult(ErrorCode.invalid_request)
        meta = self.state_manager.get(transactional_id)
        if meta is None:
            return EndResult(ErrorCode.invalid_producer_id_mapping)
        state = meta.state
        # A version-2 client retrying the EndTxn that bumped its epoch names the identity it had
        # before; only the Prepare/Complete state that this EndTxn produced may match it.
        retry = (bump_epoch and meta.client_transaction_version >= 2
                 and (state.is_prepare or state.is_complete)
                 and meta.last_producer_epoch >= 0
                 and (producer_id, producer_epoch) == (meta.last_producer_id,
                                                       meta.last_producer_epoch))
        # Kafka's retryOnEpochBump: any version-2 EndTxn one epoch below a decided transaction's
        # is its retry, whoever decided it; so a producer whose transaction the coordinator
        # aborted on timeout aborts too and goes on with the bumped epoch (KIP-890).
        retry = retry or (bump_epoch and not meta.is_kept
                          and (state.is_prepare or state.is_complete)
                          and producer_id == meta.producer_id
                          and producer_epoch + 1 == meta.producer_epoch)
        # Kafka's retryOnOverflow: the transaction completed to a rotated id (its client's epoch
        # was spent); the client's retry names the old id, kept as PrevProducerId in the log, so
        # it is recognised after a restart too, whoever ended the transaction (the client, or the
        # coordinator's abort: KAFKA-20090).
        retry = retry or (bump_epoch and state.is_complete and meta.producer_epoch == 0
                          and producer_id == meta.prev_producer_id != NO_PRODUCER_ID
                          and producer_id != meta.producer_id
                          and is_epoch_exhausted(producer_epoch))
        if not retry:
            error = _check_identity(meta, producer_id, producer_epoch)
            if error is not None:
                return EndResult(error)
        if state is TxnState.ONGOING:
            return self._end_ongoing(meta, commit, bump_epoch, now_ms)
        if state is TxnState.PREPARE_EPOCH_FENCE:
            return EndResult(ErrorCode.concurrent_transactions)
        if state.is_prepare:
            same = (state is TxnState.PREPARE_COMMIT) == commit
            return EndResult(ErrorCode.concurrent_transactions if same
                             else ErrorCode.invalid_txn_state)
        if state.is_complete:
            same = (state is TxnState.COMPLETE_COMMIT) == commit
            if same and (retry or not bump_epoch):
                return EndResult(ErrorCode.none, meta.producer_id, meta.producer_epoch)
            if not commit and not retry and bump_epoch:
                return self._end_empty_abort(meta, now_ms)
            return EndResult(ErrorCode.invalid_txn_state)
        if state is TxnState.EMPTY and not commit and bump_epoch:
            return self._end_empty_abort(meta, now_ms)
        return EndResult(ErrorCode.invalid_txn_state)

    def _end_ongoing(self, meta: TxnMetadata, commit: bool, bump_epoch: bool,
                     now_ms: int) -> EndResult:
        new = meta.copy()
        if meta.is_kept:
            end_kept(new, bump_epoch, self.producer_ids.generate)
        elif bump_epoch:
            self._bump_for_end(new)
        else:
            new.client_transaction_version = 0
            new.last_producer_id, new.last_producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        markers = self._prepare_end(new, commit=commit, now_ms=now_ms)
        log.debug("event=txn_end transactional_id=%r producer_id=%d epoch=%d commit=%s "
                 "partitions=%d", new.transactional_id, new.producer_id, new.producer_epoch,
                 commit, len(new.partitions))
        return self._end_answer(new, markers)

    def _end_empty_abort(self, meta: TxnMetadata, now_ms: int) -> EndResult:
        """A version-2 client aborts a transaction that added nothing: bump, no markers."""
        new = meta.copy()
        new.partitions.clear()
        self._bump_for_end(new)
        self._prepare_end(new, commit=False, now_ms=now_ms)
        return self._end_answer(new, None)

    def _bump_for_end(self, new: TxnMetadata) -> None:
        # KIP-890: Prepare is written with epoch + 1 (the markers carry it). When the epoch is
        # exhausted the client gets NextProducerId with epoch 0 instead, once the markers are out.
        if is_epoch_exhausted(new.producer_epoch):
            new.next_producer_id, new.next_producer_epoch = self.producer_ids.generate(), 0
        new.last_producer_id, new.last_producer_epoch = new.producer_id, new.producer_epoch
        new.prev_producer_id = NO_PRODUCER_ID  # the client's id is the record's (the seed's -1)
        new.producer_epoch = min(new.producer_epoch + 1, MAX_EPOCH)
        new.client_transaction_version = 2

    @staticmethod
    def _end_answer(new: TxnMetadata, markers: TxnMarkers | None) -> EndResult:
        """The identity the client holds once the transaction is complete (what CompleteX will
        record, see `_completed`), so the broker may answer before the markers are written."""
        if new.next_producer_id != NO_PRODUCER_ID:
            return EndResult(ErrorCode.none, new.next_producer_id, new.next_producer_epoch, markers)
        return EndResult(ErrorCode.none, new.producer_id, new.producer_epoch, markers)

    # -- markers, timers --------------------------------------------------------------------------

    def _markers(self, meta: TxnMetadata) -> TxnMarkers:
        return TxnMarkers(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                          meta.state is TxnState.PREPARE_COMMIT, self.config.coordinator_epoch,
                          meta.sorted_partitions())

    def pending_markers(self) -> list[TxnMarkers]:
        """Every transaction in PrepareCommit/PrepareAbort: its outcome is decided and its markers
        must be written (roll forward after a restart, or a retry after a failed marker write)."""
        return [self._markers(m) for m in self.state_manager.all() if m.state.is_prepare]

    def markers_written(self, transactional_id: str, now_ms: int) -> tuple[int, int]:
        """The broker wrote the markers of a PrepareX transaction: record CompleteX.

        Returns the producer id and epoch now current (a new id after an epoch overflow). Calling
        it again once complete is harmless."""
        meta = self.state_manager.get(transactional_id)
        if meta is None:
            raise TxnStateError(f"markers written for unknown transactional id "
                                f"{transactional_id!r}")
        if meta.state.is_complete:
            return meta.producer_id, meta.producer_epoch
        if not meta.state.is_prepare:
            raise TxnStateError(f"markers written for transactional id {transactional_id!r} in "
                                f"state {meta.state.display_name}")
        done = _completed(meta, now_ms)  # a new version: the current one stays until written
        self.state_manager.commit(done, transactional_id=transactional_id, now_ms=now_ms)
        log.debug("event=txn_complete transactional_id=%r state=%s producer_id=%d epoch=%d",
                 transactional_id, done.state.display_name, done.producer_id, done.producer_epoch)
        return done.producer_id, done.producer_epoch

    def tick(self, now_ms: int) -> list[TxnMarkers]:
        """Abort timed-out transactions and those whose producer's session expired (KIP-1309),
        fencing the producer, and expire idle transactional ids. A 2PC transaction (KIP-939,
        timeout -1) never times out and has no session: only its client or an operator's
        InitProducerId ends it.

        Returns the abort markers the broker must write (then `markers_written`)."""
        markers: list[TxnMarkers] = []
        expiration = self.config.transactional_id_expiration_ms
        for meta in self.state_manager.all():
            txn_id = meta.transactional_id
            try:
                if (meta.state is TxnState.ONGOING and not meta.is_two_phase
                        and now_ms > meta.txn_start_ms + meta.txn_timeout_ms):
                    log.info("event=txn_timeout transactional_id=%r producer_id=%d epoch=%d "
                             "started_ms=%d timeout_ms=%d", txn_id, meta.producer_id,
                             meta.producer_epoch, meta.txn_start_ms, meta.txn_timeout_ms)
                    m = self._fence_and_abort(meta, now_ms)
                    self.expired_aborts["timeout"] += 1
                    if m is not None:
                        markers.append(m)
                elif self._session_expired(meta, now_ms):
                    log.info("event=txn_session_timeout transactional_id=%r producer_id=%d "
                             "epoch=%d last_heard_ms=%d session_timeout_ms=%d", txn_id,
                             meta.producer_id, meta.producer_epoch,
                             max(meta.last_heard_ms, self.loaded_ms), meta.session_timeout_ms)
                    m = self._fence_and_abort(meta, now_ms)
                    self.expired_aborts["session"] += 1
                    if m is not None:
                        markers.append(m)
                elif meta.state.is_idle and now_ms - meta.txn_last_update_ms > expiration:
                    meta.copy().transition(TxnState.DEAD)  # checks the transition
                    self.state_manager.commit(None, transactional_id=txn_id, now_ms=now_ms)
                    log.info("event=txn_id_expired transactional_id=%r producer_id=%d", txn_id,
                             meta.producer_id)
            except (LogError, OSError) as e:
                # Nothing changed in memory; the next tick tries again.
                log.error("event=txn_tick_write_failed transactional_id=%r error=%r", txn_id,
                          str(e))
        return markers

    def next_deadline_ms(self) -> int | None:
        """The earliest time `tick` has a transaction to abort (its timeout or KIP-1309 session
        passed), or None. The broker runs `tick` then, not a cleanup interval later: Kafka's
        bar is an abort at the deadline."""
        deadlines = [
            deadline for meta in self.state_manager.all()
            if meta.state is TxnState.ONGOING and not meta.is_two_phase
            for deadline in (
                meta.txn_start_ms + meta.txn_timeout_ms + 1,  # `tick` aborts once now > this
                max(meta.last_heard_ms, self.loaded_ms) + meta.session_timeout_ms + 1
                if meta.session_timeout_ms != NO_SESSION else None,
            )
            if deadline is not None
        ]
        return min(deadlines, default=None)

    # -- views (admin APIs, recovery on start) ----------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self.state_manager.txn_log.num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return self.state_manager.txn_log.partition(transactional_id)

    def log_for(self, transactional_id: str) -> PartitionLog:
        """The `__transaction_state` partition of this id: sync it before answering a request."""
        return self.state_manager.txn_log.log_for(transactional_id)

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        """A copy of the id's metadata (DescribeTransactions), None for an unknown id."""
        meta = self.state_manager.get(transactional_id)
        return None if meta is None else meta.copy()

    def list_transactions(self, states: set[str] | None = None,
                          producer_ids: set[int] | None = None, duration_filter_ms: int = -1, *,
                          now_ms: int = 0) -> list[TxnMetadata]:
        """ListTransactions: empty or None filters match everything; state names as Kafka's.

        With `duration_filter_ms >= 0` only transactions started more than that long ago are
        listed (KIP-994, the same test as Kafka's, on the start time).
        """
        wanted = {s for s in (TxnState.from_display_name(n) for n in states or ()) if s is not None}
        if states and not wanted:
            return []  # only unknown state names: nothing matches (the caller reports them)
        out = []
        for meta in self.state_manager.all():
            if wanted and meta.state not in wanted:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if duration_filter_ms >= 0 and now_ms - meta.txn_start_ms <= duration_filter_ms:
                continue
            out.append(meta.copy())
        return out

    def ongoing_partitions(self, producer_id: int) -> set[TopicPartition] | None:
        """The partitions of the open transaction of this producer id, or None if it has none.

        On start the broker compares this with the open transactions its partition logs know of:
        one the coordinator does not know can never be completed by it."""
        return self.state_manager.ongoing_partitions(producer_id)

    def transactional_ids(self) -> list[str]:
        return self.state_manager.transactional_ids()


def _valid_producer_id(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's isValidProducerId for InitProducerId with a producer id (KIP-360)."""
    return (meta.producer_epoch == NO_PRODUCER_EPOCH  # just created: any id may recover
            or producer_id == meta.producer_id
            or (meta.is_kept and producer_id == meta.next_producer_id)
            # a retry after the exhausted id was rotated
            or (producer_id == meta.prev_producer_id and is_epoch_exhausted(producer_epoch)))


def _check_identity(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> ErrorCode | None:
    """KIP-98 steps 1-2 of AddPartitionsToTxn/AddOffsetsToTxn/EndTxn."""
    if (meta.state.is_prepare and meta.next_producer_id != NO_PRODUCER_ID
            and (producer_id, producer_epoch) == (meta.next_producer_id,
                                                  meta.next_producer_epoch)):
        # The client already got its next identity with its EndTxn answer while the markers
        # are still being written: ask it to retry, as with the same id.
        return ErrorCode.concurrent_transactions
    current_id, current_epoch = meta.client_identity
    if producer_id != current_id:
        if meta.is_kept and producer_id == meta.producer_id:
            # An older instance: KeepPreparedTxn moved the identity on.
            return ErrorCode.producer_fenced
        return ErrorCode.invalid_producer_id_mapping
    if producer_epoch != current_epoch:
        return ErrorCode.producer_fenced
    return None


def _completed(prepared: TxnMetadata, now_ms: int) -> TxnMetadata:
    """PrepareX -> CompleteX, as a copy of `prepared` (left as it is): partitions cleared; the
    client-facing identity (a rotated id, a kept transaction's owner) becomes ProducerId/
    ProducerEpoch."""
    done = prepared.copy()
    done.transition(TxnState.COMPLETE_COMMIT if prepared.state is TxnState.PREPARE_COMMIT
                    else TxnState.COMPLETE_ABORT)
    done.partitions.clear()
    done.txn_last_update_ms = now_ms
    if done.next_producer_id != NO_PRODUCER_ID:
        done.producer_id, done.producer_epoch = done.next_producer_id, done.next_producer_epoch
        done.next_producer_id, done.next_producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    client = done.last_producer_id
    if client == NO_PRODUCER_ID and prepared.next_producer_id != NO_PRODUCER_ID:
        # The client's identity is not in the log (as in Kafka) but, where it differs from the
        # record's producer id or was rotated by the coordinator's abort, its id is PrevProducerId
        # of the PrepareX record: after a restart a retry naming it is still recognised.
        client = prepared.prev_producer_id
    done.prev_producer_id = client if client not in (NO_PRODUCER_ID, done.producer_id) \
        else NO_PRODUCER_ID
    return done
