"""One KIP-848 consumer group: its epochs, members, target assignment, and the reconciliation of a
member towards its target (Kafka's ConsumerGroup, ConsumerGroupMember, CurrentAssignmentBuilder).

Bookkeeping and pure rules only; when to bump the group epoch, compute a target assignment or
fence a member is decided in `consumer_coordinator.py`.

Theory of operation
-------------------

Three epochs (KIP-848): the *group epoch* goes up whenever what the assignment depends on
changes (a member joins or leaves, a subscription changes, a subscribed topic gains partitions or
appears); the *assignment epoch* is the group epoch the target assignment was computed at; each
member's *member epoch* is the assignment epoch it has reconciled to.

A member moves towards its target assignment in steps (`reconcile`), one machine per member:

    STABLE                 member epoch == assignment epoch: nothing to do; a newer target
                           makes it reconcile again
    UNREVOKED_PARTITIONS   it must first give up partitions (`pending_revocation`); it keeps
                           its epoch until its heartbeat no longer lists them as owned
    UNRELEASED_PARTITIONS  it is at the new epoch but some of its target partitions are still
                           held by their previous owner; they are given as they are released

The rules that must never break: a partition is assigned to (or pending revocation from) at most
one member at a time (`owners`), so a partition goes to its new owner only after the previous
one revoked it; a member that keeps revoked partitions stays at its old epoch.

Group state (Kafka's names, as ListGroups and ConsumerGroupDescribe report them): Empty (no
members), Assigning (group epoch above the assignment epoch), Reconciling (some member not
STABLE at the assignment epoch), Stable.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from exactly.groups.assignors import Assignment

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2


class MemberState(enum.IntEnum):
    # The byte values are Kafka's MemberState, as ConsumerGroupCurrentMemberAssignment holds it.
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member using the classic protocol inside a consumer group joined with (Kafka's
    ClassicMemberMetadata): its session timeout and its (name, metadata) protocols."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # Set for a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat).
    classic: ClassicMetadata | None = None
    # Timers (not durable): a restart gives every member a fresh session.
    session_deadline: int = 0
    rebalance_deadline: int | None = None  # while UNREVOKED_PARTITIONS

    def subscription(self) -> tuple[tuple[str, ...], str | None]:
        return tuple(sorted(self.subscribed_topic_names)), self.subscribed_topic_regex


@dataclass(slots=True)
class ConsumerGroup:
    group_epoch: int = 0
    assignment_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # (topic id, partition) -> the member it is assigned to or pending revocation from.
    owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)
    # The subscription regexes resolved to topics. Kafka resolves a new regex asynchronously
    # (KIP-848): the heartbeat that brings it is answered before its topics count, the next
    # one sees them. Not kept in the log: after a restart every regex counts at once.
    resolved_regexes: set[str] = field(default_factory=set)

    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self.owners.get((topic_id, partition))

    def put_member(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping `owners` and `static_members` in step."""
        self.drop_member(member.member_id)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.owners[(topic_id, p)] = member.member_id

    def drop_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.instance_id is not None and self.static_members.get(
                member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    if self.owners.get((topic_id, p)) == member_id:
                        del self.owners[(topic_id, p)]
        return member

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members name (ties: the first by name), else the default."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return min(counts, key=lambda name: (-counts[name], name))


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              owned: Assignment | None, owner_of: Callable[[uuid.UUID, int], str | None],
              ) -> ConsumerMember:
    """The member's next state towards `target` (Kafka's CurrentAssignmentBuilder).

    `owned` is what the member's heartbeat says it owns, or None when the heartbeat did not say
    (it then counts as still owning whatever it must revoke). `owner_of` tells who holds a
    partition now, for the unreleased-partitions check.
    """
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.assigned, target_epoch, target, owned, owner_of)
    if member.state is MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        return _next(member, member.assigned, target_epoch, target, owned, owner_of)
    return member


def _next(member: ConsumerMember, current: Assignment, target_epoch: int, target: Assignment,
          owned: Assignment | None, owner_of: Callable[[uuid.UUID, int], str | None],
          ) -> ConsumerMember:
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    add: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(current) | set(target):
        now = current.get(topic_id, frozenset())
        wanted = target.get(topic_id, frozenset())
        kept, revoked = now & wanted, now - wanted
        free = set()
        for p in wanted - kept:
            holder = owner_of(topic_id, p)
            if holder is None or holder == member.member_id:
                free.add(p)
            else:
                unreleased = True
        if kept:
            keep[topic_id] = kept
        if revoked:
            revoke[topic_id] = revoked
        if free:
            add[topic_id] = frozenset(free)
    if revoke and _owns_any(owned, revoke):
        # Revoke first, at the current epoch; nothing new until the member confirms.
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=keep,
                       pending_revocation=revoke)
    assigned = dict(keep)
    for topic_id, partitions in add.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    previous = (member.member_epoch if member.member_epoch != target_epoch
                else member.previous_member_epoch)
    return replace(member,
                   state=(MemberState.UNRELEASED_PARTITIONS if unreleased
                          else MemberState.STABLE),
                   member_epoch=target_epoch, previous_member_epoch=previous,
                   assigned=assigned, pending_revocation={})


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())
