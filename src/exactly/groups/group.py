"""One group: a classic consumer group's members, state, generation, and the committed offsets
of any group.

This is bookkeeping only; the rules of the protocol (who may join, when a rebalance completes)
live in `coordinator.py`, as Kafka splits GroupMetadata from GroupCoordinator. A KIP-848 consumer
group is a `Group` whose `consumer` holds its members and epochs (consumer_group.py), so the
offsets, transactional offsets and their expiry work the same for both kinds.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from exactly.groups.consumer_group import ConsumerGroup
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition


class GroupState(enum.Enum):
    # The values are Kafka's state names, as DescribeGroups and ListGroups report them.
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    # Consumer groups (KIP-848) only; they share Empty, Stable and Dead.
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinMember, ...] = ()  # filled for the leader only
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # Where the record sits in `__consumer_offsets`: when a transaction commits, its offsets
    # replace only those written before them (Kafka's CommitRecordMetadataAndOffset.olderThan).
    log_offset: int = field(default=-1, compare=False)


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    join_callback: JoinCallback | None = None  # set while the member waits in JoinGroup
    sync_callback: SyncCallback | None = None  # set while the member waits in SyncGroup
    is_new: bool = False  # joined during the current rebalance, no JoinGroup answer yet
    heartbeat_deadline: int = 0

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def heartbeat_satisfied(self, now_ms: int) -> bool:
        """Kafka's hasSatisfiedHeartbeat: members parked in a rebalance need no heartbeat,
        except new members, which expire if they never complete their first join."""
        if not self.is_new and (self.join_callback is not None or self.sync_callback is not None):
            return True
        return now_ms < self.heartbeat_deadline


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry deadline
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline: int | None = None
    join_deadline: int | None = None  # set while PreparingRebalance
    # While the first rebalance of an Empty group waits group.initial.rebalance.delay.ms:
    # how much of the rebalance timeout is left to extend the delay with (Kafka's InitialDelayedJoin).
    initial_delay_remaining: int | None = None
    new_member_added: bool = False
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    # TxnOffsetCommit offsets per producer id, invisible until the transaction commits.
    pending_txn: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    # Set for a KIP-848 consumer group (protocol type "consumer"); None for a classic group.
    consumer: ConsumerGroup | None = None

    @property
    def group_type(self) -> str:
        """"consumer" or "classic", as ListGroups v5 reports it (KIP-848)."""
        return "classic" if self.consumer is None else "consumer"

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static(self, old_id: str, new_id: str) -> Member:
        """A static member came back under a new member id: it keeps its place and role."""
        old = self.members[old_id]
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        old.member_id = new_id
        assert old.group_instance_id is not None
        self.static_members[old.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return old

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_callback is not None for m in self.members.values()
        )

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its preferred protocol among those all support; most votes win.
        Ties go to the leader's preference, so the choice is deterministic."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names if leader else sorted(candidates)
        return next(name for name in order if votes.get(name) == best)
