"""The commit decisions of exactly-once streams, kept in the log itself.

The driver is the coordinator of a two-phase commit per micro-batch. Before it completes any
participant it records the decision — batch id and each task's PreparedTxnState — as one record in
a compacted topic of the same cluster (key: the query's transactional id prefix), so the decision
survives the driver and needs no filesystem shared with the executors. Only commits are recorded:
a transaction with no decision is aborted (presumed abort). Batches run one after the other, so
the newest decision of a query is the only one that can still be incomplete.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from exactly.client import Admin, AdminError, NewTopic, Producer
from exactly.spark.offsets import PartitionRange, resolve_offsets
from exactly.spark.source import read_range

__all__ = ["Decision", "ensure_topic", "latest_decision", "record_decision"]


@dataclass(frozen=True)
class Decision:
    prefix: str
    batch: int
    participants: dict[str, str] = field(default_factory=dict)  # transactional id -> state text
    query_id: str = ""  # Spark's query id: the same across restarts from one checkpoint

    def to_json(self) -> bytes:
        return json.dumps({"prefix": self.prefix, "batch": self.batch, "query_id": self.query_id,
                           "participants": self.participants}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Decision:
        value = json.loads(data)
        return cls(str(value["prefix"]), int(value["batch"]),
                   {str(k): str(v) for k, v in value["participants"].items()},
                   str(value.get("query_id", "")))

    def covers(self, query_id: str, batch: int) -> bool:
        """Whether `batch` of the query `query_id` was decided already (a replay). A query
        started on a new checkpoint has a new id and counts its batches from 0 again."""
        return self.query_id == query_id and batch <= self.batch


def ensure_topic(client: Mapping[str, str], topic: str) -> None:
    """Create the decisions topic (one partition, compacted) unless it exists."""
    with Admin(client) as admin:
        if topic in admin.list_topics():
            return
        try:
            admin.create_topics([NewTopic(topic, 1, -1, {"cleanup.policy": "compact"})])
        except AdminError as exc:  # created meanwhile by another query: fine
            if any(e.name != "TOPIC_ALREADY_EXISTS" for e in exc.errors.values()):
                raise


def latest_decision(client: Mapping[str, str], topic: str, prefix: str) -> Decision | None:
    """The newest decision recorded for `prefix`, or None."""
    with Admin(client) as admin:
        if topic not in admin.list_topics():
            return None
        found = admin.describe_topics([topic])
    tps = [(topic, p.partition) for p in found[topic].partitions]
    reader = {**client, "isolation.level": "read_uncommitted"}
    starts = resolve_offsets(reader, tps, "earliest", -2)
    ends = resolve_offsets(reader, tps, "latest", -1)
    newest: Decision | None = None
    key = prefix.encode()
    for tp in tps:
        for chunk in read_range(reader, PartitionRange(tp[0], tp[1], starts[tp], ends[tp])):
            for record in chunk:
                if record.key == key and record.value is not None:
                    decision = Decision.from_json(record.value)
                    if newest is None or decision.batch >= newest.batch:
                        newest = decision
    return newest


def record_decision(client: Mapping[str, str], topic: str, decision: Decision) -> None:
    """Write the decision and wait until the broker has acknowledged it (acks=all)."""
    with Producer({**client, "acks": "all", "enable.idempotence": "true"}) as producer:
        future = producer.send(topic, decision.to_json(), key=decision.prefix.encode())
        producer.flush()
        future.result(timeout=0)
