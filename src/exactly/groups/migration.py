"""Classic members inside a consumer group, and moving a live group between the protocols
(KIP-848's online upgrade and downgrade, Kafka's `group.consumer.migration.policy`).

Theory of operation
-------------------

Upgrade: a consumer-protocol member joins a Stable classic group whose members use the
`consumer` protocol type. The group becomes a consumer group at once
(`conversion.consumer_group_from_classic`): each classic member keeps its member id, its
subscription and assignment decoded from its JoinGroup/SyncGroup bytes, and epoch = the classic
generation; the newcomer's heartbeat then bumps the group epoch as any join does.

Classic members inside a consumer group (`ClassicMembers`) keep speaking JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, answered by the consumer group's rules, as Kafka does:

    Heartbeat    REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch moved past
                 its epoch, it has partitions to revoke, or partitions it waits for were released
    JoinGroup    the subscription (and, for cooperative clients, the owned partitions) from the
                 protocol metadata; one reconciliation step; generation = the member epoch, no
                 leader: the coordinator assigns
    SyncGroup    the member's assigned partitions, encoded as the classic assignment
    LeaveGroup   the member leaves: the group epoch goes up

An eager client owns nothing when it rejoins, so it never blocks a revocation; a cooperative one
lists what it still owns and gets what it may keep until it has revoked the rest.

Downgrade: when the last consumer-protocol member of a group with classic members leaves, the
group becomes a classic group again (`conversion.classic_members`), at generation = the group
epoch, and rebalances so that its members rejoin the classic way (coordinator.py does that).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from exactly.groups.consumer_coordinator import ConsumerGroupCoordinator
from exactly.groups.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from exactly.groups.conversion import (
    PROTOCOL_TYPE,
    by_id,
    by_name,
    decode_subscription,
    encode_assignment,
)
from exactly.groups.group import Group, JoinResult, SyncResult
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record

if TYPE_CHECKING:
    from exactly.log import LogManager


# -- classic members inside a consumer group ----------------------------------------------------


class ClassicMembers:
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup of classic members of a consumer group."""

    def __init__(self, consumer: ConsumerGroupCoordinator) -> None:
        self.consumer = consumer

    @property
    def logs(self) -> LogManager:
        return self.consumer.group_manager.store.logs

    def join(self, group: Group, *, member_id: str, instance_id: str | None, client_id: str,
             client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
             protocol_type: str, protocols: list[tuple[str, bytes]],
             require_known_member_id: bool, now_ms: int) -> JoinResult:
        """A classic member's JoinGroup: its subscription from the first protocol's metadata,
        one reconciliation step, and the answer at once (no waiting for other members)."""
        cg = group.consumer
        assert cg is not None
        if protocol_type != PROTOCOL_TYPE or not protocols:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        try:
            topics, owned = decode_subscription(protocols[0][1])
        except ValueError:
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is None and require_known_member_id:
                return JoinResult(ErrorCode.member_id_required, member_id)
        records: list[Record] = []
        holder = cg.static_members.get(instance_id) if instance_id is not None else None
        replaced = holder is not None and holder != member_id
        if replaced:
            assert holder is not None
            before = self.consumer.replace_static(group.group_id, cg, cg.members[holder],
                                                  member_id, records)
        else:
            before = cg.members.get(member_id) or ConsumerMember(member_id)
            if member_id in cg.members and before.classic is None:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
        is_new = member_id not in cg.members
        if is_new and len(cg.members) >= self.consumer.config.consumer_max_size:
            return JoinResult(ErrorCode.group_max_size_reached, member_id)
        member = replace(before, instance_id=instance_id, client_id=client_id,
                         client_host=client_host, subscribed_topic_names=topics,
                         subscribed_topic_regex=None, rebalance_timeout_ms=rebalance_timeout_ms,
                         server_assignor=None,
                         classic=ClassicMetadata(session_timeout_ms, tuple(protocols)))
        updated = self.consumer.update_member(group, before, member, is_new=is_new,
                                              replaced=replaced, owned=by_id(self.logs, owned),
                                              records=records, now_ms=now_ms)
        updated.session_deadline = now_ms + session_timeout_ms
        # Appended before the answer, not synced: as the classic JoinGroup/SyncGroup answers.
        if records and self.consumer.write(group, records, now_ms) is None:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        return JoinResult(ErrorCode.none, member_id, updated.member_epoch, PROTOCOL_TYPE,
                          protocols[0][0], "")

    def _member(self, group: Group, member_id: str, instance_id: str | None,
                generation_id: int | None) -> ConsumerMember | ErrorCode:
        cg = group.consumer
        assert cg is not None
        member = cg.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.unknown_member_id
        if instance_id is not None and member.instance_id != instance_id:
            return ErrorCode.fenced_instance_id
        if generation_id is not None and generation_id != member.member_epoch:
            return ErrorCode.illegal_generation
        return member

    def sync(self, group: Group, *, member_id: str, instance_id: str | None,
             generation_id: int, protocol_type: str | None, protocol_name: str | None,
             now_ms: int) -> SyncResult:
        member = self._member(group, member_id, instance_id, generation_id)
        if isinstance(member, ErrorCode):
            return SyncResult(member)
        assert member.classic is not None
        name = member.classic.protocols[0][0]
        if protocol_type not in (None, PROTOCOL_TYPE) or protocol_name not in (None, name):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member.session_deadline = now_ms + member.classic.session_timeout_ms
        return SyncResult(ErrorCode.none, PROTOCOL_TYPE, name,
                          encode_assignment(by_name(self.logs, member.assigned)))

    def heartbeat(self, group: Group, *, member_id: str, instance_id: str | None,
                  generation_id: int, now_ms: int) -> ErrorCode:
        member = self._member(group, member_id, instance_id, generation_id)
        if isinstance(member, ErrorCode):
            return member
        cg = group.consumer
        assert cg is not None and member.classic is not None
        member.session_deadline = now_ms + member.classic.session_timeout_ms
        if (member.member_epoch < cg.group_epoch
                or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and not _waits_for_release(cg, member))):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group: Group, members: list[tuple[str, str | None]],
              now_ms: int) -> list[ErrorCode]:
        cg = group.consumer
        assert cg is not None
        errors = []
        records: list[Record] = []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = cg.static_members.get(instance_id, "")
            member = self._member(group, member_id, instance_id, None)
            if isinstance(member, ErrorCode):
                errors.append(member)
                continue
            self.consumer.remove_member(group, member, records, now_ms, "left (LeaveGroup)")
            errors.append(ErrorCode.none)
        if records:
            self.consumer.write(group, records, now_ms)
        return errors


def _waits_for_release(cg: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a partition of the member's target is still held by another member."""
    for topic_id, parts in cg.target.get(member.member_id, {}).items():
        for p in parts - member.assigned.get(topic_id, frozenset()):
            holder = cg.owner_of(topic_id, p)
            if holder is not None and holder != member.member_id:
                return True
    return False
