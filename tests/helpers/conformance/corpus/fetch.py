"""Fetch: several versions (names up to v12, topic ids from v13: KIP-516), an empty partition,
offsets in and beyond the log (OFFSET_OUT_OF_RANGE), the size limits of KIP-74, and
read_committed against read_uncommitted around open, aborted and committed transactions (KIP-98:
the last stable offset, the aborted transactions of the returned range).

Fetches are sessionless (session epoch -1: KIP-227's "no session"), so both brokers answer
session id 0. Records are compared as batches (offsets, producer, flags, keys and values), not as
bytes: a marker's timestamp is the broker's clock."""

from __future__ import annotations

from typing import Any

from exactly.protocol.records import HEADER_SIZE, RecordBatchHeader, decode_records, iter_batches
from tests.helpers.conformance.corpus.produce import (
    batch,
    create_topic,
    fetch_fields,
    init_producer_id,
    list_offset,
    produce,
    topic_id,
    wait_for_coordinator,
)
from tests.helpers.conformance.harness import Divergence, Session, case

# log_start_offset is -1 before v5 and the log's after; preferred_read_replica -1 on one node.
FETCH_IGNORE: tuple[str, ...] = ()


def batches(records_hex: str | None) -> Any:
    """A Records blob as the list of its batches, what a consumer sees of them."""
    if records_hex is None:
        return None
    out = []
    data = bytes.fromhex(records_hex)
    whole = 0  # Kafka may end the data with a fragment of a batch, which clients drop
    while whole + HEADER_SIZE <= len(data):
        h = RecordBatchHeader(data, whole)
        if h.end > len(data):
            break
        whole = h.end
    for h in iter_batches(data[:whole]):
        out.append({
            "base_offset": h.base_offset, "last_offset_delta": h.last_offset_delta,
            "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
            "base_sequence": h.base_sequence, "transactional": h.is_transactional,
            "control": h.is_control, "records_count": h.records_count,
            "records": [] if h.is_control else [
                [r.key.hex() if r.key is not None else None,
                 r.value.hex() if r.value is not None else None]
                for r in decode_records(h)],
        })
    return out


