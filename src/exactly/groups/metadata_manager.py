"""The group coordinator's state and its log (Kafka's GroupMetadataManager): the groups and their
committed offsets, loaded from `__consumer_offsets` on start, group metadata and offsets written
there, and the APIs that read or write them: OffsetCommit, OffsetFetch, DescribeGroups,
ListGroups, DeleteGroups, OffsetDelete (KIP-496), and the expiry of old offsets.

`GroupCoordinator` (coordinator.py) holds one as `group_manager` and applies the membership rules
to its groups; `TxnOffsets` (txn_offsets.py) holds it too, for transactional offset commits.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from exactly.groups.codec import (
    CodecError,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from exactly.groups.config import GroupConfig
from exactly.groups.consumer_group import ConsumerGroup
from exactly.groups.consumer_records import (
    GROUP_METADATA,
    TARGET_METADATA,
    ConsumerKey,
    ConsumerRecordError,
    encode_key,
)
from exactly.groups.conversion import PROTOCOL_TYPE, decode_subscription
from exactly.groups.fold import OffsetsFold
from exactly.groups.group import CommittedOffset, Group, GroupState, Member
from exactly.groups.store import Appended, OffsetsLog
from exactly.log.errors import InvalidProducerEpochError
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record
from exactly.protocol.structs import TopicPartition

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog

log = logging.getLogger("exactly.groups")


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class CommitResult:
    errors: dict[tuple[str, int], ErrorCode]  # keyed by the caller's own (topic, partition) pairs
    log: PartitionLog | None  # where the commit was appended: sync it before answering


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848), as ListGroups v5 reports it


class GroupMetadataManager:
    def __init__(self, logs: LogManager, config: GroupConfig, *, now_ms: int) -> None:
        self.config = config
        self.store = OffsetsLog(logs, config.offsets_topic_num_partitions,
                                config.offsets_topic_segment_bytes)
        # Every group by id. The coordinator changes membership in place; what must survive a
        # restart is written with `store_group`.
        self.groups: dict[str, Group] = {}
        self._next_expiry_check = now_ms + config.offsets_retention_check_interval_ms
        self._load(now_ms)

    # -- loading ------------------------------------------------------------------------------

    def _load(self, now_ms: int) -> None:
        """Fold `__consumer_offsets` into groups: the newest record per key wins.

        Offsets in a transactional batch wait, per producer, for the marker that ends the
        transaction in that partition: COMMIT applies them, ABORT drops them. Those still
        waiting at the end stay pending, as Kafka's GroupMetadataManager loads them.
        """
        fold = OffsetsFold()
        count = 0
        for batch in self.store.replay():
            if batch.marker is not None:
                fold.end_txn(batch.partition, batch.producer_id, batch.marker)
                continue
            txn = batch.transactional and batch.producer_id >= 0
            for record in batch.records:
                count += 1
                if record.key is None:
                    continue
                try:
                    fold.add(record, (batch.partition, batch.producer_id) if txn else None)
                except (CodecError, ConsumerRecordError) as exc:
                    log.warning("skipping undecodable __consumer_offsets record at offset %d: %s",
                                record.offset, exc)
        pending: dict[str, dict[int, dict[TopicPartition, CommittedOffset]]] = {}
        for (_, producer_id), by_group in fold.pending.items():
            for group_id, tps in by_group.items():
                if tps:
                    pending.setdefault(group_id, {})[producer_id] = dict(tps)
        live = {g for g, v in fold.groups.items() if v is not None}
        consumer = {g for g, c in fold.consumer.items() if c.live}
        for group_id in (live | consumer | {g for g, tps in fold.offsets.items() if tps}
                         | set(pending)):
            group = Group(group_id, state_timestamp=now_ms)
            value = fold.groups.get(group_id)
            if group_id in consumer:
                group.consumer = fold.consumer[group_id].build(
                    now_ms, self.config.consumer_session_timeout_ms)
                group.protocol_type = "consumer"
                group.state = consumer_state(group.consumer)
            elif value is not None:
                self._restore(group, value, now_ms)
            group.offsets.update(fold.offsets.get(group_id, {}))
            group.pending_txn = pending.get(group_id, {})
            self.groups[group_id] = group
        log.info("loaded %d groups from %d __consumer_offsets records (%d with open "
                 "transactional offsets)", len(self.groups), count, len(pending))

    @staticmethod
    def _restore(group: Group, value: GroupValue, now_ms: int) -> None:
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation_id
        group.protocol_name = value.protocol_name
        group.state_timestamp = (value.current_state_timestamp
                                 if value.current_state_timestamp >= 0 else now_ms)
        for mv in value.members:
            # Members get a fresh session to come back and heartbeat, as Kafka gives on load.
            group.add(Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host,
                             mv.rebalance_timeout_ms, mv.session_timeout_ms,
                             group.protocol_type or "",
                             [(value.protocol_name or "", mv.subscription)],
                             assignment=mv.assignment,
                             heartbeat_deadline=now_ms + mv.session_timeout_ms))
        group.leader_id = value.leader_id if value.leader_id in group.members else group.leader_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    # -- writing ------------------------------------------------------------------------------

    def new_group(self, group_id: str, now_ms: int) -> Group:
        """An Empty group, kept in memory only until something of it is written."""
        group = Group(group_id, state_timestamp=now_ms)
        self.groups[group_id] = group
        return group

    def _append(self, group_id: str, records: list[Record], now_ms: int) -> PartitionLog:
        return self.append_batch(group_id, records, now_ms).log

    def append_batch(self, group_id: str, records: list[Record], now_ms: int, *,
                     producer_id: int = -1, producer_epoch: int = -1,
                     transactional: bool = False) -> Appended:
        """Append one batch to the group's partition (see `OffsetsLog.append`)."""
        return self.store.append(group_id, records, now_ms, producer_id=producer_id,
                                 producer_epoch=producer_epoch, transactional=transactional)

    def store_group(self, group: Group, now_ms: int) -> PartitionLog:
        """Write the group's metadata (generation, leader, members, assignments)."""
        protocol = group.protocol_name or ""
        members = tuple(
            MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata_for(protocol),
                        m.assignment)
            for m in group.members.values()
        )
        value = GroupValue(group.protocol_type or "", group.generation_id, group.protocol_name,
                           group.leader_id, group.state_timestamp, members)
        record = Record(encode_group_key(GroupKey(group.group_id)), encode_group_value(value))
        return self._append(group.group_id, [record], now_ms)

    def store_group_quietly(self, group: Group, now_ms: int) -> None:
        # Losing this write only means a restart sees the previous generation, as in Kafka.
        try:
            self.store_group(group, now_ms)
        except Exception:
            log.exception("storing empty group %s failed", group.group_id)

    def partition_for(self, group_id: str) -> int:
        """The number of the `__consumer_offsets` partition that holds this group."""
        return self.store.partition(group_id)

    def log_for(self, group_id: str) -> PartitionLog:
        """The `__consumer_offsets` partition that holds this group."""
        return self.store.log_for(group_id)

    # -- OffsetCommit / OffsetFetch -----------------------------------------------------------

    def commit_offsets(
        self, *, group_id: str, member_id: str, group_instance_id: str | None,
        generation_id: int, offsets: Mapping[tuple[str, int], OffsetToCommit], now_ms: int,
        api_version: int = 9,
    ) -> CommitResult:
        """Validate, append to the log, then apply. Answer the client only after syncing
        `result.log` (when not None). `generation_id` is the member epoch for a consumer group
        (KIP-848), whose members must use OffsetCommit v9+ (`api_version`)."""
        group = self.groups.get(group_id)
        error: ErrorCode | None = None
        if group is not None and group.consumer is not None:
            error = validate_consumer_commit(group, member_id, generation_id,
                                             transactional=False, api_version=api_version)
        elif group is None:
            # generation < 0: a standalone consumer storing offsets without group management.
            if generation_id >= 0:
                error = ErrorCode.illegal_generation
        elif group.state is GroupState.DEAD:
            error = ErrorCode.coordinator_not_available
        elif group_instance_id is not None and group.static_members.get(
                group_instance_id, member_id) != member_id:
            error = ErrorCode.fenced_instance_id
        elif generation_id < 0 and group.state is GroupState.EMPTY:
            pass
        elif member_id not in group.members:
            error = ErrorCode.unknown_member_id
        elif generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        elif group.state is GroupState.COMPLETING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            return CommitResult({tp: error for tp in offsets}, None)

        errors, written, plog = self.write_offsets(group_id, offsets, now_ms)
        if plog is None:
            return CommitResult(errors, None)
        if group is None:
            group = self.new_group(group_id, now_ms)
        elif group.consumer is None and member_id in group.members:
            member = group.members[member_id]
            member.heartbeat_deadline = now_ms + member.session_timeout_ms
        group.offsets.update(written)
        return CommitResult(errors, plog)

    def write_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], OffsetToCommit],
                      now_ms: int, *, producer_id: int = -1, producer_epoch: int = -1,
                      ) -> tuple[dict[tuple[str, int], ErrorCode],
                                 dict[TopicPartition, CommittedOffset], PartitionLog | None]:
        """Check a commit and append what passes as one batch, transactional with a producer id
        (TxnOffsetCommit). Returns the error of every partition, the offsets written with their
        log positions, and the partition appended to (None if nothing was); the caller decides
        where the written offsets go."""
        errors, accepted = self._check_offsets(offsets, now_ms)
        if not accepted:
            return errors, {}, None
        transactional = producer_id >= 0
        try:
            appended = self.append_batch(group_id, offset_records(group_id, accepted), now_ms,
                                         producer_id=producer_id, producer_epoch=producer_epoch,
                                         transactional=transactional)
        except InvalidProducerEpochError as exc:
            # The partition has seen a newer epoch of this producer: a zombie.
            log.info("transactional offsets of group %s refused: %s", group_id, exc)
            errors.update({tp: ErrorCode.invalid_producer_epoch for tp in accepted})
            return errors, {}, None
        except Exception as exc:
            log.exception("appending %soffsets of group %s failed",
                          "transactional " if transactional else "", group_id)
            code = append_error(exc)
            errors.update({tp: code for tp in accepted})
            return errors, {}, None
        errors.update({tp: ErrorCode.none for tp in accepted})
        return errors, with_log_offsets(accepted, appended.base_offset), appended.log

    def _check_offsets(self, offsets: Mapping[tuple[str, int], OffsetToCommit], now_ms: int
                       ) -> tuple[dict[tuple[str, int], ErrorCode],
                                  dict[tuple[str, int], CommittedOffset]]:
        """Per-partition checks of a commit: (errors, accepted offsets)."""
        errors: dict[tuple[str, int], ErrorCode] = {}
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        for tp, entry in offsets.items():
            topic, partition = tp
            info = self.store.logs.topic(topic)
            metadata = entry.metadata or ""
            if info is None or not 0 <= partition < info.num_partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                accepted[tp] = CommittedOffset(entry.offset, entry.leader_epoch, metadata, now_ms)
        return errors, accepted

    def fetch_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets (None where nothing is committed); `partitions=None` means all."""
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return {tp: offset for tp, offset in committed.items()}
        return {tp: committed.get(TopicPartition(*tp)) for tp in partitions}

    def validate_offset_fetch(self, group_id: str, member_id: str | None,
                              member_epoch: int) -> ErrorCode:
        """OffsetFetch v9 from a consumer-group member (Kafka's ConsumerGroup.validateOffsetFetch):
        epoch -1 (an admin client, older versions) is always allowed."""
        group = self.groups.get(group_id)
        if member_epoch == -1 or group is None or group.consumer is None:
            return ErrorCode.none
        member = group.consumer.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member.member_epoch != member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    # -- DescribeGroups / ListGroups / DeleteGroups -------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None or group.consumer is not None:
            # Kafka's DescribeGroups (v0-5) answers a consumer group as one that does not exist:
            # it is described by ConsumerGroupDescribe.
            return GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or ""
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.metadata_for(protocol) if stable else b"",
                              m.assignment if stable else b"")
            for m in group.members.values()
        )
        return GroupDescription(group_id, group.state.value, group.protocol_type or "",
                                protocol if stable else "", members)

    def list_groups(self, states: set[str] | None = None) -> list[GroupListing]:
        """All groups, or those whose state is in `states` (compared case-insensitively)."""
        wanted = {s.lower() for s in states} if states else None
        return [
            GroupListing(g.group_id, g.protocol_type or "", g.state.value, g.group_type)
            for g in self.groups.values()
            if wanted is None or g.state.value.lower() in wanted
        ]

    def delete_groups(self, group_ids: list[str], now_ms: int) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.group_id_not_found
            elif group.state is not GroupState.EMPTY or group.pending_txn:
                # Offsets of an open transaction would come back when it commits.
                results[group_id] = ErrorCode.non_empty_group
            else:
                try:
                    self._remove_group(group, list(group.offsets), now_ms)
                except Exception as exc:
                    log.exception("deleting group %s failed", group_id)
                    results[group_id] = append_error(exc)
                else:
                    results[group_id] = ErrorCode.none
        return results

    def _remove_group(self, group: Group, expired: list[TopicPartition], now_ms: int,
                      *, whole_group: bool = True) -> None:
        """Write tombstones for offsets (and the group), then forget them."""
        records = offset_tombstones(group.group_id, expired)
        if whole_group:
            records.append(Record(encode_group_key(GroupKey(group.group_id)), None))
            if group.consumer is not None:
                records += consumer_tombstones(group.group_id)
        if records:
            self._append(group.group_id, records, now_ms)
        for tp in expired:
            group.offsets.pop(tp, None)
        if whole_group:
            group.transition(GroupState.DEAD, now_ms)
            self.groups.pop(group.group_id, None)

    # -- OffsetDelete -------------------------------------------------------------------------

    def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]],
                       now_ms: int) -> tuple[ErrorCode, CommitResult]:
        """OffsetDelete (KIP-496), by Kafka's rules: the group must exist; a live classic group
        must use the consumer protocol (else NON_EMPTY_GROUP); a partition of a topic the live
        group subscribes to gets GROUP_SUBSCRIBED_TO_TOPIC; the others' committed offsets get
        tombstones (a partition with none is simply NONE). Returns the group's error and the
        partitions' errors; sync `log` before answering."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, CommitResult({}, None)
        if (group.consumer is None and group.state is not GroupState.EMPTY
                and group.protocol_type != PROTOCOL_TYPE):
            return ErrorCode.non_empty_group, CommitResult({}, None)
        subscribed = _subscribed_topics(group)
        errors = {tp: ErrorCode.group_subscribed_to_topic if subscribed(tp[0]) else ErrorCode.none
                  for tp in partitions}
        doomed = [TopicPartition(*tp) for tp, error in errors.items()
                  if error is ErrorCode.none and TopicPartition(*tp) in group.offsets]
        if not doomed:
            return ErrorCode.none, CommitResult(errors, None)
        try:
            plog = self._append(group_id, offset_tombstones(group_id, doomed), now_ms)
        except Exception as exc:
            log.exception("deleting offsets of group %s failed", group_id)
            return append_error(exc), CommitResult({}, None)
        for tp in doomed:
            group.offsets.pop(tp, None)
        log.info("deleted the offsets of %d partitions of group %s", len(doomed), group_id)
        return ErrorCode.none, CommitResult(errors, plog)

    # -- offsets retention --------------------------------------------------------------------

    def maybe_expire_offsets(self, now_ms: int) -> None:
        """`expire_offsets` once per offsets.retention.check.interval.ms (from `tick`)."""
        if now_ms < self._next_expiry_check:
            return
        self._next_expiry_check = now_ms + self.config.offsets_retention_check_interval_ms
        self.expire_offsets(now_ms)

    def expire_offsets(self, now_ms: int) -> None:
        """Kafka's rule (KIP-211): offsets of an Empty group expire `offsets_retention_ms` after
        the group became empty; a standalone group's, that long after their commit. An Empty
        group left with no offsets is removed."""
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY or group.pending_members or group.pending_txn:
                continue
            managed = group.protocol_type is not None
            expired = [
                tp for tp, c in group.offsets.items()
                if (group.state_timestamp if managed and group.state_timestamp >= 0
                    else c.commit_timestamp) + retention <= now_ms
            ]
            whole = len(expired) == len(group.offsets)
            try:
                self._remove_group(group, expired, now_ms, whole_group=whole)
            except Exception:
                log.exception("expiring offsets of group %s failed", group.group_id)
            else:
                if expired:
                    log.info("expired %d offsets of group %s", len(expired), group.group_id)


def validate_consumer_commit(group: Group, member_id: str, member_epoch: int, *,
                             transactional: bool, api_version: int = 9,
                             instance_id: str | None = None) -> ErrorCode | None:
    """Kafka's ConsumerGroup.validateOffsetCommit: the member must exist with this epoch.

    A stale epoch is STALE_MEMBER_EPOCH for OffsetCommit; TxnOffsetCommit has no such error
    (older clients would not understand it), so Kafka answers ILLEGAL_GENERATION there, and so
    do we. Epoch -1 commits (admin, standalone) are allowed while the group has no members."""
    cg = group.consumer
    assert cg is not None
    if member_epoch < 0 and not cg.members:
        return None
    if transactional and member_epoch == -1 and not member_id and instance_id is None:
        return None  # TxnOffsetCommit before v3 carries no member
    member = cg.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    classic = member.classic is not None  # a classic member commits the classic way
    if not transactional and not classic and api_version < 9:
        return ErrorCode.unsupported_version
    if member_epoch != member.member_epoch:
        if transactional or classic:
            return ErrorCode.illegal_generation
        return ErrorCode.stale_member_epoch
    return None


def _subscribed_topics(group: Group) -> Callable[[str], bool]:
    """Whether the live group consumes a topic (Kafka's isSubscribedToTopic): a consumer group's
    members by name or regex; a classic consumer-protocol group's members by their
    subscription metadata (undecodable metadata subscribes to nothing, as in Kafka)."""
    if group.consumer is not None:
        members = list(group.consumer.members.values())
        names = {t for m in members for t in m.subscribed_topic_names}
        patterns = [m.subscribed_topic_regex for m in members if m.subscribed_topic_regex]

        def matches(topic: str, pattern: str) -> bool:
            try:
                return re.fullmatch(pattern, topic) is not None
            except re.error:
                return False

        return lambda topic: topic in names or any(matches(topic, p) for p in patterns)
    if group.state is GroupState.EMPTY:
        return lambda topic: False
    topics: set[str] = set()
    for member in group.members.values():
        metadata = (member.metadata_for(group.protocol_name) if group.protocol_name
                    else next((m for _, m in member.protocols), b""))
        try:
            topics.update(decode_subscription(metadata)[0])
        except ValueError:
            continue
    return topics.__contains__


def offset_tombstones(group_id: str, partitions: Iterable[tuple[str, int]]) -> list[Record]:
    """The records that delete these committed offsets of a group."""
    return [Record(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in partitions]


def consumer_state(group: ConsumerGroup) -> GroupState:
    """The GroupState of a consumer group, by Kafka's rules (`ConsumerGroup.state_name`)."""
    return GroupState(group.state_name())


def consumer_tombstones(group_id: str) -> list[Record]:
    """The records that delete an empty consumer group (its members are gone already)."""
    return [Record(encode_key(ConsumerKey(kind, group_id)), None)
            for kind in (TARGET_METADATA, GROUP_METADATA)]


def offset_records(group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset]
                   ) -> list[Record]:
    """One record per offset, in the order of `offsets` (see `with_log_offsets`)."""
    return [
        Record(encode_offset_key(OffsetKey(group_id, topic, partition)),
               encode_offset_value(OffsetValue(c.offset, c.leader_epoch, c.metadata,
                                               c.commit_timestamp)))
        for (topic, partition), c in offsets.items()
    ]


def with_log_offsets(offsets: Mapping[tuple[str, int], CommittedOffset], base_offset: int
                     ) -> dict[TopicPartition, CommittedOffset]:
    """The offsets with their log positions, as `offset_records` laid them out from base."""
    return {TopicPartition(*tp): replace(c, log_offset=base_offset + i)
            for i, (tp, c) in enumerate(offsets.items())}


def append_error(exc: Exception) -> ErrorCode:
    """A failed append to `__consumer_offsets`, as OffsetCommit reports it (after Kafka)."""
    code = getattr(exc, "error_code", None)
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.invalid_commit_offset_size
    # Anything else (a disk error, a missing partition) is retriable from the client's side.
    return ErrorCode.coordinator_not_available
