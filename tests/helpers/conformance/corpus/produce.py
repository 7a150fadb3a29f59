"""Produce: every version both brokers serve, acks, the batch checks (CRC, magic, size, keys of a
compacted topic), the idempotent producer's sequences and epochs (KIP-98, KIP-360), transactional
batches outside a transaction (KIP-890), unknown topics and partitions.

The helpers here (topics, batches, one-partition produce and fetch) serve the fetch and
list_offsets modules too."""

from __future__ import annotations

import time
from typing import Any

from exactly.protocol.apis import request_class
from exactly.protocol.framing import RequestHeader, encode_request
from exactly.protocol.records import Record, build_batch
from tests.helpers.conformance.harness import Closed, Divergence, Session, case, raw_frame
from tests.helpers.conformance.wire import entity

# The same time for both brokers in a run, and never taken for "now": the whole hour before the
# last one. Recent enough that time retention (Kafka's default of 7 days, first checked 30 s
# after it starts) deletes nothing a case still reads: a time in 2020 had Kafka delete a case's
# rolled segment between its writes and its reads, and answer OFFSET_OUT_OF_RANGE.
_HOUR_MS = 3_600_000
T0 = (time.time_ns() // 1_000_000 // _HOUR_MS - 1) * _HOUR_MS

# Fields of a Produce answer that say nothing about conformance on one node: the leader hints
# of KIP-951 are empty unless the broker is not the leader.
PRODUCE_IGNORE = ("node_endpoints",)


def create_topic(s: Session, name: str, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> dict[str, Any]:
    """CreateTopics v7, then wait until every partition has a leader; the creation's answer."""
    answer = s.call(19, 7, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 30000, "validate_only": False})
    error = answer["topics"][0]["error_code"]
    if error != 0:
        raise AssertionError(f"{s.target.name}: creating {name}: error {error}")
    wait_for_leaders(s, name, partitions)
    for p in range(partitions):  # the leader is known before it serves: wait until it does
        s.until(f"{name}-{p} served", lambda p=p: list_offset(s, name, -1, partition=p)[
            "topics"][0]["partitions"][0]["error_code"] == 0)
    return answer


def wait_for_leaders(s: Session, name: str, partitions: int = 1) -> None:
    def ready() -> bool:
        md = s.call(3, 12, {"topics": [{"name": name, "topic_id": None}],
                            "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})
        t = md["topics"][0]
        return (t["error_code"] == 0 and len(t["partitions"]) == partitions
                and all(p["leader_id"] >= 0 for p in t["partitions"]))

    s.until(f"leaders of {name}", ready)


def topic_id(s: Session, name: str) -> str:
    md = s.call(3, 12, {"topics": [{"name": name, "topic_id": None}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    return md["topics"][0]["topic_id"]  # type: ignore[no-any-return]


def batch(*values: bytes | None, keys: list[bytes | None] | None = None, producer_id: int = -1,
          producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
          timestamp: int = T0) -> bytes:
    keys = keys if keys is not None else [b"k%d" % i for i in range(len(values))]
    return build_batch([Record(k, v) for k, v in zip(keys, values, strict=True)],
                       timestamp=timestamp, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence,
                       transactional=transactional)


def produce_fields(topic: str, records: bytes | None, partition: int = 0, acks: int = -1,
                   transactional_id: str | None = None, *, version: int = 11,
                   topic_id_: str | None = None) -> dict[str, Any]:
    tdata: dict[str, Any] = ({"topic_id": topic_id_} if version >= 13 else {"name": topic})
    tdata["partition_data"] = [{"index": partition, "records": records}]
    return {"transactional_id": transactional_id, "acks": acks, "timeout": 30000,
            "topic_data": [tdata]}


def produce(s: Session, topic: str, records: bytes | None, partition: int = 0, acks: int = -1,
            transactional_id: str | None = None, version: int = 11) -> dict[str, Any]:
    tid = topic_id(s, topic) if version >= 13 else None
    return s.call(0, version, produce_fields(topic, records, partition, acks, transactional_id,
                                             version=version, topic_id_=tid))


def init_producer_id(s: Session, transactional_id: str | None = None, producer_id: int = -1,
                     producer_epoch: int = -1, version: int = 5) -> dict[str, Any]:
    return s.call(22, version, {"transactional_id": transactional_id,
                                "transaction_timeout": 60000, "producer_id": producer_id,
                                "producer_epoch": producer_epoch})


def wait_for_coordinator(s: Session, key: str, key_type: int = 1) -> None:
    """FindCoordinator until NONE: a fresh Kafka creates __transaction_state first."""
    def found() -> bool:
        a = s.call(10, 4, {"key_type": key_type, "coordinator_keys": [key]})
        return a["coordinators"][0]["error_code"] == 0  # type: ignore[no-any-return]

    s.until(f"coordinator of {key}", found)


def fetch_fields(topic_id_: str, offset: int = 0, partition: int = 0, isolation: int = 0,
                 max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20,
                 max_wait: int = 0) -> dict[str, Any]:
    """A sessionless (epoch -1) Fetch v13+ of one partition."""
    return {"max_wait": max_wait, "min_bytes": 0, "max_bytes": max_bytes,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic_id_, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def list_offset(s: Session, topic: str, timestamp: int, isolation: int = 0,
                version: int = 10, partition: int = 0) -> dict[str, Any]:
    fields: dict[str, Any] = {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}]}]}
    if version < 4:
        fields["topics"][0]["partitions"][0].pop("current_leader_epoch")
    if version >= 2:
        fields["isolation_level"] = isolation
    if version >= 10:
        fields["timeout"] = 30000
    return s.call(2, version, fields)


def corrupt(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0xFF
    return bytes(b)


# -- cases -------------------------------------------------------------------------------------


@case("produce.versions")
def versions(s: Session) -> None:
    """One batch at each of several versions (v3, v7, v9, v11, v12, v13 with a topic id)."""
    t = s.name("t")
    create_topic(s, t)
    for v in (3, 5, 7, 8, 9, 10, 11, 12, 13):
        s.record(f"v{v}", produce(s, t, batch(b"v%d" % v), version=v), ignore=PRODUCE_IGNORE)


@case("produce.acks")
def acks(s: Session) -> None:
    """acks=1, acks=-1, acks=0 (no answer: the next request's answer comes first), acks=2."""
    t = s.name("t")
    create_topic(s, t)
    s.record("acks=1", produce(s, t, batch(b"a"), acks=1), ignore=PRODUCE_IGNORE)
    s.record("acks=-1", produce(s, t, batch(b"b"), acks=-1), ignore=PRODUCE_IGNORE)
    conn = s.conn
    request = entity(request_class(0, 11), produce_fields(t, batch(b"c"), acks=0))
    conn.correlation_id += 1
    conn.send_frame(encode_request(RequestHeader(0, 11, conn.correlation_id, "conformance"),
                                   request))
    s.record("after acks=0", list_offset(s, t, -1))
    # acks=0 and a refused partition: Kafka closes the connection, the producer's only way of
    # learning that something went wrong (it then refreshes its metadata).
    for label, partition, records in (("unknown partition", 5, batch(b"x")),
                                      ("bad crc", 0, corrupt(batch(b"x"), 70))):
        conn = s.connect()
        request = entity(request_class(0, 11), produce_fields(t, records, partition, acks=0))
        conn.send_frame(encode_request(RequestHeader(0, 11, 1, "conformance"), request))
        conn.correlation_id = 1
        try:
            after: Any = s.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False},
                                conn=conn)["topics"]
        except (Closed, ConnectionResetError, BrokenPipeError):
            after = "closed"
        s.record(f"acks=0 {label}, then", after)
    s.record("acks=2", produce(s, t, batch(b"d"), acks=2), ignore=PRODUCE_IGNORE)
    s.record("acks=-2", produce(s, t, batch(b"e"), acks=-2), ignore=PRODUCE_IGNORE)
    s.record("end", list_offset(s, t, -1))


@case("produce.bad_batches")
def bad_batches(s: Session) -> None:
    """A bad CRC, a v1 (magic 1) message, a v0 message, an empty and a null record set, a
    truncated batch: each partition answers its error and nothing is written."""
    t = s.name("t")
    create_topic(s, t)
    good = batch(b"x")
    s.record("bad crc", produce(s, t, corrupt(good, len(good) - 1)), ignore=PRODUCE_IGNORE)
    # magic 1: offset, size, crc, magic=1, attributes, timestamp, key, value
    import struct
    import zlib

    body = struct.pack(">bbqi", 1, 0, T0, -1) + struct.pack(">i", 1) + b"v"
    msg = struct.pack(">I", zlib.crc32(body)) + body
    v1 = struct.pack(">qi", 0, len(msg)) + msg
    s.record("magic 1", produce(s, t, v1), ignore=PRODUCE_IGNORE)
    body0 = struct.pack(">bbi", 0, 0, -1) + struct.pack(">i", 1) + b"v"
    msg0 = struct.pack(">I", zlib.crc32(body0)) + body0
    v0 = struct.pack(">qi", 0, len(msg0)) + msg0
    s.record("magic 0", produce(s, t, v0), ignore=PRODUCE_IGNORE)
    magic3 = bytearray(good)
    magic3[16] = 3
    s.record("magic 3", produce(s, t, bytes(magic3)), ignore=PRODUCE_IGNORE)
    s.record("truncated", produce(s, t, good[:-3]), ignore=PRODUCE_IGNORE)
    s.record("good then truncated", produce(s, t, good + good[:-3]), ignore=PRODUCE_IGNORE)
    s.record("two batches", produce(s, t, good + batch(b"y")), ignore=PRODUCE_IGNORE)
    s.record("length 5", produce(s, t, good[:8] + struct.pack(">i", 5) + good[12:]),
             ignore=PRODUCE_IGNORE)
    s.record("8 bytes", produce(s, t, good[:8]), ignore=PRODUCE_IGNORE)
    s.record("end", list_offset(s, t, -1))


@case("produce.unknown")
def unknown(s: Session) -> None:
    """An unknown topic (with auto-creation on: Produce never creates), an unknown partition,
    an unknown topic id (v13)."""
    t = s.name("t")
    create_topic(s, t, partitions=2)
    s.record("unknown topic", produce(s, s.name("nope"), batch(b"x")), ignore=PRODUCE_IGNORE)
    s.record("unknown partition", produce(s, t, batch(b"x"), partition=7),
             ignore=PRODUCE_IGNORE)
    s.record("negative partition", produce(s, t, batch(b"x"), partition=-1),
             ignore=PRODUCE_IGNORE)
    s.record("unknown topic id", s.call(0, 13, produce_fields(
        t, batch(b"x"), version=13, topic_id_="7f9c24e8-4a3b-4f5e-9d2c-1b0a9e8d7c6b")),
        ignore=PRODUCE_IGNORE)
    s.record("metadata", s.call(3, 12, {"topics": [{"name": s.name("nope"), "topic_id": None}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False}),
             ignore=("topics.*.topic_id",))


@case("produce.record_too_large")
def record_too_large(s: Session) -> None:
    """A batch larger than the topic's max.message.bytes: MESSAGE_TOO_LARGE."""
    t = s.name("t")
    create_topic(s, t, configs={"max.message.bytes": "200"})
    s.record("small", produce(s, t, batch(b"x" * 10)), ignore=PRODUCE_IGNORE)
    s.record("large", produce(s, t, batch(b"x" * 400)), ignore=PRODUCE_IGNORE)
    s.record("end", list_offset(s, t, -1))


@case("produce.compacted_without_key")
def compacted_without_key(s: Session) -> None:
    """A record without a key in a compacted topic: INVALID_RECORD with the record's index."""
    t = s.name("t")
    create_topic(s, t, configs={"cleanup.policy": "compact"})
    s.record("keyed", produce(s, t, batch(b"a")), ignore=PRODUCE_IGNORE)
    s.record("no key", produce(s, t, batch(b"a", b"b", keys=[b"k", None])),
             ignore=PRODUCE_IGNORE)
    s.record("end", list_offset(s, t, -1))


@case("produce.idempotent")
def idempotent(s: Session) -> None:
    """The idempotent producer (InitProducerId without a transactional id): in-order batches,
    a duplicate (the original's offset), out-of-order sequences, a stale epoch after a bump
    (KIP-360), a future epoch, an unknown producer id."""
    t = s.name("t")
    create_topic(s, t)
    init = s.record("init", s.until("InitProducerId", lambda: (
        a := init_producer_id(s))["error_code"] == 0 and a))
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def send(label: str, seq: int, *values: bytes, producer_id: int = pid,
             producer_epoch: int = epoch) -> None:
        s.record(label, produce(s, t, batch(*values, producer_id=producer_id,
                                               producer_epoch=producer_epoch,
                                               base_sequence=seq)), ignore=PRODUCE_IGNORE)

    send("seq 0", 0, b"a", b"b")
    send("seq 2", 2, b"c")
    send("duplicate seq 0", 0, b"a", b"b")
    send("duplicate seq 2", 2, b"c")
    send("gap seq 5", 5, b"d")
    send("seq 3", 3, b"d")
    send("seq 1 again (overlaps)", 1, b"b", b"c")
    bumped = s.record("bump", init_producer_id(s, producer_id=pid, producer_epoch=epoch))
    send("stale epoch", 4, b"e")
    send("new epoch seq 3", 3, b"e", producer_epoch=bumped["producer_epoch"])
    send("new epoch seq 0", 0, b"e", producer_epoch=bumped["producer_epoch"])
    send("future epoch seq 0", 0, b"f", producer_epoch=bumped["producer_epoch"] + 5)
    send("future epoch seq 7", 7, b"f", producer_epoch=bumped["producer_epoch"] + 7)
    send("unknown producer seq 0", 0, b"g", producer_id=pid + 1000, producer_epoch=0)
    send("unknown producer seq 9", 9, b"g", producer_id=pid + 2000, producer_epoch=0)
    s.record("end", list_offset(s, t, -1))


@case("produce.transactional_without_transaction")
def transactional_without_transaction(s: Session) -> None:
    """Transactional batches outside a transaction: without the request's transactional id,
    with an id whose transaction does not hold the partition (Produce v11: KIP-890 part 1
    verification), with an unknown id, and a non-transactional batch under a transactional id."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    wait_for_coordinator(s, txn)
    init = s.until("InitProducerId", lambda: (a := init_producer_id(s, txn))["error_code"] == 0
                   and a)
    s.record("init", init)
    pid, epoch = init["producer_id"], init["producer_epoch"]
    txb = batch(b"t", producer_id=pid, producer_epoch=epoch, base_sequence=0,
                transactional=True)
    s.record("no transactional id", produce(s, t, txb), ignore=PRODUCE_IGNORE)
    s.record("not added v11", produce(s, t, txb, transactional_id=txn), ignore=PRODUCE_IGNORE)
    s.record("unknown id v11", produce(s, t, txb, transactional_id=s.name("other")),
             ignore=PRODUCE_IGNORE)
    s.record("plain batch, transactional id", produce(
        s, t, batch(b"p", producer_id=pid, producer_epoch=epoch, base_sequence=0),
        transactional_id=txn), ignore=PRODUCE_IGNORE)
    s.record("end", list_offset(s, t, -1))


@case("produce.old_versions")
def old_versions(s: Session) -> None:
    """Produce v0-v2: advertised by Kafka 4.x (KAFKA-18659: librdkafka looks for v0) but
    refused. kio has no v0-v2 classes: hand-made frames (v2 header, acks=1, one topic, one
    partition, a magic-2 batch)."""
    import struct

    t = s.name("t")
    create_topic(s, t)
    records = batch(b"x")
    for v in (0, 1, 2):
        body = (struct.pack(">hi", 1, 30000) + struct.pack(">i", 1)
                + struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", 1)
                + struct.pack(">ii", 0, len(records)) + records)
        conn = s.connect()
        conn.send_frame(raw_frame(0, v, 1, body, flexible_header=False))
        s.record(f"v{v}", _raw_outcome(conn))
    s.record("end", list_offset(s, t, -1))


def _raw_outcome(conn: Any, wait: float = 10.0) -> Any:
    """The raw answer's bytes (hex), or "closed"/"no answer"."""
    from tests.helpers.conformance.harness import Closed

    conn.sock.settimeout(wait)
    try:
        return conn.read_frame().hex()
    except (Closed, ConnectionResetError, BrokenPipeError):
        return "closed"
    except TimeoutError:
        return "no answer"


DIVERGENCES: list[Divergence] = []
