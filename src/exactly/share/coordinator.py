"""The share coordinator: share groups (ShareGroupHeartbeat, KIP-932), their share-partitions,
share sessions, and their durable state in `__share_group_state`, in one process.

Sans-IO: the time is passed in; what must be durable before a client is answered comes back as
`Written` entries whose logs the caller syncs under the flush policy. Kafka splits this work
between the group coordinator (membership), the share-partition leader (`SharePartitionManager`)
and the share coordinator (`ShareCoordinatorShard`, the persister); on one node they are
collaborators held by name here: `store` (state_store.py), `sessions` (sessions.py), and one
`SharePartition` (partition.py) per initialized share-partition.

Theory of operation
-------------------

Membership (group.py): a heartbeat with member epoch 0 joins, -1 leaves, any other must equal
the member's epoch (else FENCED_MEMBER_EPOCH; an unknown member id gets UNKNOWN_MEMBER_ID and
rejoins). Joins, leaves, subscription changes and session timeouts bump the group epoch and
recompute the assignment. A member removed by a timeout loses its share session and its
acquisitions are released.

Share sessions (sessions.py): leaving the group does not end one, as in Kafka; epoch -1 does, and
so does the close of the connection that opened it (`connection_closed`, KAFKA-19015). Either
way (`close_session`) what the member holds on the session's partitions is released at once, as
Kafka's releaseSession does: delivered again, with its delivery count. Records a transaction
holds (TX_PENDING) are the transaction's, not the session's: they stay held until its marker.

Share-partitions: the first ShareFetch of a group for a partition initializes it, at the offset
`share.auto.offset.reset` gives (latest: the high watermark; earliest: the log start; by_duration:
the first offset at or after now - duration), and writes that first snapshot before anything is
delivered. Acknowledgements, releases and lock expiries are written before they are answered.

Transactional acknowledgements (KIP-1289): `stage_txn` checks the member (at staging, as
Kafka checks a consumer-group member's TxnOffsetCommit: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH
for an epoch ahead of the member's, STALE_MEMBER_EPOCH for one behind) and the records, writes
what the commit would give in the transaction's batch (state_store.py) and holds the records
TX_PENDING; the broker has already added the share-partition's state partition to the
transaction. `complete_txn`, called for each COMMIT/ABORT marker written to a state partition,
applies or releases them and writes the result as an ordinary update.

What outlives a restart: every initialized share-partition's state (its ShareSnapshot and
ShareUpdates), and each group with its config overrides (the ShareGroupConfigKey record, written
when the group is created and whenever its configs change). Members do not: they rejoin, as
clients do on UNKNOWN_MEMBER_ID, and what they had acquired is AVAILABLE again. What an open
transaction staged is TX_PENDING again (its share-partitions loaded at start), until the
transaction coordinator's roll-forward or abort writes the marker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode
from exactly.share.config import (
    EARLIEST,
    GROUP_CONFIG_KEYS,
    LATEST,
    GroupSettings,
    ShareConfig,
    parse_by_duration,
    validate_group_config,
)
from exactly.share.group import ASSIGNOR, Assignment, ShareGroup, ShareMember, TopicLookup
from exactly.share.partition import AckBatch, Limits, SharePartition, StateChange
from exactly.share.sessions import ShareSession, ShareSessionCache
from exactly.share.state_store import ShareKey, ShareStateStore, Written

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog

log = logging.getLogger("exactly.share")

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    message: str | None = None


class ShareCoordinator:
    def __init__(self, logs: LogManager, config: ShareConfig, *, now_ms: int) -> None:
        self.config = config
        self.logs = logs
        self.store = ShareStateStore(logs, config.state_topic_num_partitions,
                                     config.state_topic_segment_bytes,
                                     config.updates_per_snapshot)
        self.sessions = ShareSessionCache(config.max_share_sessions)
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[ShareKey, SharePartition] = {}
        # Config overrides of groups that are not share groups (KIP-848's consumer.* configs):
        # kept in the same store, validated by the server's config handler.
        self.other_configs: dict[str, dict[str, str]] = {}
        for group_id, configs in self.store.group_configs.items():
            if configs and not set(configs) <= set(GROUP_CONFIG_KEYS):
                self.other_configs[group_id] = dict(configs)
                continue
            self.groups[group_id] = ShareGroup(group_id, configs=dict(configs))
        for group_id, _, _ in self.store.states:
            self.groups.setdefault(group_id, ShareGroup(group_id))
        for producer_id, by_key in self.store.open_txns.items():
            for key, batches in by_key.items():
                sp = self._load(key)
                if sp is not None:
                    sp.hold_replayed(producer_id, batches)
        log.info("event=share_state_loaded groups=%d share_partitions=%d", len(self.groups),
                 len(self.store.states))

    # -- queries ------------------------------------------------------------------------------

    def is_share_group(self, group_id: str) -> bool:
        """Is `group_id` a share group? (Share, consumer and classic groups share one namespace.)"""
        return group_id in self.groups

    def lookup(self, topic: str) -> tuple[uuid.UUID, int] | None:
        """A topic's id and partition count; None if it does not exist."""
        info = self.logs.topic(topic)
        return None if info is None else (info.topic_id, info.num_partitions)

    def settings(self, group_id: str) -> GroupSettings:
        group = self.groups.get(group_id)
        return GroupSettings.of(self.config, group.configs if group else {})

    def _limits(self, group_id: str) -> Limits:
        s = self.settings(group_id)
        return Limits(s.record_lock_duration_ms, s.delivery_count_limit, s.max_record_locks)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    # -- ShareGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int,
                  subscribed: Sequence[str] | None, rack_id: str | None, client_id: str,
                  client_host: str, now_ms: int) -> tuple[HeartbeatResult, list[Written]]:
        written: list[Written] = []
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                return HeartbeatResult(ErrorCode.none, member_id, LEAVE_EPOCH), written
            # As Kafka: leaving the group does not close the member's share session; what it
            # acquired stays acquired (until the session closes or the locks expire), so its
            # acknowledgements sent after the leave still apply.
            written += self._remove_member(group, member_id, now_ms, close_session=False)
            return HeartbeatResult(ErrorCode.none, member_id, LEAVE_EPOCH), written
        if member_epoch == JOIN_EPOCH and not subscribed:
            return HeartbeatResult(ErrorCode.invalid_request, message=(
                "SubscribedTopicNames must be given, and not empty, when joining")), written
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
            written.append(self.store.write_group(group_id, {}, now_ms))
        settings = self.settings(group_id)
        member = group.members.get(member_id)
        if member_epoch == JOIN_EPOCH and group.group_epoch == 0 and not group.members:
            group.group_epoch += 1  # as Kafka 4.4: a new group is at epoch 1, the join bumps it
        if member_epoch == JOIN_EPOCH:
            if member is None:
                if len(group.members) >= self.config.max_size:
                    return HeartbeatResult(ErrorCode.group_max_size_reached, message=(
                        f"share group {group_id} has its {self.config.max_size} members "
                        "(group.share.max.size)")), written
                # v1: the client names itself (a UUID); one that does not gets one
                member = ShareMember(member_id or str(uuid.uuid4()), 0, (), client_id,
                                     client_host, rack_id, 0)
                group.members[member.member_id] = member
        elif member is None:
            return HeartbeatResult(ErrorCode.unknown_member_id, message=(
                f"member {member_id} is not in share group {group_id}: rejoin with epoch 0")
            ), written
        elif member_epoch != member.member_epoch:
            return HeartbeatResult(ErrorCode.fenced_member_epoch, message=(
                f"member epoch {member_epoch} is not {member.member_epoch}: rejoin with epoch 0")
            ), written
        member.deadline_ms = now_ms + settings.session_timeout_ms
        new_subscription = tuple(sorted(set(subscribed))) if subscribed is not None else None
        if (member_epoch == JOIN_EPOCH or
                (new_subscription is not None and new_subscription != member.subscribed)):
            if new_subscription is not None:
                member.subscribed = new_subscription
            group.reassign(self.lookup)
        elif self._assignment_stale(group, self.lookup):
            group.reassign(self.lookup)  # a subscribed topic was created or grew
        member.member_epoch = group.group_epoch
        return HeartbeatResult(ErrorCode.none, member.member_id, member.member_epoch,
                               settings.heartbeat_interval_ms, member.assignment), written

    @staticmethod
    def _assignment_stale(group: ShareGroup, lookup: TopicLookup) -> bool:
        have: dict[uuid.UUID, set[int]] = {}
        for m in group.members.values():
            for topic_id, parts in m.assignment.items():
                have.setdefault(topic_id, set()).update(parts)
        for topic in group.subscribed_topics():
            found = lookup(topic)
            if found is not None and len(have.get(found[0], ())) != found[1]:
                return True
        return False

    def _remove_member(self, group: ShareGroup, member_id: str, now_ms: int, *,
                       close_session: bool = True) -> list[Written]:
        del group.members[member_id]
        group.reassign(self.lookup)
        if not close_session:
            return []
        self.sessions.close(group.group_id, member_id)
        return self.release_member(group.group_id, member_id, now_ms)

    def tick(self, now_ms: int) -> None:
        """Session timeouts of members, and lock expiries of acquisitions. What they release
        is appended; no client waits for it, so the next flush makes it durable."""
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if member.deadline_ms <= now_ms:
                    log.info("event=share_member_expired group=%s member=%s", group.group_id,
                             member.member_id)
                    self._remove_member(group, member.member_id, now_ms)
        for key, sp in self.partitions.items():
            change = sp.expire(now_ms)
            if change is not None:
                self.store.write(key, change, now_ms)

    # -- share-partitions ---------------------------------------------------------------------

    def share_partition(self, group_id: str, topic_id: uuid.UUID, partition: int,
                        plog: PartitionLog, now_ms: int) -> tuple[SharePartition, Written | None]:
        """The share-partition, loaded from its durable state or initialized now (the snapshot
        to sync is returned)."""
        key = (group_id, topic_id, partition)
        sp = self._load(key)
        if sp is not None:
            return sp, None
        self.groups.setdefault(group_id, ShareGroup(group_id))
        start = self._initial_offset(self.settings(group_id).auto_offset_reset, plog, now_ms)
        written = self.store.initialize(key, start, now_ms)
        sp = self._load(key)
        assert sp is not None  # just initialized
        return sp, written

    def _load(self, key: ShareKey) -> SharePartition | None:
        """The share-partition in memory, built from its durable state if need be; None if it
        was never initialized."""
        sp = self.partitions.get(key)
        if sp is None:
            durable = self.store.states.get(key)
            if durable is None:
                return None
            sp = SharePartition(durable.start_offset, self._limits(key[0]), durable.batches())
            self.partitions[key] = sp
        return sp

    def fetchable(self, group_id: str, topic_id: uuid.UUID, partition: int, plog: PartitionLog,
                  now_ms: int) -> tuple[SharePartition, list[Written]]:
        """The share-partition ready for an acquisition: initialized, its expired locks
        released; with what that wrote."""
        sp, init = self.share_partition(group_id, topic_id, partition, plog, now_ms)
        written = [init] if init is not None else []
        expired = sp.expire(now_ms)
        if expired is not None:
            written.append(self.store.write((group_id, topic_id, partition), expired, now_ms))
        return sp, written

    @staticmethod
    def _initial_offset(reset: str, plog: PartitionLog, now_ms: int) -> int:
        if reset == EARLIEST:
            return plog.log_start_offset
        if reset == LATEST:
            return plog.high_watermark
        found = plog.offset_for_timestamp(now_ms - parse_by_duration(reset))
        return found[0] if found is not None else plog.high_watermark

    def acknowledge(self, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int,
                    batches: Sequence[AckBatch], now_ms: int) -> tuple[ErrorCode, Written | None]:
        sp = self.partitions.get((group_id, topic_id, partition))
        if sp is None:
            return ErrorCode.invalid_record_state, None
        result = sp.acknowledge(member_id, batches)
        if isinstance(result, ErrorCode):
            return result, None
        return ErrorCode.none, self._write((group_id, topic_id, partition), result, now_ms)

    # -- transactional acknowledgements (KIP-1289) --------------------------------------------

    def check_member(self, group_id: str, member_id: str,
                     member_epoch: int) -> tuple[ErrorCode, str] | None:
        """Is this member of the share group, at this epoch? The error and why, if not."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return ErrorCode.unknown_member_id, (
                f"member {member_id} is not in share group {group_id}: its records were released "
                "or will be; abort the transaction and rejoin")
        if member_epoch > member.member_epoch:
            return ErrorCode.fenced_member_epoch, (
                f"member epoch {member_epoch} is ahead of the member's {member.member_epoch}: "
                "abort the transaction and rejoin with epoch 0")
        if member_epoch < member.member_epoch:
            return ErrorCode.stale_member_epoch, (
                f"member epoch {member_epoch} is behind the member's {member.member_epoch}: "
                "abort the transaction and acknowledge with the epoch of the last heartbeat")
        return None

    def state_partition(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int | None:
        """The `__share_group_state` partition that a transaction acknowledging records of this
        share-partition must hold; None if the share-partition has delivered nothing."""
        key = (group_id, topic_id, partition)
        return self.store.partition_of(key) if key in self.partitions else None

    def stage_txn(self, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int,
                  batches: Sequence[AckBatch], producer_id: int, producer_epoch: int,
                  now_ms: int) -> tuple[ErrorCode, Written | None]:
        """TxnShareAcknowledge for one share-partition: the records held by `member_id` become
        TX_PENDING in the transaction of `producer_id`, once what its commit gives is appended
        in the transaction's batch (the caller syncs it). INVALID_RECORD_STATE for records the
        member does not hold, INVALID_REQUEST for a RELEASE or a malformed batch; the log's
        error for a fenced producer epoch. Nothing changes on an error."""
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:
            return ErrorCode.invalid_record_state, None
        staged = sp.stage_acknowledgements(member_id, batches)
        if isinstance(staged, ErrorCode):
            return staged, None
        outcome = sp.txn_outcome(staged)
        if isinstance(outcome, ErrorCode):
            return outcome, None
        if not outcome:
            return ErrorCode.none, None  # only gaps never tracked: nothing to hold
        try:
            written = self.store.stage(key, outcome, producer_id, producer_epoch, now_ms)
        except LogError as exc:
            return exc.error_code, None
        sp.hold(staged, producer_id)
        return ErrorCode.none, written

    def complete_txn(self, state_partition: int, producer_id: int, commit: bool,
                     now_ms: int) -> list[Written]:
        """A COMMIT or ABORT marker of `producer_id` was written to this `__share_group_state`
        partition: its staged acknowledgements there are applied or released, and the result
        written (after the marker) as an ordinary update."""
        written = []
        for key, sp in self.partitions.items():
            if (producer_id in sp.pending_producers()
                    and self.store.partition_of(key) == state_partition):
                change = sp.end_transaction(producer_id, commit)
                if change is not None:
                    written.append(self.store.write(key, change, now_ms))
                    log.info("event=share_txn_%s group=%s topic_id=%s partition=%d "
                             "producer_id=%d start_offset=%d", "commit" if commit else "abort",
                             key[0], key[1], key[2], producer_id, sp.start_offset)
        return written

    def _write(self, key: ShareKey, change: StateChange, now_ms: int) -> Written | None:
        if not change.batches and self.store.states.get(key) is not None and \
                self.store.states[key].start_offset == change.start_offset:
            return None
        return self.store.write(key, change, now_ms)

    def close_session(self, group_id: str, member_id: str, now_ms: int) -> list[Written]:
        """The member's share session ends (epoch -1): what it holds on the session's partitions
        is released."""
        session = self.sessions.close(group_id, member_id)
        return [] if session is None else self._release_session(session, now_ms)

    def connection_closed(self, connection_id: int, now_ms: int) -> list[Written]:
        """A client connection is gone: the share sessions it opened end (KAFKA-19015; a session
        re-opened on another connection since is that one's, KAFKA-19950), releasing what their
        members hold on their partitions, as `close_session`."""
        written = []
        for session in self.sessions.connection_closed(connection_id):
            log.info("event=share_session_closed_with_connection group=%s member=%s",
                     session.group_id, session.member_id)
            written += self._release_session(session, now_ms)
        return written

    def stop(self) -> None:
        """The broker stops: the share sessions end with it, releasing nothing (acquisitions are
        not written: after the restart what was acquired is AVAILABLE again, as after a crash)."""
        self.sessions.clear()

    def _release_session(self, session: ShareSession, now_ms: int) -> list[Written]:
        written = []
        for topic_id, partition in session.partitions:
            key = (session.group_id, topic_id, partition)
            sp = self.partitions.get(key)
            change = sp.release_member(session.member_id) if sp is not None else None
            if change is not None:
                written.append(self.store.write(key, change, now_ms))
        return written

    def release_member(self, group_id: str, member_id: str, now_ms: int) -> list[Written]:
        written = []
        for key, sp in self.partitions.items():
            if key[0] == group_id:
                change = sp.release_member(member_id)
                if change is not None:
                    written.append(self.store.write(key, change, now_ms))
        return written

    # -- admin --------------------------------------------------------------------------------

    def start_offset(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int | None:
        """The SPSO, or None for a share-partition never initialized."""
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is not None:
            return sp.start_offset
        durable = self.store.states.get(key)
        return durable.start_offset if durable is not None else None

    def lag(self, group_id: str, topic_id: uuid.UUID, partition: int,
            high_watermark: int) -> int:
        """Records from the SPSO up to the high watermark not yet delivered for good (KIP-1226's
        share-partition lag); -1 for a share-partition never initialized."""
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is not None:
            pending = sum(1 for r in sp.records.values() if not r.state.is_done)
            end = sp.end_offset
        else:
            durable = self.store.states.get(key)
            if durable is None:
                return -1
            end = max(durable.states, default=durable.start_offset - 1) + 1
            # offsets never written in flight were acquired only: pending again after a restart
            pending = end - durable.start_offset - sum(
                1 for state, _ in durable.states.values() if state.is_done)
        return pending + max(high_watermark - end, 0)

    def initialized(self, group_id: str) -> list[tuple[uuid.UUID, int]]:
        return sorted((t, p) for g, t, p in self.store.states if g == group_id)

    def _require_empty(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        return ErrorCode.non_empty_group if group.members else ErrorCode.none

    def alter_offsets(self, group_id: str, offsets: Mapping[tuple[uuid.UUID, int], int],
                      now_ms: int) -> tuple[ErrorCode, list[Written]]:
        """AlterShareGroupOffsets: each share-partition restarts at the given offset (a new
        state epoch; nothing in flight). Only on an empty group, as Kafka."""
        error = self._require_empty(group_id)
        if error is not ErrorCode.none:
            return error, []
        written = []
        for (topic_id, partition), offset in offsets.items():
            key = (group_id, topic_id, partition)
            self.partitions.pop(key, None)
            written.append(self.store.initialize(key, offset, now_ms))
        return ErrorCode.none, written

    def delete_offsets(self, group_id: str, topic_ids: Sequence[uuid.UUID],
                       now_ms: int) -> tuple[ErrorCode, list[Written]]:
        """DeleteShareGroupOffsets: forget the share-partitions of these topics (empty group)."""
        error = self._require_empty(group_id)
        if error is not ErrorCode.none:
            return error, []
        written = []
        for key in [k for k in self.store.states if k[0] == group_id and k[1] in topic_ids]:
            self.partitions.pop(key, None)
            w = self.store.delete(key, now_ms)
            if w is not None:
                written.append(w)
        return ErrorCode.none, written

    def delete_group(self, group_id: str, now_ms: int) -> tuple[ErrorCode, list[Written]]:
        """DeleteGroups of a share group: only an empty one; its state goes with it."""
        error = self._require_empty(group_id)
        if error is not ErrorCode.none:
            return error, []
        written = []
        for key in [k for k in self.store.states if k[0] == group_id]:
            self.partitions.pop(key, None)
            w = self.store.delete(key, now_ms)
            if w is not None:
                written.append(w)
        del self.groups[group_id]
        self.sessions.close_group(group_id)
        written.append(self.store.write_group(group_id, None, now_ms))
        return ErrorCode.none, written

    def alter_configs(self, group_id: str, set_: Mapping[str, str], delete: Sequence[str],
                      now_ms: int, *, validate_only: bool = False) -> tuple[str | None, Written | None]:
        """IncrementalAlterConfigs on a GROUP resource: (error message or None, what to sync).
        Creates the group if it does not exist, as Kafka lets configs precede the group."""
        for name, value in set_.items():
            try:
                validate_group_config(self.config, name, value)
            except ValueError as exc:
                return str(exc), None
        for name in delete:
            try:
                validate_group_config(self.config, name, "1")
            except ValueError as exc:
                if "not a share-group config" in str(exc):
                    return str(exc), None
        if validate_only:
            return None, None
        group = self.groups.setdefault(group_id, ShareGroup(group_id))
        for name in delete:
            group.configs.pop(name, None)
        group.configs.update({k: v.strip() for k, v in set_.items()})
        limits = self._limits(group_id)
        for key, sp in self.partitions.items():
            if key[0] == group_id:
                sp.limits = Limits(limits.record_lock_duration_ms, limits.delivery_count_limit,
                                   limits.max_record_locks)
        return None, self.store.write_group(group_id, dict(group.configs), now_ms)

    def alter_other_configs(self, group_id: str, set_: Mapping[str, str],
                            delete: Sequence[str], now_ms: int) -> Written:
        """Set/delete config overrides of a group that is not a share group (KIP-848's
        consumer.* configs, validated by the caller); durable once the Written is synced."""
        configs = dict(self.other_configs.get(group_id, {}))
        for name in delete:
            configs.pop(name, None)
        configs.update({k: v.strip() for k, v in set_.items()})
        if configs:
            self.other_configs[group_id] = configs
        else:
            self.other_configs.pop(group_id, None)
        return self.store.write_group(group_id, configs or None, now_ms)

    @property
    def assignor(self) -> str:
        return ASSIGNOR
