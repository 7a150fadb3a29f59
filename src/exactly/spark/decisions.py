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

__all__ = ["TOPIC_CONFIGS", "Decision", "DecisionReader", "ensure_topic", "latest_decision",
           "record_decision"]


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


# Compacted, so that it keeps the newest decision per query, and with small segments that roll
# at least hourly: the broker's log cleaner compacts only segments that are no longer active, and
# latest_decision reads the whole topic, which stays about one segment long.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(1024 * 1024),
                 "segment.ms": str(3600 * 1000)}


def ensure_topic(client: Mapping[str, str], topic: str) -> None:
    """Create the decisions topic (one partition, compacted) unless it exists."""
    with Admin(client) as admin:
        if topic in admin.list_topics():
            return
        try:
            admin.create_topics([NewTopic(topic, 1, -1, dict(TOPIC_CONFIGS))])
        except AdminError as exc:  # created meanwhile by another query: fine
            if any(e.name != "TOPIC_ALREADY_EXISTS" for e in exc.errors.values()):
                raise


class DecisionReader:
    """Reads a decisions topic and remembers how far: each call reads only what was written
    since the last one. Spark creates the stream writer anew for every micro-batch's commit (and
    for the executors' plan), in Python workers it reuses, so `latest_decision` keeps one reader
    per topic in the process; a fresh worker reads the topic once from its start, which
    compaction keeps to one record per query plus the active segment."""

    def __init__(self, client: Mapping[str, str], topic: str) -> None:
        self.client = {**client, "isolation.level": "read_uncommitted"}
        self.topic = topic
        self.positions: dict[tuple[str, int], int] = {}  # next offset to read
        self.newest: dict[bytes, Decision] = {}  # per prefix
        self.records_read = 0

    def latest(self, prefix: str) -> Decision | None:
        with Admin(self.client) as admin:
            if self.topic not in admin.list_topics():
                return None
            found = admin.describe_topics([self.topic])
        tps = [(self.topic, p.partition) for p in found[self.topic].partitions]
        starts = resolve_offsets(self.client, tps, "earliest", -2)
        ends = resolve_offsets(self.client, tps, "latest", -1)
        for tp in tps:
            position = self.positions.get(tp, starts[tp])
            if not starts[tp] <= position <= ends[tp]:  # the topic was recreated: start over
                position = starts[tp]
                self.newest.clear()
            for chunk in read_range(self.client, PartitionRange(tp[0], tp[1], position, ends[tp])):
                self.records_read += len(chunk)
                for record in chunk:
                    if record.key is None or record.value is None:
                        continue
                    decision = Decision.from_json(record.value)
                    known = self.newest.get(record.key)
                    if known is None or decision.batch >= known.batch:
                        self.newest[record.key] = decision
            self.positions[tp] = ends[tp]
        return self.newest.get(prefix.encode())


_readers: dict[tuple[str, str], DecisionReader] = {}


def latest_decision(client: Mapping[str, str], topic: str, prefix: str) -> Decision | None:
    """The newest decision recorded for `prefix`, or None (reading only what is new since this
    process last asked)."""
    key = (str(client.get("bootstrap.servers", "")), topic)
    reader = _readers.get(key)
    if reader is None or reader.client != {**client, "isolation.level": "read_uncommitted"}:
        reader = _readers[key] = DecisionReader(client, topic)
    return reader.latest(prefix)


def record_decision(client: Mapping[str, str], topic: str, decision: Decision) -> None:
    """Write the decision and wait until the broker has acknowledged it (acks=all). Not
    idempotent: a retry's duplicate is the same decision, and an idempotent producer's id would
    leave a batch per decision in the compacted topic (the cleaner keeps each producer's last
    batch until producer.id.expiration.ms)."""
    with Producer({**client, "acks": "all", "enable.idempotence": "false"}) as producer:
        future = producer.send(topic, decision.to_json(), key=decision.prefix.encode())
        producer.flush()
        future.result(timeout=0)
