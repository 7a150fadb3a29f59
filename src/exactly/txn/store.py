"""The `__transaction_state` topic: where the transaction coordinator keeps its state.

As in Kafka (KIP-98, "Transaction Log"), the coordinator's state is a fold over this topic: the
newest record per transactional id wins and a None value (tombstone) forgets the id. Writes go
through the ordinary partition log; nothing else holds durable transaction state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from exactly.protocol.partitioning import partition_for
from exactly.protocol.records import Record, build_batch, decode_records, iter_batches
from exactly.txn.codec import TxnLogValue, encode_key, encode_value
from exactly.txn.state import MAX_EPOCH, TxnMetadata, TxnState

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog

TXN_TOPIC = "__transaction_state"

# Kafka keeps this topic forever through compaction; the log layer's time retention is turned off
# (ids expire by the coordinator's own rule, with tombstones).
TXN_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1",
                     "segment.bytes": "104857600"}  # transaction.state.log.segment.bytes

_READ_BYTES = 1024 * 1024

log = logging.getLogger("exactly.txn")


def to_value(meta: TxnMetadata) -> TxnLogValue:
    if meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
        raise ValueError(f"{meta.state.display_name} is never written to the transaction log")
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if meta.state is not TxnState.EMPTY:  # Kafka writes a null partition list for Empty
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = tuple((t, tuple(ps)) for t, ps in by_topic.items())
    return TxnLogValue(meta.producer_id, meta.producer_epoch, meta.txn_timeout_ms, int(meta.state),
                       partitions, meta.txn_last_update_ms, meta.txn_start_ms,
                       meta.prev_producer_id, meta.next_producer_id,
                       meta.client_transaction_version)


def from_value(transactional_id: str, v: TxnLogValue) -> TxnMetadata:
    state = TxnState(v.status)
    partitions = {(t, p) for t, ids in (v.partitions or ()) for p in ids}
    meta = TxnMetadata(transactional_id, v.producer_id, v.producer_epoch, v.txn_timeout_ms, state,
                       v.last_update_ms, v.start_ms, partitions, v.prev_producer_id,
                       v.next_producer_id, client_transaction_version=v.client_transaction_version)
    # The last epoch is not in the log. A version-2 EndTxn recorded the client's id as
    # PrevProducerId; the epoch it used is one below the bumped one (or Short.MaxValue - 1 when the
    # id was rotated), so a retry of that EndTxn is still recognised after a restart.
    if (v.client_transaction_version >= 2 and v.prev_producer_id >= 0
            and (state.is_prepare or state.is_complete)):
        meta.last_producer_epoch = (v.producer_epoch - 1 if v.producer_id == v.prev_producer_id
                                    else MAX_EPOCH - 1)
    return meta


class TxnLog:
    def __init__(self, logs: LogManager, num_partitions: int) -> None:
        from exactly.log.errors import TopicAlreadyExistsError

        self.logs = logs
        info = logs.topic(TXN_TOPIC)
        if info is None:
            try:
                info = logs.create_topic(TXN_TOPIC, num_partitions, dict(TXN_TOPIC_CONFIGS),
                                         internal=True)
            except TopicAlreadyExistsError:
                info = logs.topic(TXN_TOPIC)
                assert info is not None
        # An existing topic keeps its partition count: transactional ids must not move.
        self.num_partitions = info.num_partitions

    def partition(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def log_for(self, transactional_id: str) -> PartitionLog:
        return self.logs.get_log(TXN_TOPIC, self.partition(transactional_id))

    def write(self, transactional_id: str, values: list[TxnMetadata | None],
              now_ms: int) -> None:
        """Append one batch (atomic) of records for this id; None is a tombstone."""
        key = encode_key(transactional_id)
        records = [Record(key, None if m is None else encode_value(to_value(m))) for m in values]
        self.log_for(transactional_id).append(build_batch(records, timestamp=now_ms),
                                              now_ms=now_ms)

    def replay(self) -> Iterator[Record]:
        """Every record of every partition, in offset order per partition."""
        for partition in range(self.num_partitions):
            plog = self.logs.get_log(TXN_TOPIC, partition)
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                data = plog.read(offset, _READ_BYTES)
                if not data:
                    log.error("replay of %s-%d read nothing at offset %d of %d", TXN_TOPIC,
                              partition, offset, plog.log_end_offset)
                    break
                start = offset
                for batch in iter_batches(data):
                    offset = batch.next_offset
                    if batch.is_control:
                        continue
                    yield from decode_records(batch)
                if offset <= start:  # no progress: never spin on a malformed read
                    log.warning("replay of %s-%d stopped at offset %d", TXN_TOPIC, partition,
                                offset)
                    break
