"""The classic group coordinator: membership (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and timers.

Sans-IO: callers pass the time in and get delayed answers through callbacks, invoked either
before the call returns or later from another call or from `tick()`. The rules follow Apache
Kafka's GroupCoordinator.scala. As there, the coordinator holds its collaborators by name:
`group_manager` (metadata_manager.py: the groups, their offsets, `__consumer_offsets`, the offset
and admin APIs), `txn_offsets` (txn_offsets.py: offsets of open transactions, KIP-98) and
`consumer` (consumer_coordinator.py: KIP-848 consumer groups). A JoinGroup for an empty consumer
group turns it back into a classic group (group.consumer.migration.policy).

Theory of operation
-------------------

One state machine per group (`GroupState`, Kafka's names):

    Empty                no members (offsets may remain)
    PreparingRebalance   waiting for every member to (re)join, until the rebalance timeout
    CompletingRebalance  a new generation: waiting for the leader's assignment in SyncGroup
    Stable               every member has its assignment and heartbeats
    Dead                 deleted, or left with nothing by offset expiry

Events: JoinGroup (a new member, changed metadata, or the leader rejoining) starts a rebalance;
all members joined, or the join deadline, completes it: the generation goes up, the leader gets
the member list. The leader's SyncGroup makes the group Stable and answers every parked
SyncGroup. LeaveGroup, a missed heartbeat (session timeout) or a member that never sent
SyncGroup remove members and rebalance again; `tick(now_ms)` fires every deadline, and so does
every request for a group before it is handled (`_expire_due`), so a request at or after a
deadline sees its effect, as in Kafka. The first rebalance of an Empty group waits
group.initial.rebalance.delay.ms for more members. A static member (KIP-345) that restarts takes
its old member id's place and assignment without a rebalance while the group is Stable and its
protocol stays (`_replace_static_member`).

Durable: the group's metadata (generation, leader, members, assignments) is written when the
leader's assignment arrives and when a rebalance leaves the group Empty; OffsetCommit and
TxnOffsetCommit are appended before the client is answered (the caller syncs
`CommitResult.log`). A restart restores the last written generation, each member with a fresh
session to come back in.

Rules that must never break: every JoinGroup and SyncGroup gets exactly one answer (a duplicate
JoinGroup answers the one it replaces); a group becomes Stable only once its assignment is
written; a fenced static member (KIP-345) gets FENCED_INSTANCE_ID; offsets of an open
transaction stay invisible until its COMMIT marker, and a group holding some is never deleted.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from exactly.groups.config import GroupConfig
from exactly.groups.consumer_coordinator import (
    ConsumerGroupCoordinator,
    ConsumerHeartbeat,
    HeartbeatResult,
    member_tombstones,
)
from exactly.groups.conversion import PROTOCOL_TYPE, classic_members
from exactly.groups.group import (
    Group,
    GroupState,
    JoinCallback,
    JoinMember,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from exactly.groups.metadata_manager import (
    CommitResult,
    GroupDescription,
    GroupListing,
    GroupMetadataManager,
    OffsetToCommit,
    consumer_tombstones,
)
from exactly.groups.migration import ClassicMembers
from exactly.groups.txn_offsets import TxnOffsets
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition

if TYPE_CHECKING:
    from exactly.groups.group import CommittedOffset
    from exactly.log import LogManager, PartitionLog

log = logging.getLogger("exactly.groups")

Protocols = list[tuple[str, bytes]]


class GroupCoordinator:
    def __init__(self, logs: LogManager, config: GroupConfig, *, now_ms: int) -> None:
        self.config = config
        self.group_manager = GroupMetadataManager(logs, config, now_ms=now_ms)
        self.txn_offsets = TxnOffsets(self.group_manager)
        # KIP-848 consumer groups: ConsumerGroupHeartbeat and their timers; classic members of
        # consumer groups (online migration).
        self.consumer = ConsumerGroupCoordinator(self.group_manager, config)
        self.classic_members = ClassicMembers(self.consumer)

    # -- JoinGroup ----------------------------------------------------------------------------

    def join_group(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
        protocols: Protocols, require_known_member_id: bool, now_ms: int, respond: JoinCallback,
        supports_skip_assignment: bool = True,
    ) -> None:
        """Join (or rejoin) a group. `respond` is called once, now or when the rebalance completes.

        `require_known_member_id` is True for JoinGroup v4+: a new member first gets
        MEMBER_ID_REQUIRED with its member id and must join again with it (KIP-394).
        `supports_skip_assignment` is True for JoinGroup v9+ (KIP-814), see
        `_replace_static_member`.
        """
        if not group_id:
            return respond(JoinResult(ErrorCode.invalid_group_id, member_id))
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return respond(JoinResult(ErrorCode.invalid_session_timeout, member_id))
        group = self._expire_due(group_id, now_ms)
        if group is None:
            if member_id:
                return respond(JoinResult(ErrorCode.unknown_member_id, member_id))
            group = self.group_manager.new_group(group_id, now_ms)
        if group.consumer is not None and not self.consumer.downgrade_empty(group, now_ms):
            # A classic member of a consumer group: the consumer group's rules (migration.py).
            return respond(self.classic_members.join(
                group, member_id=member_id, instance_id=group_instance_id, client_id=client_id,
                client_host=client_host, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type,
                protocols=protocols, require_known_member_id=require_known_member_id,
                now_ms=now_ms))
        if (member_id not in group.members and len(group.members) >= cfg.group_max_size):
            return respond(JoinResult(ErrorCode.group_max_size_reached, member_id))
        args = (group_instance_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols, now_ms, respond)
        if not member_id:
            self._join_new_member(group, require_known_member_id, supports_skip_assignment, *args)
        else:
            self._join_current_member(group, member_id, *args)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms)

    def _join_new_member(
        self, group: Group, require_known_member_id: bool, supports_skip_assignment: bool,
        instance_id: str | None, client_id: str, client_host: str, session_ms: int,
        rebalance_ms: int, protocol_type: str, protocols: Protocols, now_ms: int,
        respond: JoinCallback,
    ) -> None:
        if not group.supports_protocols(protocol_type, protocols):
            return respond(JoinResult(ErrorCode.inconsistent_group_protocol))
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None and instance_id in group.static_members:
            return self._replace_static_member(group, instance_id, new_id, client_id,
                                               client_host, session_ms, rebalance_ms, protocols,
                                               supports_skip_assignment, now_ms, respond)
        if instance_id is None and require_known_member_id:
            group.pending_members[new_id] = now_ms + session_ms
            return respond(JoinResult(ErrorCode.member_id_required, new_id))
        self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host,
                                       session_ms, rebalance_ms, protocol_type, protocols, now_ms,
                                       respond)

    def _replace_static_member(
        self, group: Group, instance_id: str, new_id: str, client_id: str, client_host: str,
        session_ms: int, rebalance_ms: int, protocols: Protocols, skip_assignment: bool,
        now_ms: int, respond: JoinCallback,
    ) -> None:
        """KIP-345: a static member restarted (a known group.instance.id, no member id). It takes
        the old member id's place and assignment; the old incarnation is fenced.

        In a Stable group whose selected protocol stays the same, the replacement is written to
        `__consumer_offsets` and answered at once, without a rebalance. With JoinGroup v9+ the
        leader's answer says skip_assignment (KIP-814): it leads but must not run the assignor;
        older versions get the previous leader id, so a restarted leader does not think it
        leads. As in Kafka, only a change of the selected protocol rebalances: a restarted
        member's metadata differs anyway (its owned partitions are gone). In any other state the
        member joins the rebalance (CompletingRebalance starts a new one: the leader may be
        assigning to the old member id)."""
        old = group.members[group.static_members[instance_id]]
        old_id, old_leader = old.member_id, group.leader_id or ""
        self._answer_fenced(old)
        member = group.replace_static(old_id, new_id)
        saved = (member.client_id, member.client_host, member.protocols,
                 member.session_timeout_ms, member.rebalance_timeout_ms, member.heartbeat_deadline)
        member.client_id, member.client_host = client_id, client_host
        member.heartbeat_deadline = now_ms + session_ms
        if group.state is not GroupState.STABLE:
            return self._update_member_and_rebalance(group, member, protocols, session_ms,
                                                     rebalance_ms, now_ms, respond)
        member.protocols = list(protocols)
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        if group.select_protocol() != group.protocol_name:
            log.info("static member %s of group %s rejoined with another protocol: rebalancing",
                     instance_id, group.group_id)
            return self._update_member_and_rebalance(group, member, protocols, session_ms,
                                                     rebalance_ms, now_ms, respond)
        try:
            self.group_manager.store_group(group, now_ms)
        except Exception:
            log.exception("storing the replaced static member %s of group %s failed",
                          instance_id, group.group_id)
            # Undo: the old incarnation keeps its place, as Kafka does when the write fails.
            (member.client_id, member.client_host, member.protocols, member.session_timeout_ms,
             member.rebalance_timeout_ms, member.heartbeat_deadline) = saved
            group.replace_static(new_id, old_id)
            return respond(JoinResult(ErrorCode.coordinator_not_available, ""))
        log.info("static member %s of group %s rejoined as %s: no rebalance", instance_id,
                 group.group_id, new_id)
        if not skip_assignment:
            result = self._join_result(group, member, with_members=False)
            return respond(dataclasses.replace(result, leader_id=old_leader))
        is_leader = new_id == group.leader_id
        result = self._join_result(group, member, with_members=is_leader)
        respond(dataclasses.replace(result, skip_assignment=is_leader))

    def _join_current_member(
        self, group: Group, member_id: str, instance_id: str | None, client_id: str,
        client_host: str, session_ms: int, rebalance_ms: int, protocol_type: str,
        protocols: Protocols, now_ms: int, respond: JoinCallback,
    ) -> None:
        if not group.supports_protocols(protocol_type, protocols):
            return respond(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(group, member_id, instance_id, client_id,
                                                  client_host, session_ms, rebalance_ms,
                                                  protocol_type, protocols, now_ms, respond)
        error = self._validate_member(group, member_id, instance_id)
        if error is not None:
            return respond(JoinResult(error, member_id))
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE or (
            state is GroupState.COMPLETING_REBALANCE and not member.matches(protocols)
        ) or (
            state is GroupState.STABLE
            and (member_id == group.leader_id or not member.matches(protocols))
        ):
            return self._update_member_and_rebalance(group, member, protocols, session_ms,
                                                     rebalance_ms, now_ms, respond)
        if state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            # Same metadata: the member lost our answer. Give it the current generation again.
            is_leader = member_id == group.leader_id
            return respond(self._join_result(group, member, with_members=is_leader))
        respond(JoinResult(ErrorCode.unknown_member_id, member_id))

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, instance_id: str | None, client_id: str,
        client_host: str, session_ms: int, rebalance_ms: int, protocol_type: str,
        protocols: Protocols, now_ms: int, respond: JoinCallback,
    ) -> None:
        member = Member(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                        protocol_type, list(protocols), join_callback=respond, is_new=True,
                        heartbeat_deadline=now_ms + self.config.new_member_join_timeout_ms)
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True  # lets the initial delay be extended
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms)

    def _update_member_and_rebalance(
        self, group: Group, member: Member, protocols: Protocols, session_ms: int,
        rebalance_ms: int, now_ms: int, respond: JoinCallback,
    ) -> None:
        if member.join_callback is not None:  # a duplicate JoinGroup replaces the older one
            member.join_callback(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = list(protocols)
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        member.join_callback = respond
        self._maybe_prepare_rebalance(group, now_ms)

    def _join_result(self, group: Group, member: Member, *, with_members: bool) -> JoinResult:
        protocol = group.protocol_name or ""
        members = tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in group.members.values()
        ) if with_members else ()
        return JoinResult(ErrorCode.none, member.member_id, group.generation_id,
                          group.protocol_type, group.protocol_name, group.leader_id or "", members)

    # -- rebalance ----------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._propagate_assignment(group, ErrorCode.rebalance_in_progress, now_ms)
        group.pending_sync.clear()
        group.sync_deadline = None
        delay = self.config.initial_rebalance_delay_ms
        if group.state is GroupState.EMPTY and delay > 0:
            # Kafka's InitialDelayedJoin: wait for more members before the first generation.
            group.join_deadline = now_ms + delay
            group.initial_delay_remaining = max(group.rebalance_timeout_ms - delay, 0)
        else:
            group.join_deadline = now_ms + group.rebalance_timeout_ms
            group.initial_delay_remaining = None
        group.new_member_added = False
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        log.info("preparing to rebalance group %s (generation %d, %d members)", group.group_id,
                 group.generation_id, len(group.members))
        # Like Kafka's tryCompleteElseWatch: a group left with no members completes at once.
        self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: Group, now_ms: int) -> None:
        # During the initial delay the rebalance completes by time only, as in Kafka.
        if group.initial_delay_remaining is None and group.all_members_joined():
            self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        for member in [m for m in group.members.values() if m.join_callback is None]:
            log.info("member %s of group %s did not rejoin in time: removed", member.member_id,
                     group.group_id)
            self._drop(group, member)
        group.join_deadline = group.initial_delay_remaining = None
        group.new_member_added = False
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms)
            self.group_manager.store_group_quietly(group, now_ms)
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        group.pending_sync = set(group.members)
        group.sync_deadline = now_ms + group.rebalance_timeout_ms
        log.info("group %s generation %d: protocol %s, leader %s, %d members", group.group_id,
                 group.generation_id, group.protocol_name, group.leader_id, len(group.members))
        answers = []
        for member in group.members.values():
            callback, member.join_callback = member.join_callback, None
            member.is_new = False
            member.heartbeat_deadline = now_ms + member.session_timeout_ms
            is_leader = member.member_id == group.leader_id
            answers.append((callback, self._join_result(group, member, with_members=is_leader)))
        for callback, result in answers:  # after the state is final: callbacks may call back in
            assert callback is not None
            callback(result)

    # -- SyncGroup ----------------------------------------------------------------------------

    def sync_group(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
        now_ms: int, respond: SyncCallback,
    ) -> None:
        """Followers wait here for the leader's assignment; `respond` is called once."""
        group = self._expire_due(group_id, now_ms) if group_id else None
        if not group_id:
            return respond(SyncResult(ErrorCode.invalid_group_id))
        if group is None:
            return respond(SyncResult(ErrorCode.unknown_member_id))
        if group.consumer is not None:
            return respond(self.classic_members.sync(
                group, member_id=member_id, instance_id=group_instance_id,
                generation_id=generation_id, protocol_type=protocol_type,
                protocol_name=protocol_name, now_ms=now_ms))
        error = self._validate_member(group, member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error is None and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is None and group.state is GroupState.EMPTY:
            error = ErrorCode.unknown_member_id
        if error is None and group.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            return respond(SyncResult(error))
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        if group.state is GroupState.STABLE:
            member.heartbeat_deadline = now_ms + member.session_timeout_ms
            return respond(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                                      member.assignment))
        # CompletingRebalance: park until the leader's assignment is stored.
        if member.sync_callback is not None:
            member.sync_callback(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_callback = respond
        if member_id != group.leader_id:
            return
        for mid, m in group.members.items():
            m.assignment = assignments.get(mid, b"")
        try:
            self.group_manager.store_group(group, now_ms)
        except Exception:
            log.exception("storing group %s failed", group.group_id)
            self._propagate_assignment(group, ErrorCode.coordinator_not_available, now_ms)
            self._maybe_prepare_rebalance(group, now_ms)
            return
        group.transition(GroupState.STABLE, now_ms)
        self._propagate_assignment(group, ErrorCode.none, now_ms)

    def _propagate_assignment(self, group: Group, error: ErrorCode, now_ms: int) -> None:
        """Answer every parked SyncGroup; on error, forget the assignments."""
        answers = []
        for member in group.members.values():
            if error is not ErrorCode.none:
                member.assignment = b""
            if member.sync_callback is not None:
                callback, member.sync_callback = member.sync_callback, None
                member.heartbeat_deadline = now_ms + member.session_timeout_ms
                answers.append((callback, SyncResult(error, group.protocol_type,
                                                     group.protocol_name, member.assignment)))
        for callback, result in answers:
            callback(result)

    # -- Heartbeat and LeaveGroup -------------------------------------------------------------

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int, now_ms: int) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._expire_due(group_id, now_ms)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.consumer is not None:
            return self.classic_members.heartbeat(group, member_id=member_id,
                                                  instance_id=group_instance_id,
                                                  generation_id=generation_id, now_ms=now_ms)
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        member.heartbeat_deadline = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(self, *, group_id: str, members: list[tuple[str, str | None]],
                    now_ms: int) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members, given as (member id, group instance id); a per-member error each."""
        if not group_id:
            return ErrorCode.invalid_group_id, []
        group = self._expire_due(group_id, now_ms)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in members]
        if group.consumer is not None:
            return ErrorCode.none, self.classic_members.leave(group, members, now_ms)
        errors = []
        for member_id, instance_id in members:
            static_id = group.static_members.get(instance_id) if instance_id else None
            if member_id and static_id is not None and static_id != member_id:
                errors.append(ErrorCode.fenced_instance_id)
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                if group.state is GroupState.PREPARING_REBALANCE:
                    self._try_complete_join(group, now_ms)
                errors.append(ErrorCode.none)
            elif static_id is None and member_id not in group.members:
                errors.append(ErrorCode.unknown_member_id)
            else:
                member = group.members[static_id or member_id]
                log.info("member %s left group %s", member.member_id, group.group_id)
                self._remove_member_and_update(group, member, now_ms)
                errors.append(ErrorCode.none)
        return ErrorCode.none, errors

    # -- members leaving ----------------------------------------------------------------------

    def _validate_member(self, group: Group, member_id: str,
                         instance_id: str | None) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        return None

    def _answer_fenced(self, member: Member) -> None:
        if member.join_callback is not None:
            callback, member.join_callback = member.join_callback, None
            callback(JoinResult(ErrorCode.fenced_instance_id, member.member_id))
        if member.sync_callback is not None:
            sync, member.sync_callback = member.sync_callback, None
            sync(SyncResult(ErrorCode.fenced_instance_id))

    def _drop(self, group: Group, member: Member) -> None:
        """Remove a member, answering whatever request of it is parked."""
        group.remove(member.member_id)
        if member.join_callback is not None:
            callback, member.join_callback = member.join_callback, None
            callback(JoinResult(ErrorCode.unknown_member_id, ""))
        if member.sync_callback is not None:
            sync, member.sync_callback = member.sync_callback, None
            sync(SyncResult(ErrorCode.unknown_member_id))

    def _remove_member_and_update(self, group: Group, member: Member, now_ms: int) -> None:
        self._drop(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms)

    # -- time ---------------------------------------------------------------------------------

    def _expire_due(self, group_id: str, now_ms: int) -> Group | None:
        """Fire the group's timers due by `now_ms` before a request sees it; then the group.

        Kafka's bar: a request at or after a session or rebalance deadline sees its effect,
        though `tick` runs only every 100 ms (the librdkafka suite's DeleteGroups 6 ms after a
        session ended got GROUP_NOT_EMPTY). Classic groups only; consumer groups are
        brought up to date by `consumer.tick`."""
        group = self.group_manager.groups.get(group_id)
        if group is not None and group.consumer is None:
            self._tick_group(group, now_ms)
            group = self.group_manager.groups.get(group_id)
        return group

    def tick(self, now_ms: int) -> None:
        """Fire every timer due by `now_ms`: sessions, pending members, rebalance deadlines."""
        for group in list(self.group_manager.groups.values()):
            if group.consumer is None:
                self._tick_group(group, now_ms)
        self.consumer.tick(now_ms)
        for group in list(self.group_manager.groups.values()):
            self._maybe_downgrade(group, now_ms)
        self.group_manager.maybe_expire_offsets(now_ms)

    def _tick_group(self, group: Group, now_ms: int) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if now_ms >= deadline:
                del group.pending_members[member_id]
                if group.state is GroupState.PREPARING_REBALANCE:
                    self._try_complete_join(group, now_ms)
        for member in list(group.members.values()):
            if member.member_id in group.members and not member.heartbeat_satisfied(now_ms):
                log.info("member %s of group %s: session expired", member.member_id,
                         group.group_id)
                self._remove_member_and_update(group, member, now_ms)
        if (group.state is GroupState.PREPARING_REBALANCE and group.join_deadline is not None
                and now_ms >= group.join_deadline):
            remaining = group.initial_delay_remaining
            if remaining is not None and group.new_member_added and remaining > 0:
                delay = min(self.config.initial_rebalance_delay_ms, remaining)
                group.initial_delay_remaining = max(remaining - delay, 0)
                group.new_member_added = False
                group.join_deadline = now_ms + delay
            else:
                self._complete_join(group, now_ms)
        if (group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
                and group.pending_sync and group.sync_deadline is not None
                and now_ms >= group.sync_deadline):
            # Members that got a generation but never sent SyncGroup (Kafka's pending sync).
            for member_id in list(group.pending_sync):
                if member_id in group.members:
                    self._drop(group, group.members[member_id])
            group.pending_sync.clear()
            self._maybe_prepare_rebalance(group, now_ms)

    # -- KIP-848 ----------------------------------------------------------------------------------

    def consumer_heartbeat(self, request: ConsumerHeartbeat, now_ms: int) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (consumer_coordinator.py); when the last consumer-protocol
        member of a group with classic members leaves, the group goes back to classic."""
        result = self.consumer.heartbeat(request, now_ms)
        group = self.group_manager.groups.get(request.group_id)
        if group is not None and request.member_epoch < 0:
            self._maybe_downgrade(group, now_ms)
        return result

    def _maybe_downgrade(self, group: Group, now_ms: int) -> None:
        """KIP-848's online downgrade: a consumer group left with classic members only becomes
        a classic group at generation = its epoch, and rebalances so they rejoin the classic
        way (group.consumer.migration.policy downgrade or bidirectional)."""
        cg = group.consumer
        if (cg is None or not cg.members or any(m.classic is None for m in cg.members.values())
                or self.config.consumer_migration_policy not in ("downgrade", "bidirectional")):
            return
        logs = self.group_manager.store.logs
        records = [r for m in cg.members for r in member_tombstones(group.group_id, m)]
        try:
            self.group_manager.append_batch(group.group_id,
                                            records + consumer_tombstones(group.group_id),
                                            now_ms)
        except Exception:
            log.exception("downgrading consumer group %s failed", group.group_id)
            return
        group.consumer = None
        group.generation_id = cg.group_epoch
        group.protocol_type = PROTOCOL_TYPE
        for member in classic_members(cg, logs, now_ms):
            group.add(member)
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.STABLE, now_ms)
        self.group_manager.store_group_quietly(group, now_ms)
        log.info("consumer group %s with only classic members becomes a classic group "
                 "(generation %d)", group.group_id, group.generation_id)
        self._prepare_rebalance(group, now_ms)

    # -- offsets and admin APIs, from the group manager -----------------------------------------

    def commit_offsets(
        self, *, group_id: str, member_id: str, group_instance_id: str | None,
        generation_id: int, offsets: Mapping[tuple[str, int], OffsetToCommit], now_ms: int,
        api_version: int = 9,
    ) -> CommitResult:
        """OffsetCommit (see `GroupMetadataManager.commit_offsets`)."""
        self._expire_due(group_id, now_ms)
        return self.group_manager.commit_offsets(
            group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
            generation_id=generation_id, offsets=offsets, now_ms=now_ms,
            api_version=api_version)

    def validate_offset_fetch(self, group_id: str, member_id: str | None,
                              member_epoch: int) -> ErrorCode:
        """OffsetFetch v9's member check (see `GroupMetadataManager.validate_offset_fetch`)."""
        return self.group_manager.validate_offset_fetch(group_id, member_id, member_epoch)

    def fetch_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets (None where nothing is committed); `partitions=None` means all."""
        return self.group_manager.fetch_offsets(group_id, partitions)

    def describe_group(self, group_id: str, now_ms: int | None = None) -> GroupDescription:
        """DescribeGroups; with `now_ms`, after the group's due timers."""
        if now_ms is not None:
            self._expire_due(group_id, now_ms)
        return self.group_manager.describe_group(group_id)

    def list_groups(self, states: set[str] | None = None,
                    now_ms: int | None = None) -> list[GroupListing]:
        """ListGroups; with `now_ms`, after the classic groups' due timers."""
        if now_ms is not None:
            for group_id in list(self.group_manager.groups):
                self._expire_due(group_id, now_ms)
        return self.group_manager.list_groups(states)

    def delete_groups(self, group_ids: list[str], now_ms: int) -> dict[str, ErrorCode]:
        """DeleteGroups, after the due timers: a group whose last session ended is Empty."""
        for group_id in group_ids:
            self._expire_due(group_id, now_ms)
        if any(g in self.group_manager.groups and self.group_manager.groups[g].consumer
               is not None for g in group_ids):
            self.consumer.tick(now_ms)
        return self.group_manager.delete_groups(group_ids, now_ms)

    def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]],
                       now_ms: int) -> tuple[ErrorCode, CommitResult]:
        """OffsetDelete, after the group's due timers (see `GroupMetadataManager.delete_offsets`)."""
        self._expire_due(group_id, now_ms)
        return self.group_manager.delete_offsets(group_id, partitions, now_ms)

    def expire_offsets(self, now_ms: int) -> None:
        self.group_manager.expire_offsets(now_ms)

    def offsets_partition(self, group_id: str) -> int:
        """The `__consumer_offsets` partition that holds this group."""
        return self.group_manager.partition_for(group_id)

    def log_for(self, group_id: str) -> PartitionLog:
        return self.group_manager.log_for(group_id)

    # -- transactional offsets (KIP-98), from txn_offsets -----------------------------------------

    def commit_txn_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int,
        offsets: Mapping[tuple[str, int], OffsetToCommit], *, member_id: str = "",
        generation_id: int = -1, group_instance_id: str | None = None, now_ms: int,
    ) -> CommitResult:
        """TxnOffsetCommit (see `TxnOffsets.commit_txn_offsets`)."""
        return self.txn_offsets.commit_txn_offsets(
            group_id, producer_id, producer_epoch, offsets, member_id=member_id,
            generation_id=generation_id, group_instance_id=group_instance_id, now_ms=now_ms)

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool,
                     now_ms: int) -> None:
        self.txn_offsets.complete_txn(offsets_partition, producer_id, commit, now_ms)

    def has_pending(self, group_id: str) -> bool:
        return self.txn_offsets.has_pending(group_id)

    def pending_producers(self, offsets_partition: int) -> set[int]:
        return self.txn_offsets.pending_producers(offsets_partition)

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return self.txn_offsets.pending_partitions(group_id)
