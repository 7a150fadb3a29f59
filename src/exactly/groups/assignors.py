"""The server-side assignors of KIP-848 consumer groups: `uniform` (the default) and `range`.

With the consumer protocol the coordinator, not a member, computes the group's target assignment
(KIP-848 "Assignment"): it calls an assignor with every member's subscription (already resolved
to topic ids, regexes included) and the partition count of each subscribed topic. A member may
name the assignor in its heartbeat (`ServerAssignor`); otherwise the first of the broker's
`group.consumer.assignors` is used.

- `uniform` (Kafka's UniformAssignor): every partition to one subscribed member, as evenly as the
  subscriptions allow, and sticky: a partition stays with its previous owner unless balance
  needs it elsewhere, so a rebalance moves as few partitions as possible.
- `range` (Kafka's RangeAssignor): per topic, the subscribers in member-id order get consecutive
  ranges of partitions, the first ones one more when the count does not divide evenly; members
  subscribed to the same topics get the same partition numbers of each (co-partitioning).

Pure functions of their inputs: no state, no time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

# topic id -> partition numbers
Assignment = dict[uuid.UUID, frozenset[int]]
# member id -> the topic ids it subscribes to
Subscriptions = Mapping[str, frozenset[uuid.UUID]]
# topic id -> number of partitions
TopicPartitionCounts = Mapping[uuid.UUID, int]

Assignor = Callable[[Subscriptions, TopicPartitionCounts, Mapping[str, Assignment]],
                    dict[str, Assignment]]


def range_assignor(subscriptions: Subscriptions, topics: TopicPartitionCounts,
                   previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Consecutive ranges of each topic's partitions to its subscribers in member-id order."""
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    for topic_id in sorted(topics, key=str):
        subscribers = sorted(m for m, subs in subscriptions.items() if topic_id in subs)
        if not subscribers:
            continue
        quota, extra = divmod(topics[topic_id], len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            count = quota + (1 if i < extra else 0)
            if count:
                result[member_id][topic_id] = set(range(start, start + count))
            start += count
    return {m: _frozen(a) for m, a in result.items()}


def uniform_assignor(subscriptions: Subscriptions, topics: TopicPartitionCounts,
                     previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Balanced and sticky: keep previous owners, give the rest to the least loaded eligible
    member, then move partitions from members holding two or more above an eligible one."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in subscriptions}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member_id in sorted(previous):
        if member_id not in subscriptions:
            continue
        for topic_id, partitions in previous[member_id].items():
            if topic_id not in subscriptions[member_id] or topic_id not in topics:
                continue
            for p in partitions:
                if p < topics[topic_id] and (topic_id, p) not in taken:
                    owned[member_id].add((topic_id, p))
                    taken.add((topic_id, p))
    subscribers = {t: sorted(m for m, subs in subscriptions.items() if t in subs) for t in topics}
    for topic_id in sorted(topics, key=str):
        for p in range(topics[topic_id]):
            eligible = subscribers[topic_id]
            if (topic_id, p) in taken or not eligible:
                continue
            owned[min(eligible, key=lambda m: (len(owned[m]), m))].add((topic_id, p))
    _balance(owned, subscribers)
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    for member_id, tps in owned.items():
        for topic_id, p in tps:
            result[member_id].setdefault(topic_id, set()).add(p)
    return {m: _frozen(a) for m, a in result.items()}


def _balance(owned: dict[str, set[tuple[uuid.UUID, int]]],
             subscribers: Mapping[uuid.UUID, list[str]]) -> None:
    """Move a partition (its highest first) from a member to an eligible one holding at least
    two fewer, until no such move is left. Each move lowers the sum of squared loads, so this ends."""
    moved = True
    while moved:
        moved = False
        for member_id in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            # The highest partitions go first, as Kafka's UniformAssignor keeps each member's
            # lowest partitions up to its quota and hands out the rest.
            for tp in sorted(owned[member_id], key=lambda x: (str(x[0]), x[1]), reverse=True):
                target = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
                if len(owned[target]) + 2 <= len(owned[member_id]):
                    owned[member_id].discard(tp)
                    owned[target].add(tp)
                    moved = True


def _frozen(assignment: Mapping[uuid.UUID, set[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assignor, "range": range_assignor}
