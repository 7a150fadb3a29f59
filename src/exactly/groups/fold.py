"""Folding `__consumer_offsets` into state on start, transactional offsets included.

Offsets written by TxnOffsetCommit sit in transactional batches of their producer; a marker
(control batch) in the same partition ends that producer's transaction: COMMIT applies them,
ABORT drops them. The rules are those of Kafka's GroupMetadataManager.loadGroupsAndOffsets.
"""

from __future__ import annotations

from exactly.groups.codec import (
    GroupKey,
    GroupValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from exactly.groups.group import CommittedOffset
from exactly.protocol.records import Record
from exactly.protocol.structs import TopicPartition


class OffsetsFold:
    """What `__consumer_offsets` says, built record by record (see `GroupMetadataManager._load`)."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupValue | None] = {}
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # (partition, producer id) -> group -> offsets of the producer's open transaction.
        self.pending: dict[tuple[int, int], dict[str, dict[TopicPartition, CommittedOffset]]] = {}

    def add(self, record: Record, txn: tuple[int, int] | None) -> None:
        assert record.key is not None
        key = decode_key(record.key)
        if isinstance(key, GroupKey):
            self.groups[key.group_id] = (None if record.value is None
                                         else decode_group_value(record.value))
            return
        if txn is not None:
            target = self.pending.setdefault(txn, {}).setdefault(key.group_id, {})
        else:
            target = self.offsets.setdefault(key.group_id, {})
        tp = TopicPartition(key.topic, key.partition)
        if record.value is None:
            target.pop(tp, None)
        else:
            v = decode_offset_value(record.value)
            target[tp] = CommittedOffset(v.offset, v.leader_epoch, v.metadata,
                                         v.commit_timestamp, record.offset)

    def end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        by_group = self.pending.pop((partition, producer_id), {})
        if commit:
            for group_id, tps in by_group.items():
                apply_txn_offsets(self.offsets.setdefault(group_id, {}), tps)


def apply_txn_offsets(committed: dict[TopicPartition, CommittedOffset],
                      txn: dict[TopicPartition, CommittedOffset]) -> None:
    """A committed transaction's offsets replace those written before them, not later ones
    (Kafka's completePendingTxnOffsetCommit)."""
    for tp, offset in txn.items():
        current = committed.get(tp)
        if current is None or current.log_offset < offset.log_offset:
            committed[tp] = offset
