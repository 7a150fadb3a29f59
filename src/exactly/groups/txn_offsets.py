"""Transactional offset commits (KIP-98 TxnOffsetCommit), after Kafka's GroupMetadata.

A TxnOffsetCommit appends the offsets to the group's `__consumer_offsets` partition as one
transactional batch of the producer, and keeps them pending for (group, producer id): OffsetFetch
does not see them and they do not replace committed offsets. When the transaction coordinator has
written the COMMIT or ABORT marker for the producer into that partition, the broker calls
`complete_txn`: the pending offsets become the committed ones, or are dropped. On start the same
happens from the markers found in the log (`fold.py`); transactions still open stay pending.

`TxnOffsets` keeps the pending offsets in their groups (`Group.pending_txn`) and, by producer,
which groups hold some; the groups and the log are the `GroupMetadataManager`'s, held by name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from exactly.groups.fold import apply_txn_offsets
from exactly.groups.group import Group, GroupState
from exactly.groups.metadata_manager import (
    CommitResult,
    GroupMetadataManager,
    OffsetToCommit,
    validate_consumer_commit,
)
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition

log = logging.getLogger("exactly.groups")


class TxnOffsets:
    def __init__(self, group_manager: GroupMetadataManager) -> None:
        self.group_manager = group_manager
        # producer id -> the groups holding pending transactional offsets of that producer.
        self._txn_groups: dict[int, set[str]] = {}
        for group in group_manager.groups.values():  # those left pending by the load
            for producer_id in group.pending_txn:
                self._txn_groups.setdefault(producer_id, set()).add(group.group_id)

    def commit_txn_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int,
        offsets: Mapping[tuple[str, int], OffsetToCommit], *, member_id: str = "",
        generation_id: int = -1, group_instance_id: str | None = None, now_ms: int,
    ) -> CommitResult:
        """TxnOffsetCommit, once the transaction coordinator has vouched for the transaction.

        Appends the offsets as a transactional batch of `producer_id`; they stay pending until
        `complete_txn`. Answer the client only after syncing `result.log` (when not None).
        A group that does not exist is created Empty, as Kafka allows for producers whose
        consumer uses no group management.
        """
        if not group_id:
            return CommitResult({tp: ErrorCode.invalid_group_id for tp in offsets}, None)
        manager = self.group_manager
        group = manager.groups.get(group_id)
        error = _validate_txn_commit(group if group is not None else Group(group_id),
                                     member_id, group_instance_id, generation_id)
        if error is not None:
            return CommitResult({tp: error for tp in offsets}, None)
        errors, written, plog = manager.write_offsets(group_id, offsets, now_ms,
                                                      producer_id=producer_id,
                                                      producer_epoch=producer_epoch)
        if plog is None:
            return CommitResult(errors, None)
        if group is None:
            group = manager.new_group(group_id, now_ms)
        group.pending_txn.setdefault(producer_id, {}).update(written)
        self._txn_groups.setdefault(producer_id, set()).add(group_id)
        return CommitResult(errors, plog)

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool,
                     now_ms: int) -> None:
        """The marker ending `producer_id`'s transaction is in `__consumer_offsets` partition
        `offsets_partition`: apply (commit) or drop (abort) the producer's pending offsets of
        every group in that partition. Calling it again, or for a producer with nothing
        pending, does nothing."""
        groups = self._txn_groups.get(producer_id)
        if not groups:
            return
        partition_for = self.group_manager.partition_for
        for group_id in [g for g in groups if partition_for(g) == offsets_partition]:
            groups.discard(group_id)
            group = self.group_manager.groups.get(group_id)
            pending = group.pending_txn.pop(producer_id, None) if group is not None else None
            if group is None or not pending:
                continue
            if commit:
                apply_txn_offsets(group.offsets, pending)
            log.info("transactional offsets of producer %d for group %s %s (%d partitions)",
                     producer_id, group_id, "committed" if commit else "aborted", len(pending))
        if not groups:
            del self._txn_groups[producer_id]

    def has_pending(self, group_id: str) -> bool:
        """Whether the group holds offsets of a transaction not yet ended."""
        group = self.group_manager.groups.get(group_id)
        return group is not None and bool(group.pending_txn)

    def pending_producers(self, offsets_partition: int) -> set[int]:
        """Producers with pending transactional offsets in this `__consumer_offsets` partition."""
        return {
            producer_id for producer_id, groups in self._txn_groups.items()
            if any(self.group_manager.partition_for(g) == offsets_partition for g in groups)
        }

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions of the group with transactional offsets not yet committed or aborted
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        group = self.group_manager.groups.get(group_id)
        if group is None:
            return set()
        return {tp for offsets in group.pending_txn.values() for tp in offsets}


def _validate_txn_commit(group: Group, member_id: str, instance_id: str | None,
                         generation_id: int) -> ErrorCode | None:
    """Kafka's validateOffsetCommit for a transactional commit. Requests before v3 carry no
    member (""/-1/None) and are accepted whatever the group's state."""
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if group.consumer is not None:  # KIP-848: generation_id carries the member epoch
        return validate_consumer_commit(group, member_id, generation_id, transactional=True,
                                        instance_id=instance_id)
    if generation_id < 0 and group.state is GroupState.EMPTY:
        return None
    if generation_id >= 0 or member_id or instance_id is not None:
        if instance_id is not None and group.static_members.get(instance_id,
                                                                 member_id) != member_id:
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
    return None
