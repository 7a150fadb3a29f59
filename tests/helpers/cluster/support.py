"""What tests on a three-node Apache Kafka cluster share: waiting, and asking the cluster where
its leaders and coordinators are (through Exactly's own Admin)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from exactly.client import Admin, AdminError, NewTopic
from exactly.protocol.errors import ErrorCode


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120.0) -> Any:
    """probe()'s first truthy value; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {value!r})")
        time.sleep(0.2)


def leaders(admin: Admin, topic: str) -> dict[int, int]:
    """Each partition's leader (-1: none), as the cluster's metadata says now."""
    return {p.partition: p.leader for p in admin.describe_topics([topic])[topic].partitions}


def fully_replicated(admin: Admin, topic: str, nodes: int = 3) -> bool:
    """Every partition of `topic` has a leader and `nodes` replicas in sync. A topic just
    created may be unknown to the node asked for a moment (its metadata image follows the
    controller's): not yet, then."""
    try:
        parts = admin.describe_topics([topic])[topic].partitions
    except AdminError as exc:
        if exc.code != ErrorCode.unknown_topic_or_partition:
            raise
        return False
    return all(p.leader >= 0 and len(p.isr) == nodes for p in parts)


def create_replicated(admin: Admin, topic: str, partitions: int) -> None:
    """A topic with replication factor 3 whose partitions all have a leader and a full ISR."""
    admin.create_topics([NewTopic(topic, partitions, 3)])
    wait_for(f"{topic} fully replicated", lambda: fully_replicated(admin, topic))


def group_coordinator(admin: Admin, group: str) -> int:
    """The node that coordinates `group` (the one that answers its description)."""
    return admin.describe_consumer_groups([group])[group].coordinator.node_id


def transaction_coordinator(admin: Admin, transactional_id: str) -> int:
    """The node that coordinates `transactional_id`."""
    return admin.describe_transactions([transactional_id])[transactional_id].coordinator_id
