"""ListOffsets: latest (-1), earliest (-2), max timestamp (-3, KIP-734), earliest local (-4,
KIP-405), latest tiered (-5, KIP-1005), earliest pending upload (-6, KIP-1023), by timestamp, at
several versions; the last stable offset under read_committed (isolation level 1) with a
transaction open; unknown topics and partitions."""

from __future__ import annotations

from typing import Any

from tests.helpers.conformance.corpus.produce import (
    T0,
    batch,
    create_topic,
    init_producer_id,
    list_offset,
    produce,
    wait_for_coordinator,
)
from tests.helpers.conformance.harness import Divergence, Session, case


def several(s: Session, topic: str, timestamps: list[int], version: int,
            isolation: int = 0) -> dict[str, Any]:
    fields: dict[str, Any] = {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": i, "timestamp": ts} for i, ts in enumerate(timestamps)]}]}
    if version >= 4:
        for p in fields["topics"][0]["partitions"]:
            p["current_leader_epoch"] = -1
    if version >= 2:
        fields["isolation_level"] = isolation
    if version >= 10:
        fields["timeout"] = 30000
    return s.call(2, version, fields)


@case("list_offsets.special_timestamps")
def special_timestamps(s: Session) -> None:
    """Each special timestamp on an empty partition and on one with records, at each version
    that knows it."""
    t = s.name("t")
    create_topic(s, t)
    specials = (-1, -2, -3, -4, -5, -6)
    for ts in specials:
        s.record(f"empty {ts} v11", list_offset(s, t, ts, version=11))
    produce(s, t, batch(b"a", b"b", timestamp=T0 + 10))
    produce(s, t, batch(b"c", timestamp=T0 + 30))
    produce(s, t, batch(b"d", timestamp=T0 + 20))
    for v in (1, 2, 4, 6, 7, 8, 9, 10, 11):
        for ts in specials:
            s.record(f"{ts} v{v}", list_offset(s, t, ts, version=v))


@case("list_offsets.by_timestamp")
def by_timestamp(s: Session) -> None:
    """The first offset whose timestamp is at or after the one asked for, before, between and
    after the records' timestamps."""
    t = s.name("t")
    create_topic(s, t)
    produce(s, t, batch(b"a", b"b", timestamp=T0 + 10))
    produce(s, t, batch(b"c", timestamp=T0 + 30))
    produce(s, t, batch(b"d", timestamp=T0 + 20))
    for delta in (0, 10, 11, 20, 25, 30, 31):
        for v in (1, 7, 11):
            s.record(f"T0+{delta} v{v}", list_offset(s, t, T0 + delta, version=v))


@case("list_offsets.read_committed")
def read_committed(s: Session) -> None:
    """Latest under read_uncommitted (the high watermark) and read_committed (the last stable
    offset) with a transaction open, then after it commits."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    produce(s, t, batch(b"before"))
    wait_for_coordinator(s, txn)
    init = s.until("InitProducerId", lambda: (a := init_producer_id(s, txn))["error_code"] == 0
                   and a)
    pid, epoch = init["producer_id"], init["producer_epoch"]
    produce(s, t, batch(b"t1", producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        transactional=True), transactional_id=txn, version=12)
    for v in (2, 5, 11):
        for isolation in (0, 1):
            for ts in (-1, -2, -3):
                s.record(f"open {ts} isolation {isolation} v{v}",
                         list_offset(s, t, ts, isolation=isolation, version=v))
    end = s.call(26, 5, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                         "committed": True})
    assert end["error_code"] == 0, end
    s.until("markers", lambda: list_offset(s, t, -1, isolation=1)["topics"][0]["partitions"][0][
        "offset"] == 3)
    for isolation in (0, 1):
        s.record(f"committed isolation {isolation}", list_offset(s, t, -1, isolation=isolation))


@case("list_offsets.unknown")
def unknown(s: Session) -> None:
    """An unknown topic, an unknown partition next to a known one, a negative partition."""
    t = s.name("t")
    create_topic(s, t)
    s.record("unknown topic", list_offset(s, s.name("nope"), -1))
    # Kafka answers the partitions of a topic in no particular order (a map of its own).
    s.record("unknown partition", several(s, t, [-1, -1, -2], version=10),
             unordered=("topics.*.partitions",))
    s.record("v1 unknown partition", several(s, t, [-1, -2], version=1),
             unordered=("topics.*.partitions",))


DIVERGENCES: list[Divergence] = []
