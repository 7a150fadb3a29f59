"""A partition's batches reach the broker in the order of their sequence numbers, whichever
coroutine sends them: the sender task's requests and a flush's own (issue 19's fast path).

A broker accepts any sequence as the first batch of a producer it has not seen on a partition
(Kafka's rule, kept by Exactly), so a later batch that overtakes the first on the wire is
written, and the first then fails with OUT_OF_ORDER_SEQUENCE_NUMBER: its records are lost to the
caller although nothing went wrong. A CI run met this (the first batch of a partition numbered
and handed to a task by the sender, then a flush in the same loop turn writing the second batch
before that task ran)."""

from __future__ import annotations

import asyncio

from exactly.client.producer import AsyncProducer
from tests.integration.client.test_producer import read_confluent
from tests.support import create_topic


def test_a_flush_right_after_the_sender_numbered_a_batch_keeps_the_wire_order(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "wire-order"
    create_topic(bootstrap, topic, partitions=2)

    async def run() -> list[int]:
        config = {"bootstrap.servers": bootstrap, "batch.size": 1000, "linger.ms": 60_000}
        async with AsyncProducer(config) as producer:
            # The producer id is known and the connection open: partition 1 has had a batch.
            await producer.send(topic, b"warm-up", partition=1)
            await producer.flush()
            # Partition 0's first batch lingers (linger.ms is long)...
            first = await producer.send(topic, b"a" * 600, partition=0)
            # ...until a record that does not fit closes it: the sender task numbers it (sequence
            # 0) in the loop turn this send() yields, and the record starts the second batch.
            second = await producer.send(topic, b"b" * 600, partition=0)
            # The flush sends the second batch (sequence 1) at once, in this very turn.
            await producer.flush()
            return [(await first).offset, (await second).offset]

    offsets = asyncio.run(run())
    assert offsets == [0, 1]
    rows = read_confluent(bootstrap, topic, 2, 3)
    assert [(r[0], r[1], r[3]) for r in rows] == [
        (0, 0, b"a" * 600), (0, 1, b"b" * 600), (1, 0, b"warm-up")]
