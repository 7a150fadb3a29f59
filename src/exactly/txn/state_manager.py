"""The transaction coordinator's state and its log (Kafka's TransactionStateManager): the current
`TxnMetadata` of every transactional id, loaded from `__transaction_state` on start, each new
version written there before it becomes current, and lookups over them.

It knows no request rules: `TransactionCoordinator` (coordinator.py) holds one and decides what to
write; the theory of operation is in state.py.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from exactly.protocol.structs import TopicPartition
from exactly.txn.codec import TxnCodecError, decode_key, decode_value
from exactly.txn.state import TxnMetadata
from exactly.txn.store import TxnLog, from_value

if TYPE_CHECKING:
    from exactly.log import LogManager

log = logging.getLogger("exactly.txn")

# How every TransactionLogValue begins, versions 0 and 1: version, ProducerId, ProducerEpoch.
_IDENTITY = struct.Struct(">hqh")


class TransactionStateManager:
    def __init__(self, logs: LogManager, num_partitions: int, segment_bytes: int) -> None:
        self.txn_log = TxnLog(logs, num_partitions, segment_bytes)
        self._txns: dict[str, TxnMetadata] = {}
        self._load()

    # -- loading --------------------------------------------------------------------------------

    def _load(self) -> None:
        """KIP-98 "Transaction Coordinator Startup": the newest record per id wins.

        The log holds many records per id (compaction leaves the newest, but the active segments
        and what is not cleaned yet hold history), so only the newest value of each id is
        decoded; of the others just the producer id and epoch at the front, to keep the rule
        that an epoch never goes down for one producer id. Anything unexpected (a record
        without a key, a value that does not decode, a state never logged) sends the load to
        `_load_slowly`, which decodes every record and logs what it skips."""
        newest: dict[bytes, tuple[bytes, int, int, int]] = {}  # key -> value, offset, pid, epoch
        for offset, key, value in self.txn_log.replay():
            if key is None:
                return self._load_slowly()
            if value is None:
                newest.pop(key, None)
                continue
            try:
                _version, producer_id, epoch = _IDENTITY.unpack_from(value)
            except struct.error:
                return self._load_slowly()
            old = newest.get(key)
            if old is not None and old[2] == producer_id and epoch < old[3]:
                return self._load_slowly()  # it logs and keeps the higher epoch
            newest[key] = (value, offset, producer_id, epoch)
        txns: dict[str, TxnMetadata] = {}
        for key, (value, _offset, _pid, _epoch) in newest.items():
            try:
                txn_id = decode_key(key)
                meta = from_value(txn_id, decode_value(value))
            except (TxnCodecError, UnicodeDecodeError, ValueError):
                return self._load_slowly()
            if not meta.state.is_logged:
                return self._load_slowly()
            txns[txn_id] = meta
        self._txns = txns
        log.info("event=txn_state_loaded transactional_ids=%d pending=%d", len(self._txns),
                 sum(1 for m in self._txns.values() if m.state.is_prepare))

    def _load_slowly(self) -> None:
        """Every record decoded in turn, each anomaly logged and skipped: the load of a log in
        which `_load` met one."""
        self._txns = {}
        for offset, key, value in self.txn_log.replay():
            if key is None:
                log.error("event=txn_log_record_without_key offset=%d", offset)
                continue
            try:
                txn_id = decode_key(key)
            except (TxnCodecError, UnicodeDecodeError) as e:
                log.error("event=txn_log_bad_key offset=%d error=%r", offset, str(e))
                continue
            if value is None:
                self._txns.pop(txn_id, None)
                continue
            try:
                meta = from_value(txn_id, decode_value(value))
            except (TxnCodecError, ValueError) as e:
                log.error("event=txn_log_bad_value transactional_id=%r offset=%d error=%r",
                          txn_id, offset, str(e))
                continue
            if not meta.state.is_logged:
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
                          meta.producer_epoch, old.producer_epoch, offset)
                continue
            self._txns[txn_id] = meta
        log.info("event=txn_state_loaded transactional_ids=%d pending=%d", len(self._txns),
                 sum(1 for m in self._txns.values() if m.state.is_prepare))

    # -- reading and writing --------------------------------------------------------------------

    def get(self, transactional_id: str) -> TxnMetadata | None:
        """The current metadata of this id. Not a copy: change a `copy()` and `commit` it."""
        return self._txns.get(transactional_id)

    def all(self) -> list[TxnMetadata]:
        """The current metadata of every id, by transactional id."""
        return [meta for _, meta in sorted(self._txns.items())]

    def commit(self, *versions: TxnMetadata | None, transactional_id: str, now_ms: int) -> None:
        """Write the new version(s) of one id as one batch, then make the last one current; a
        None version is a tombstone (the id expired).

        The in-memory state changes only after the append succeeded: a failed write leaves the
        state as it was, and the caller answers with an error.
        """
        self.txn_log.write(transactional_id, list(versions), now_ms)
        last = versions[-1]
        if last is None:
            self._txns.pop(transactional_id, None)
        else:
            self._txns[transactional_id] = last

    # -- views -----------------------------------------------------------------------------------

    def ongoing_partitions(self, producer_id: int) -> set[TopicPartition] | None:
        """The partitions of the open transaction of this producer id, or None if it has none."""
        for meta in self._txns.values():
            if meta.producer_id == producer_id and meta.state.is_open:
                return set(meta.partitions)
        return None

    def transactional_ids(self) -> list[str]:
        return sorted(self._txns)
