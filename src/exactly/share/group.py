"""A share group's membership and its assignment (KIP-932, Kafka's `ShareGroup` and
`SimpleAssignor`).

Theory of operation
-------------------

A share group has an epoch that goes up whenever its membership or its members' subscriptions
change; each change recomputes the target assignment at once. Unlike a consumer group (KIP-848)
nothing is revoked first: a partition may be assigned to several members at the same time (they
share it), so each member simply moves to the new assignment, its member epoch set to the group
epoch, with its next heartbeat.

States (Kafka's names): Empty (no members), Stable (members, all at the group epoch), Dead (being
deleted).

The `simple` assignor, per subscribed topic with P partitions and the M members subscribed to it
(sorted by member id): with M <= P, partition i goes to member i mod M (each partition to one
member); with M > P, member j gets partition j mod P (each member one partition, so several
members share each partition). Every partition of a subscribed topic has at least one member.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# A topic's id and partition count, or None for a topic that does not exist.
TopicLookup = Callable[[str], "tuple[uuid.UUID, int] | None"]
# topic id -> assigned partitions
Assignment = dict[uuid.UUID, tuple[int, ...]]

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
ASSIGNOR = "simple"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed: tuple[str, ...]
    client_id: str
    client_host: str
    rack_id: str | None
    deadline_ms: int  # removed when no heartbeat arrives by then
    assignment: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)  # group config overrides

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def reassign(self, lookup: TopicLookup) -> None:
        """A new group epoch and target assignment; each member moves to it (and to the group
        epoch) with its next heartbeat."""
        self.group_epoch += 1
        targets = simple_assignment(
            {m.member_id: m.subscribed for m in self.members.values()}, lookup)
        for member in self.members.values():
            member.assignment = targets.get(member.member_id, {})
        self.assignment_epoch = self.group_epoch


def simple_assignment(subscriptions: Mapping[str, tuple[str, ...]],
                      lookup: TopicLookup) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {member: {} for member in subscriptions}
    topics = sorted({t for subscribed in subscriptions.values() for t in subscribed})
    for topic in topics:
        found = lookup(topic)
        if found is None:
            continue
        topic_id, count = found
        members = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        if not members or count <= 0:
            continue
        owned: dict[str, list[int]] = {m: [] for m in members}
        if len(members) <= count:
            for p in range(count):
                owned[members[p % len(members)]].append(p)
        else:
            for j, member in enumerate(members):
                owned[member].append(j % count)
        for member, parts in owned.items():
            if parts:
                out[member][topic_id] = tuple(parts)
    return out