def readable(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer with each partition's records as batches."""
    for topic in answer.get("responses", []):
        for p in topic.get("partitions", []):
            p["records"] = batches(p.get("records"))
    return answer


def fetch(s: Session, topic: str, offset: int = 0, *, version: int = 16, isolation: int = 0,
          max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20,
          partition: int = 0) -> dict[str, Any]:
    if version >= 13:
        fields = fetch_fields(topic_id(s, topic), offset, partition, isolation, max_bytes,
                              partition_max_bytes)
    else:
        fields = fetch_fields("", offset, partition, isolation, max_bytes, partition_max_bytes)
        fields["topics"][0] = {"topic": topic, "partitions": fields["topics"][0]["partitions"]}
        part = fields["topics"][0]["partitions"][0]
        if version < 12:
            part.pop("last_fetched_epoch")
        if version < 9:
            part.pop("current_leader_epoch")
        if version < 5:
            part.pop("log_start_offset")
        if version < 11:
            fields.pop("rack_id")
        if version < 7:
            for k in ("session_id", "session_epoch", "forgotten_topics_data"):
                fields.pop(k)
        else:
            fields["forgotten_topics_data"] = []
    return readable(s.call(1, version, fields))


@case("fetch.versions")
def versions(s: Session) -> None:
    """Two batches fetched at several versions from offset 0."""
    t = s.name("t")
    create_topic(s, t)
    produce(s, t, batch(b"a", b"b"))
    produce(s, t, batch(b"c"))
    for v in (4, 5, 7, 11, 12, 13, 15, 16, 17, 18):
        s.record(f"v{v}", fetch(s, t, version=v), ignore=FETCH_IGNORE)


@case("fetch.offsets")
def offsets(s: Session) -> None:
    """An empty partition; then offsets at the start, inside a batch, at the end, beyond the end
    (OFFSET_OUT_OF_RANGE), negative; an unknown partition and an unknown topic id."""
    t = s.name("t")
    create_topic(s, t, partitions=2)
    s.record("empty at 0", fetch(s, t, 0))
    s.record("empty at 1", fetch(s, t, 1))
    produce(s, t, batch(b"a", b"b", b"c"))
    produce(s, t, batch(b"d"))
    for offset in (0, 1, 3, 4, 5, 100, -1):
        s.record(f"at {offset}", fetch(s, t, offset))
    s.record("v12 at 5", fetch(s, t, 5, version=12))
    s.record("unknown partition", fetch(s, t, 0, partition=9))
    fields = fetch_fields("7f9c24e8-4a3b-4f5e-9d2c-1b0a9e8d7c6b")
    s.record("unknown topic id", readable(s.call(1, 16, fields)))
    s.record("unknown topic v12", fetch(s, s.name("nope"), 0, version=12))
    deleted = s.call(21, 2, {"topics": [{"name": t, "partitions": [
        {"partition_index": 0, "offset": 2}]}], "timeout": 30000})
    assert deleted["topics"][0]["partitions"][0]["error_code"] == 0, deleted
    s.record("below the log start", fetch(s, t, 1))
    s.record("at the log start", fetch(s, t, 2))


@case("fetch.max_bytes")
def max_bytes(s: Session) -> None:
    """KIP-74: the first batch comes whole above any limit; then only whole batches that fit."""
    t = s.name("t")
    create_topic(s, t)
    for i in range(4):
        produce(s, t, batch(*(b"%d-%d" % (i, j) * 20 for j in range(5))))
    size = len(batch(*(b"0-%d" % j * 20 for j in range(5))))
    for label, mb, pmb in (("partition 1 byte", 1 << 20, 1), ("total 1 byte", 1, 1 << 20),
                           ("partition 1.5 batches", 1 << 20, size * 3 // 2),
                           ("total 2.5 batches", size * 5 // 2, 1 << 20),
                           ("partition 2 batches", 1 << 20, size * 2)):
        s.record(label, fetch(s, t, 0, max_bytes=mb, partition_max_bytes=pmb))
    s.record("v4 partition 1 byte", fetch(s, t, 0, version=4, partition_max_bytes=1))


@case("fetch.read_committed")
def read_committed(s: Session) -> None:
    """A transaction open (the LSO stays at its first offset), then aborted (its range in
    aborted_transactions), then a committed one: read_committed and read_uncommitted at each
    step. Transaction version 1 requests (AddPartitionsToTxn v3, Produce v11, EndTxn v4)."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    produce(s, t, batch(b"before"))
    wait_for_coordinator(s, txn)
    init = s.until("InitProducerId", lambda: (a := init_producer_id(s, txn))["error_code"] == 0
                   and a)
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def add() -> None:
        a = s.call(24, 3, {"v3_and_below_transactional_id": txn,
                           "v3_and_below_producer_id": pid,
                           "v3_and_below_producer_epoch": epoch,
                           "v3_and_below_topics": [{"name": t, "partitions": [0]}]})
        assert a["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"] == 0, a

    def end(commit: bool) -> None:
        a = s.call(26, 4, {"transactional_id": txn, "producer_id": pid,
                           "producer_epoch": epoch, "committed": commit})
        assert a["error_code"] == 0, a
        # markers written: the LSO reaches the high watermark
        s.until("markers", lambda: list_offset(s, t, -1, isolation=1)["topics"][0][
            "partitions"][0]["offset"] == list_offset(s, t, -1)["topics"][0]["partitions"][0][
            "offset"])

    def look(label: str) -> None:
        for isolation in (0, 1):
            name = "committed" if isolation else "uncommitted"
            s.record(f"{label} read_{name}", fetch(s, t, 0, isolation=isolation))
            s.record(f"{label} read_{name} v4", fetch(s, t, 0, isolation=isolation, version=4))
            s.record(f"{label} latest {name}", list_offset(s, t, -1, isolation=isolation))

    add()
    produce(s, t, batch(b"t1", b"t2", producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        transactional=True), transactional_id=txn)
    produce(s, t, batch(b"plain"))
    look("open")
    s.record("open at lso read_committed", fetch(s, t, 1, isolation=1))
    end(commit=False)
    look("aborted")
    s.record("aborted from 2 read_committed", fetch(s, t, 2, isolation=1))
    s.record("aborted from 4 read_committed", fetch(s, t, 4, isolation=1))
    add()
    produce(s, t, batch(b"t3", producer_id=pid, producer_epoch=epoch, base_sequence=2,
                        transactional=True), transactional_id=txn)
    end(commit=True)
    look("committed")


@case("fetch.session")
def session(s: Session) -> None:
    """A full fetch that asks for a fetch session (KIP-227: session id 0, epoch 0)."""
    t = s.name("t")
    create_topic(s, t)
    produce(s, t, batch(b"a"))
    fields = fetch_fields(topic_id(s, t))
    fields["session_epoch"] = 0
    s.record("new session", readable(s.call(1, 16, fields)))


DIVERGENCES: list[Divergence] = [
    Divergence("fetch.session", "new session", "session_id",
               "KIP-227 lets a broker decline fetch sessions: Exactly answers session id 0, "
               "and clients go on with full fetch requests (fetch.py's module docstring)"),
]
