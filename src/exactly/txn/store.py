"""The `__transaction_state` topic: where the transaction coordinator keeps its state.

As in Kafka (KIP-98, "Transaction Log"), the coordinator's state is a fold over this topic: the
newest record per transactional id wins and a None value (tombstone) forgets the id. Writes go
through the ordinary partition log; nothing else holds durable transaction state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from exactly.log.internal_topic import DEFAULT_SEGMENT_BYTES, InternalTopic
from exactly.protocol.records import Record, build_own_batch, iter_keys_values
from exactly.protocol.structs import TopicPartition
from exactly.txn.codec import TxnLogValue, encode_key, encode_value
from exactly.txn.state import MAX_EPOCH, TxnMetadata, TxnState

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog

TXN_TOPIC = "__transaction_state"


log = logging.getLogger("exactly.txn")


def to_value(meta: TxnMetadata) -> TxnLogValue:
    if not meta.state.is_logged:
        raise ValueError(f"{meta.state.display_name} is never written to the transaction log")
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if meta.state is not TxnState.EMPTY:  # Kafka writes a null partition list for Empty
        partitions = _by_topic(meta.partitions)
    return TxnLogValue(meta.producer_id, meta.producer_epoch, meta.txn_timeout_ms, int(meta.state),
                       partitions, meta.txn_last_update_ms, meta.txn_start_ms,
                       meta.prev_producer_id, meta.next_producer_id,
                       meta.client_transaction_version, meta.next_producer_epoch,
                       meta.session_timeout_ms)


def _by_topic(partitions: set[TopicPartition]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The partitions as (topic, partition ids) per topic, in order."""
    if len(partitions) == 1:  # as in most transactions: nothing to sort or group
        ((topic, partition),) = partitions
        return ((topic, (partition,)),)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return tuple((t, tuple(ps)) for t, ps in by_topic.items())


def from_value(transactional_id: str, v: TxnLogValue) -> TxnMetadata:
    state = TxnState(v.status)
    partitions = {TopicPartition(t, p) for t, ids in (v.partitions or ()) for p in ids}
    next_epoch = v.next_producer_epoch
    if v.next_producer_id >= 0 and next_epoch < 0:
        next_epoch = 0  # written before KIP-939: NextProducerId only came with an epoch of 0
    meta = TxnMetadata(transactional_id, v.producer_id, v.producer_epoch, v.txn_timeout_ms, state,
                       v.last_update_ms, v.start_ms, partitions, v.prev_producer_id,
                       v.next_producer_id, next_epoch,
                       client_transaction_version=v.client_transaction_version,
                       session_timeout_ms=v.session_timeout_ms)
    if v.client_transaction_version >= 2 and (state.is_prepare or state.is_complete):
        meta.last_producer_id, meta.last_producer_epoch = _ended_by(meta)
    return meta


def _ended_by(meta: TxnMetadata) -> tuple[int, int]:
    """The identity the client used in the version-2 EndTxn that wrote this PrepareX/CompleteX
    (it is not in the log, as in Kafka), so that a retry of that EndTxn is still recognised after
    a restart. The coordinator's own aborts (timeout, fence) are written with
    ClientTransactionVersion 0 and never get here."""
    client_id = meta.prev_producer_id if meta.prev_producer_id >= 0 else meta.producer_id
    if meta.state.is_prepare:
        if meta.next_producer_id < 0:
            return client_id, meta.producer_epoch - 1  # the bump of KIP-890
        if meta.next_producer_id == client_id:
            # A kept transaction's commit (KIP-939): the client goes on with its id, one up.
            return client_id, meta.next_producer_epoch - 1
    elif client_id == meta.producer_id:
        return client_id, meta.producer_epoch - 1
    # The client's epoch was exhausted and its id rotated. A vanilla client holds at most
    # Short.MaxValue - 1; one that got Short.MaxValue from InitProducerId(KeepPreparedTxn) is
    # recognised by the coordinator's memory only, not after a restart.
    return client_id, MAX_EPOCH - 1


class TxnLog:
    def __init__(self, logs: LogManager, num_partitions: int,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.topic = InternalTopic(logs, TXN_TOPIC, num_partitions, segment_bytes=segment_bytes)
        self.num_partitions = self.topic.num_partitions

    def partition(self, transactional_id: str) -> int:
        return self.topic.partition(transactional_id)

    def log_for(self, transactional_id: str) -> PartitionLog:
        return self.topic.log_for(transactional_id)

    def write(self, transactional_id: str, values: list[TxnMetadata | None],
              now_ms: int) -> None:
        """Append one batch (atomic) of records for this id; None is a tombstone."""
        key = encode_key(transactional_id)
        records = [Record(key, None if m is None else encode_value(to_value(m))) for m in values]
        self.log_for(transactional_id).append_own(build_own_batch(records, timestamp=now_ms),
                                                  now_ms=now_ms)

    def replay(self) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of every record of every partition, in offset order per
        partition."""
        for _partition, batch in self.topic.batches():
            if not batch.is_control:
                yield from iter_keys_values(batch)
