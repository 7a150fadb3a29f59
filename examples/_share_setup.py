"""What the share-group examples have in common: a broker (given, or one of their own), a share
consumer subscribed to an input topic, and input records written after it joined."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator

from exactly.client import Producer, ShareConsumer, ShareRecord


def arguments(prog: str, doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="HOST:PORT of a broker (default: start one)")
    parser.add_argument("--records", type=int, default=10, help="input records (default 10)")
    parser.add_argument("--input", default="share-input")
    parser.add_argument("--group", default="share-workers")
    return parser


def broker(stack: contextlib.ExitStack, bootstrap: str | None) -> str:
    """`bootstrap`, or the address of a broker started for this run."""
    if bootstrap:
        return bootstrap
    from exactly.testing import EmbeddedBroker

    started = stack.enter_context(EmbeddedBroker(settings={"log.flush.policy": "os"}))
    print(f"started a broker on {started.bootstrap} (data in {started.data_dir})")
    return started.bootstrap


def consumer_with_input(stack: contextlib.ExitStack, bootstrap: str, topic: str, group: str,
                        count: int) -> ShareConsumer:
    """A share consumer of `group` on `topic`, then `count` records written to it. The group
    starts at the end of the topic (share.auto.offset.reset=latest, Kafka's default), so the
    consumer polls once first: its share-partition starts there, before the input."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    stack.callback(consumer.close)
    consumer.subscribe([topic])
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        producer.send(topic, value=b"", partition=0)  # makes the topic; consumed as a no-op
        producer.flush()
        deadline = time.monotonic() + 30
        fetched = False  # a poll with the partition assigned: the share-partition starts
        while not fetched and time.monotonic() < deadline:
            fetched = bool(consumer.assignment())
            for r in consumer.poll(200):
                consumer.acknowledge(r)
        for i in range(count):
            producer.send(topic, value=f"item-{i}".encode(), partition=0)
        producer.flush()
    return consumer


def poll_some(consumer: ShareConsumer, timeout_s: float = 10) -> list[ShareRecord]:
    """The next records with a value (the empty first record is accepted and skipped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = consumer.poll(500)
        for r in records:
            if not r.value:
                consumer.acknowledge(r)
        records = [r for r in records if r.value]
        if records:
            return records
    return []


def offsets_of(records: list[ShareRecord]) -> dict[tuple[str, int], list[int]]:
    """The records' offsets per (topic, partition): what acknowledge_transactionally takes."""
    offsets: dict[tuple[str, int], list[int]] = {}
    for r in records:
        offsets.setdefault((r.topic, r.partition), []).append(r.offset)
    return offsets


def verdict(consumer: ShareConsumer, done: int, written: int, what: str) -> int:
    """0 if the `done` input records gave `written` results (`what`) and none comes again;
    else 1, with the mismatch on stderr."""
    left = poll_some(consumer, timeout_s=1)
    print(f"done: {done} input records, {written} {what}, {len(left)} delivered again")
    if written != done or left:
        print(f"MISMATCH: each input record should give exactly one of the {what} and be "
              "acknowledged once", file=sys.stderr)
        return 1
    return 0


def batches(consumer: ShareConsumer, count: int) -> Iterator[list[ShareRecord]]:
    """The input, a poll's records at a time, until `count` records came (SystemExit if it
    stops before)."""
    seen = 0
    while seen < count:
        records = poll_some(consumer)
        if not records:
            raise SystemExit(f"no more input after {seen} records")
        seen += len(records)
        yield records
