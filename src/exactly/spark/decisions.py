"""The commit decisions of exactly-once streams, kept in the log itself.

The driver is the coordinator of a two-phase commit per micro-batch. Before it completes any
participant it records the decision — batch id and each task's PreparedTxnState — as one record in
a compacted topic of the same cluster (key: the query's transactional id prefix), so the decision
survives the driver and needs no filesystem shared with the executors. Only commits are recorded:
a transaction with no decision is aborted (presumed abort). Batches run one after the other, so
the newest decision of a query is the only one that can still be incomplete.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from exactly.client import Admin, AdminError, Consumer, NewTopic, OffsetSpec, Producer
from exactly.spark.clients import PROCESS, ClientFactory
from exactly.spark.offsets import PartitionRange
from exactly.spark.source import read_with

__all__ = ["DECISIONS_PRODUCER", "TOPIC_CONFIGS", "Decision", "DecisionReader",
           "create_topic_if_missing", "ensure_topic", "latest_decision", "record_decision",
           "send_decision"]


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

# The decisions producer: acks=all, so that a decision is durable before any participant is
# completed by it. Not idempotent: a retry's duplicate is the same decision, and an idempotent
# producer's id would leave a batch per decision in the compacted topic (the cleaner keeps each
# producer's last batch until producer.id.expiration.ms).
DECISIONS_PRODUCER = {"acks": "all", "enable.idempotence": "false"}


def ensure_topic(client: Mapping[str, str], topic: str, clients: ClientFactory = PROCESS) -> None:
    """Create the decisions topic (one partition, compacted) unless it exists."""
    with clients.admin(client) as admin:
        create_topic_if_missing(admin, topic)


def create_topic_if_missing(admin: Admin, topic: str) -> None:
    """ensure_topic with an Admin the caller holds."""
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
    per topic in the process, and so does each QueryCoordinator (exactly.spark.coordinator); a
    fresh worker reads the topic once from its start, which compaction keeps to one record per
    query plus the active segment.

    `latest` takes the Admin (metadata and ListOffsets) and the consumer to read with from its
    caller, who holds them (a QueryCoordinator), or makes its own for the call with `clients`:
    then one Admin, and one consumer if there is anything new to read."""

    def __init__(self, client: Mapping[str, str], topic: str,
                 clients: ClientFactory = PROCESS) -> None:
        self.client = {**client, "isolation.level": "read_uncommitted"}
        self.topic = topic
        self.clients = clients
        self.positions: dict[tuple[str, int], int] = {}  # next offset to read
        self.newest: dict[bytes, Decision] = {}  # per prefix
        self.records_read = 0

    @property
    def consumer_config(self) -> dict[str, str]:
        """The config of a consumer to read with (read_uncommitted: decisions are written
        outside transactions, and the newest must be seen at once)."""
        return {**self.client, "auto.offset.reset": "none"}

    def latest(self, prefix: str, admin: Admin | None = None,
               consumer: Consumer | None = None) -> Decision | None:
        if admin is None:
            with self.clients.admin(self.client) as own:
                return self.latest(prefix, own, consumer)
        if self.topic not in admin.list_topics():
            return None
        found = admin.describe_topics([self.topic])
        tps = [(self.topic, p.partition) for p in found[self.topic].partitions]
        starts = _offsets(admin, tps, OffsetSpec.earliest())
        ends = _offsets(admin, tps, OffsetSpec.latest())
        with contextlib.ExitStack() as stack:
            if consumer is not None:
                stack.callback(_unassign, consumer)  # held by the caller: no fetching while idle
            for tp in tps:
                position = self.positions.get(tp, starts[tp])
                if not starts[tp] <= position <= ends[tp]:  # the topic was recreated: start over
                    position = starts[tp]
                    self.newest.clear()
                if position < ends[tp]:
                    if consumer is None:  # made for this call, and only when there is news
                        consumer = stack.enter_context(self.clients.consumer(self.consumer_config))
                    self._read(consumer, PartitionRange(tp[0], tp[1], position, ends[tp]))
                self.positions[tp] = ends[tp]
        return self.newest.get(prefix.encode())

    def _read(self, consumer: Consumer, r: PartitionRange) -> None:
        for chunk in read_with(consumer, r):
            self.records_read += len(chunk)
            for record in chunk:
                if record.key is None or record.value is None:
                    continue
                decision = Decision.from_json(record.value)
                known = self.newest.get(record.key)
                if known is None or decision.batch >= known.batch:
                    self.newest[record.key] = decision


def _unassign(consumer: Consumer) -> None:
    with contextlib.suppress(Exception):  # a broken consumer: its holder finds out on next use
        consumer.assign([])


def _offsets(admin: Admin, tps: list[tuple[str, int]], spec: OffsetSpec
             ) -> dict[tuple[str, int], int]:
    """ListOffsets (read_uncommitted: "latest" is the high watermark) for each partition."""
    found = admin.list_offsets({tp: spec for tp in tps})
    return {(tp.topic, tp.partition): info.offset for tp, info in found.items()}


_readers: dict[tuple[str, str], DecisionReader] = {}


def latest_decision(client: Mapping[str, str], topic: str, prefix: str) -> Decision | None:
    """The newest decision recorded for `prefix`, or None (reading only what is new since this
    process last asked; the clients made for the call, see DecisionReader)."""
    key = (str(client.get("bootstrap.servers", "")), topic)
    reader = _readers.get(key)
    if reader is None or reader.client != {**client, "isolation.level": "read_uncommitted"}:
        reader = _readers[key] = DecisionReader(client, topic)
    return reader.latest(prefix)


def record_decision(client: Mapping[str, str], topic: str, decision: Decision,
                    clients: ClientFactory = PROCESS) -> None:
    """Write the decision and wait until the broker has acknowledged it, with a producer of its
    own (DECISIONS_PRODUCER: acks=all, not idempotent)."""
    with clients.producer({**client, **DECISIONS_PRODUCER}) as producer:
        send_decision(producer, topic, decision)


def send_decision(producer: Producer, topic: str, decision: Decision) -> None:
    """Write the decision with a producer the caller holds (its config with DECISIONS_PRODUCER)
    and wait until the broker has acknowledged it."""
    future = producer.send(topic, decision.to_json(), key=decision.prefix.encode())
    producer.flush()
    future.result(timeout=0)
