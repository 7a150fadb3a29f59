"""The coordinator's cache of transaction metadata: loading it from `__transaction_state`,
writing changes to it, and the read-only views (admin APIs, recovery on start).

The request handling rules are in `coordinator.py`, a subclass, so each file stays about one
thing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from exactly.txn.codec import TxnCodecError, decode_key, decode_value
from exactly.txn.state import TopicPartition, TxnConfig, TxnMarkers, TxnMetadata, TxnState
from exactly.txn.store import TxnLog, from_value

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog
    from exactly.txn.producer_ids import ProducerIdManager

log = logging.getLogger("exactly.txn")

# States in which a transaction holds partitions whose markers are not written yet.
_OPEN_STATES = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                TxnState.PREPARE_EPOCH_FENCE)


class CoordinatorBase:
    def __init__(self, logs: LogManager, producer_ids: ProducerIdManager, config: TxnConfig, *,
                 now_ms: int) -> None:
        self.config = config
        self.producer_ids = producer_ids
        self.loaded_ms = now_ms
        self._log = TxnLog(logs, config.num_partitions)
        self._txns: dict[str, TxnMetadata] = {}
        self._load()

    # -- loading --------------------------------------------------------------------------------

    def _load(self) -> None:
        """KIP-98 "Transaction Coordinator Startup": the newest record per id wins."""
        for record in self._log.replay():
            if record.key is None:
                log.error("event=txn_log_record_without_key offset=%d", record.offset)
                continue
            try:
                txn_id = decode_key(record.key)
            except (TxnCodecError, UnicodeDecodeError) as e:
                log.error("event=txn_log_bad_key offset=%d error=%r", record.offset, str(e))
                continue
            if record.value is None:
                self._txns.pop(txn_id, None)
                continue
            try:
                meta = from_value(txn_id, decode_value(record.value))
            except (TxnCodecError, ValueError) as e:
                log.error("event=txn_log_bad_value transactional_id=%r offset=%d error=%r",
                          txn_id, record.offset, str(e))
                continue
            if meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
                log.error("event=txn_log_unexpected_state transactional_id=%r state=%s",
                          txn_id, meta.state.display_name)
                continue
            old = self._txns.get(txn_id)
            if (old is not None and old.producer_id == meta.producer_id
                    and meta.producer_epoch < old.producer_epoch):
                # KIP-98 step 1a: an epoch never goes down for one producer id; the log is
                # corrupt. Keep the higher epoch, which fences whoever might hold the lower one.
                log.error("event=txn_log_epoch_regression transactional_id=%r producer_id=%d "
                          "epoch=%d previous_epoch=%d offset=%d", txn_id, meta.producer_id,
                          meta.producer_epoch, old.producer_epoch, record.offset)
                continue
            self._txns[txn_id] = meta
        log.info("event=txn_state_loaded transactional_ids=%d pending=%d", len(self._txns),
                 sum(1 for m in self._txns.values() if m.state.is_prepare))

    # -- writing --------------------------------------------------------------------------------

    def _commit(self, *versions: TxnMetadata | None, transactional_id: str, now_ms: int) -> None:
        """Write the new version(s) of one id as one batch, then make the last one current.

        The in-memory state changes only after the append succeeded: a failed write leaves the
        coordinator as it was, and the caller answers with an error.
        """
        self._log.write(transactional_id, list(versions), now_ms)
        last = versions[-1]
        if last is None:
            self._txns.pop(transactional_id, None)
        else:
            self._txns[transactional_id] = last

    def _markers(self, meta: TxnMetadata) -> TxnMarkers:
        return TxnMarkers(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                          meta.state is TxnState.PREPARE_COMMIT, self.config.coordinator_epoch,
                          meta.sorted_partitions())

    # -- views ----------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self._log.num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return self._log.partition(transactional_id)

    def log_for(self, transactional_id: str) -> PartitionLog:
        return self._log.log_for(transactional_id)

    def pending_markers(self) -> list[TxnMarkers]:
        """Every transaction in PrepareCommit/PrepareAbort: its outcome is decided and its markers
        must be written (roll forward after a restart, or a retry after a failed marker write)."""
        return [self._markers(m) for _, m in sorted(self._txns.items()) if m.state.is_prepare]

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        meta = self._txns.get(transactional_id)
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
        for txn_id, meta in sorted(self._txns.items()):
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
        for meta in self._txns.values():
            if meta.producer_id == producer_id and meta.state in _OPEN_STATES:
                return set(meta.partitions)
        return None

    def transactional_ids(self) -> list[str]:
        return sorted(self._txns)
