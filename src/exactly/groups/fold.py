"""Folding `__consumer_offsets` into state on start, transactional offsets included.

Offsets written by TxnOffsetCommit sit in transactional batches of their producer; a marker
(control batch) in the same partition ends that producer's transaction: COMMIT applies them,
ABORT drops them. The rules are those of Kafka's GroupMetadataManager.loadGroupsAndOffsets.

KIP-848 consumer groups are five record types per group and member (consumer_records.py); the
newest record per key wins, a tombstone deletes, and `ConsumerGroupFold.build` makes the group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exactly.groups.assignors import Assignment
from exactly.groups.codec import (
    GroupKey,
    GroupValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from exactly.groups.consumer_group import ConsumerGroup, ConsumerMember, MemberState
from exactly.groups.consumer_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    ConsumerKey,
    CurrentAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    decode_consumer_value,
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
        self.consumer: dict[str, ConsumerGroupFold] = {}

    def add(self, record: Record, txn: tuple[int, int] | None) -> None:
        assert record.key is not None
        key = decode_key(record.key)
        if isinstance(key, ConsumerKey):
            self.consumer.setdefault(key.group_id, ConsumerGroupFold()).add(key, record.value)
            return
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


@dataclass(slots=True)
class ConsumerGroupFold:
    """The newest consumer-group records of one group, as `OffsetsFold` meets them."""

    metadata: GroupMetadataValue | None = None
    assignment_epoch: int = 0
    members: dict[str, MemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    current: dict[str, CurrentAssignmentValue] = field(default_factory=dict)

    def add(self, key: ConsumerKey, raw: bytes | None) -> None:
        value = None if raw is None else decode_consumer_value(key.record_type, raw)
        kind, member = key.record_type, key.member_id
        if kind == GROUP_METADATA:
            self.metadata = value if isinstance(value, GroupMetadataValue) else None
        elif kind == TARGET_METADATA:
            self.assignment_epoch = value if isinstance(value, int) else 0
        elif kind == MEMBER_METADATA:
            _put(self.members, member, value if isinstance(value, MemberMetadataValue) else None)
        elif kind == TARGET_MEMBER:
            _put(self.targets, member, value if isinstance(value, dict) else None)
        elif kind == CURRENT_ASSIGNMENT:
            _put(self.current, member,
                 value if isinstance(value, CurrentAssignmentValue) else None)

    @property
    def live(self) -> bool:
        return self.metadata is not None

    def build(self, now_ms: int, session_timeout_ms: int) -> ConsumerGroup:
        """The group as the records left it; every member gets a fresh session to come back."""
        assert self.metadata is not None
        group = ConsumerGroup(group_epoch=self.metadata.epoch,
                              assignment_epoch=self.assignment_epoch,
                              metadata_hash=self.metadata.metadata_hash)
        for member_id, meta in self.members.items():
            current = self.current.get(member_id)
            member = ConsumerMember(
                member_id, meta.instance_id, meta.rack_id, meta.client_id, meta.client_host,
                meta.subscribed_topic_names, meta.subscribed_topic_regex,
                meta.rebalance_timeout_ms, meta.server_assignor, classic=meta.classic,
                session_deadline=now_ms + (meta.classic.session_timeout_ms if meta.classic
                                           else session_timeout_ms))
            if current is not None:
                member.member_epoch = current.member_epoch
                member.previous_member_epoch = current.previous_member_epoch
                member.state = MemberState(current.state)
                member.assigned = dict(current.assigned)
                member.pending_revocation = dict(current.pending_revocation)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    member.rebalance_deadline = now_ms + max(member.rebalance_timeout_ms, 0)
            group.put_member(member)
        group.target = {m: dict(a) for m, a in self.targets.items() if m in group.members}
        return group


def _put(table: dict, key: str, value: object | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
