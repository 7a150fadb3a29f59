"""Exactly's Producer over TCP against Exactly's broker, read back by confluent-kafka and
kafka-python consumers: every codec, headers, timestamps, null keys and values, Java-compatible
key placement, idempotent retries across a broker restart without duplicates, acks 0/1, errors."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import threading
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTP

from exactly.client.errors import IllegalStateError, KafkaError
from exactly.client.producer import AsyncProducer, Producer, RecordMetadata
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.support import CODECS, create_topic

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


# -- readers (also used by the other test_producer_* modules) --------------------------------


def read_confluent(bootstrap: str, topic: str, partitions: int, count: int, *,
                   isolation: str = "read_uncommitted", idle: float = 0.0,
                   timeout: float = 60) -> list[Row]:
    """(partition, offset, key, value, headers, timestamp) of `count` records, read from the
    beginning of every partition with an assigned confluent-kafka consumer; with `idle`, keep
    reading until nothing came for that long (to see that nothing more is there)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": False})
    consumer.assign([ConfluentTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    rows: list[Row] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if len(rows) >= count and time.monotonic() - last >= idle:
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            rows.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                         [(k, v) for k, v in (msg.headers() or [])], msg.timestamp()[1]))
            last = time.monotonic()
    finally:
        consumer.close()
    return sorted(rows, key=lambda r: (r[0], r[1]))


def read_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> list[Row]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=15_000)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    rows: list[Row] = []
    for msg in consumer:
        rows.append((msg.partition, msg.offset, msg.key, msg.value,
                     [(k, v) for k, v in msg.headers], msg.timestamp))
        if len(rows) == count:
            break
    consumer.close()
    return sorted(rows, key=lambda r: (r[0], r[1]))


def sample_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    base = int(time.time() * 1000) - 60_000
    out = []
    for i in range(n):
        out.append({
            "key": None if i % 7 == 0 else f"key-{rng.randrange(50)}".encode(),
            "value": None if i % 13 == 0 else f"value-{i}-".encode() + rng.randbytes(
                rng.choice([0, 10, 200])),
            "headers": [("trace", f"t{i}".encode()), ("none", None)] if i % 4 == 0 else None,
            "timestamp": base + i * 3 if i % 2 == 0 else None,
        })
    return out


def expected_rows(records: list[dict[str, Any]], placed: list[RecordMetadata]) -> list[Row]:
    rows = [(md.partition, md.offset, r["key"], r["value"], list(r["headers"] or []),
             md.timestamp) for r, md in zip(records, placed, strict=True)]
    return sorted(rows, key=lambda r: (r[0], r[1]))


async def produce_all(config: dict[str, Any], topic: str, records: list[dict[str, Any]]
                      ) -> list[RecordMetadata]:
    async with AsyncProducer(config) as producer:
        futures = [await producer.send(topic, **r) for r in records]
        await producer.flush()
        return [await f for f in futures]


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_read_by_confluent_and_kafka_python(exactly_broker, codec):
    bootstrap = exactly_broker.bootstrap
    topic = f"rt-{codec}"
    create_topic(bootstrap, topic, partitions=3)
    records = sample_records(600, seed=len(codec))
    placed = asyncio.run(produce_all({"bootstrap.servers": bootstrap, "compression.type": codec,
                                      "batch.size": 4096}, topic, records))
    for r, md in zip(records, placed, strict=True):
        if r["timestamp"] is not None:
            assert md.timestamp == r["timestamp"]
    assert len({(md.partition, md.offset) for md in placed}) == len(records)
    expected = expected_rows(records, placed)
    assert read_confluent(bootstrap, topic, 3, len(records)) == expected
    assert read_kafka_python(bootstrap, topic, 3, len(records)) == expected


def test_blocking_producer_from_several_threads(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "blocking-threads"
    create_topic(bootstrap, topic, partitions=4)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 2}) as producer:
        assert producer.partitions_for(topic) == [0, 1, 2, 3]
        futures: dict[bytes, Any] = {}

        def work(t: int) -> None:
            for i in range(2000):
                value = f"{t}-{i}".encode()
                futures[value] = producer.send(topic, value, key=f"k{i % 9}".encode())

        threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        producer.flush()
        assert all(f.done() for f in futures.values())
        placed = {v: f.result(0) for v, f in futures.items()}
    rows = read_confluent(bootstrap, topic, 4, len(placed))
    assert {r[3]: (r[0], r[1]) for r in rows} == {
        v: (md.partition, md.offset) for v, md in placed.items()}
    # one thread's records with one key keep their order
    for t in range(3):
        mine = [r for r in rows if r[3].startswith(f"{t}-".encode()) and r[2] == b"k0"]
        assert [int(r[3].split(b"-")[1]) for r in mine] == sorted(
            int(r[3].split(b"-")[1]) for r in mine)


def test_keys_land_where_confluent_murmur2_random_puts_them(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "murmur2"
    create_topic(bootstrap, topic, partitions=7)
    rng = random.Random(11)
    keys = [rng.randbytes(rng.randrange(1, 40)) for _ in range(300)] + [b"a", b"user-1", b"x" * 7]
    theirs: dict[bytes, int] = {}
    confluent = ConfluentProducer({"bootstrap.servers": bootstrap,
                                   "partitioner": "murmur2_random"})
    for key in keys:
        confluent.produce(topic, b"c", key=key,
                          on_delivery=lambda err, msg: theirs.__setitem__(msg.key(),
                                                                           msg.partition()))
    assert confluent.flush(30) == 0
    placed = asyncio.run(produce_all({"bootstrap.servers": bootstrap}, topic,
                                     [{"key": k, "value": b"e"} for k in keys]))
    ours = {k: md.partition for k, md in zip(keys, placed, strict=True)}
    assert ours == theirs
    assert len(set(ours.values())) == 7


def test_keyless_records_stick_to_a_partition_per_batch_and_spread(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "sticky"
    create_topic(bootstrap, topic, partitions=4)
    placed = asyncio.run(produce_all({"bootstrap.servers": bootstrap, "batch.size": 2000},
                                     topic, [{"value": b"v" * 100} for _ in range(2000)]))
    switches = sum(1 for a, b in itertools.pairwise(placed) if a.partition != b.partition)
    assert len({md.partition for md in placed}) == 4
    assert switches <= 2000 // 15  # whole batches (about 18 records) go to one partition


# -- idempotence and retries ------------------------------------------------------------------


def test_idempotent_retries_across_a_broker_restart_write_each_record_once():
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        topic = "restart"
        create_topic(broker.bootstrap, topic, partitions=2)
        with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1,
                       "batch.size": 2048, "retry.backoff.ms": 50,
                       "request.timeout.ms": 5000}) as producer:
            futures = []
            for i in range(6000):
                futures.append(producer.send(topic, f"{i}".encode(), key=f"{i % 10}".encode()))
                if i == 2500:
                    broker.kill()  # with requests on the wire: they must be resent
                if i == 3500:
                    broker.start()
                if i % 100 == 0:
                    time.sleep(0.005)
            producer.flush()
            placed = [f.result(0) for f in futures]
            assert producer.aio._sender.producer_id >= 0
        rows = read_confluent(broker.bootstrap, topic, 2, 6000, idle=1.0)
    values = [r[3] for r in rows]
    assert len(values) == len(set(values)) == 6000  # every record once, no duplicates
    assert {r[3]: (r[0], r[1]) for r in rows} == {
        f"{i}".encode(): (md.partition, md.offset) for i, md in enumerate(placed)}
    for key in range(10):  # each key's records in the order they were sent
        mine = [int(r[3]) for r in rows if r[2] == f"{key}".encode()]
        assert mine == sorted(mine)


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_zero_and_one(exactly_broker, acks):
    bootstrap = exactly_broker.bootstrap
    topic = f"acks-{acks}"
    create_topic(bootstrap, topic, partitions=2)
    records = [{"value": f"a{i}".encode(), "key": f"{i % 3}".encode()} for i in range(500)]
    placed = asyncio.run(produce_all({"bootstrap.servers": bootstrap, "acks": acks}, topic,
                                     records))
    rows = read_confluent(bootstrap, topic, 2, 500)
    assert sorted(r[3] for r in rows) == sorted(r["value"] for r in records)
    if acks == 0:
        assert all(md.offset == -1 for md in placed)
    else:
        assert {(md.partition, md.offset) for md in placed} == {(r[0], r[1]) for r in rows}


# -- errors -----------------------------------------------------------------------------------


def test_unknown_topic_without_auto_create_is_a_clear_error():
    async def scenario(bootstrap: str) -> None:
        async with AsyncProducer({"bootstrap.servers": bootstrap}) as producer:
            with pytest.raises(KafkaError, match="does not exist.*create it first") as info:
                await producer.send("no-such-topic", b"v")
            assert info.value.code == ErrorCode.unknown_topic_or_partition
            with pytest.raises(KafkaError, match="does not exist"):
                await producer.partitions_for("no-such-topic")

    with EmbeddedBroker(settings={"log.flush.policy": "os",
                                  "auto.create.topics.enable": "false"}) as broker:
        asyncio.run(scenario(broker.bootstrap))


def test_records_too_large_fail_clearly_and_the_partition_goes_on(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "too-large"
    create_topic(bootstrap, topic, partitions=1, config={"max.message.bytes": "3000"})

    async def scenario() -> None:
        async with AsyncProducer({"bootstrap.servers": bootstrap, "max.request.size": 100_000,
                                  "linger.ms": 20, "batch.size": 2500}) as producer:
            with pytest.raises(KafkaError, match="max.request.size") as info:
                await producer.send(topic, os.urandom(200_000))
            assert info.value.code == ErrorCode.message_too_large
            with pytest.raises(KafkaError, match="partition 3 of 'too-large' does not exist"):
                await producer.send(topic, b"v", partition=3)
            # The broker refuses the big batch (max.message.bytes=3000) between good ones: it
            # gives its sequence numbers back and the batches behind it are written.
            futures = [await producer.send(topic, b"a" * 100) for _ in range(20)]
            big = await producer.send(topic, os.urandom(10_000))
            futures += [await producer.send(topic, b"b" * 100) for _ in range(20)]
            await producer.flush()
            with pytest.raises(KafkaError, match="MESSAGE_TOO_LARGE") as info:
                await big
            assert info.value.code == ErrorCode.message_too_large
            offsets = [(await f).offset for f in futures]
            assert offsets == list(range(40))
            more = await producer.send(topic, b"after")
            assert (await more).offset == 40

    asyncio.run(scenario())
    assert [r[3][:1] for r in read_confluent(bootstrap, topic, 1, 41)] == [b"a"] * 20 + [
        b"b"] * 20 + [b"a"]


def test_closed_producer_refuses_and_transaction_calls_need_a_session(exactly_broker):
    async def scenario() -> None:
        producer = AsyncProducer({"bootstrap.servers": exactly_broker.bootstrap})
        with pytest.raises(IllegalStateError, match="transactional.id"):
            await producer.begin_transaction()
        assert producer.transaction_session is None
        md = await (await producer.send("closing", b"v"))
        assert md.offset >= 0
        await producer.close()
        with pytest.raises(IllegalStateError, match="closed"):
            await producer.send("closing", b"v")
    asyncio.run(scenario())


def test_delivery_timeout_fails_records_that_cannot_be_sent():
    broker = EmbeddedBroker(settings={"log.flush.policy": "os"}).start()
    try:
        create_topic(broker.bootstrap, "timeout", partitions=1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "delivery.timeout.ms": 1500,
                             "request.timeout.ms": 1000, "retry.backoff.ms": 50})
        producer.send("timeout", b"first").result(10)
        broker.kill()
        future = producer.send("timeout", b"lost")
        with pytest.raises(KafkaError, match="delivery.timeout.ms"):
            future.result(20)
        producer.close()
    finally:
        broker.close()


def test_a_batch_whose_answer_was_lost_is_resent_and_written_once(exactly_broker, monkeypatch):
    """The broker wrote a batch but its answer never came (a request timeout): the resend
    carries the same sequence, the broker recognises it, and each record is in the log once."""
    from exactly.client.connection import BrokerConnection
    from exactly.client.errors import KafkaTimeoutError

    original = BrokerConnection.answer
    dropped: list[int] = []

    async def answer(self: BrokerConnection, sent: Any) -> Any:
        # The producer writes a Produce (BrokerConnection.write) and then awaits its answer.
        if sent is None or sent.api_key != 0 or dropped:
            return await original(self, sent)
        self._waiting.pop(sent.correlation_id)  # the request is on the wire; its answer is dropped
        dropped.append(sent.correlation_id)
        await asyncio.sleep(0.3)  # the broker appends it meanwhile
        raise KafkaTimeoutError("simulated: the answer to this Produce was lost")

    monkeypatch.setattr(BrokerConnection, "answer", answer)
    bootstrap = exactly_broker.bootstrap
    topic = "lost-answer"
    create_topic(bootstrap, topic, partitions=1)
    records = [{"value": f"{i}".encode()} for i in range(300)]
    placed = asyncio.run(produce_all({"bootstrap.servers": bootstrap, "linger.ms": 50,
                                      "retry.backoff.ms": 10}, topic, records))
    assert dropped
    rows = read_confluent(bootstrap, topic, 1, 300, idle=1.0)
    assert [r[3] for r in rows] == [r["value"] for r in records]
    assert [md.offset for md in placed] == [r[1] for r in rows] == list(range(300))


def test_lost_sequence_state_fails_the_batch_and_takes_a_new_producer_id(exactly_broker):
    """An out-of-order answer while no batch ahead is outstanding means the sequence state of
    broker and producer disagree: that batch fails clearly and the idempotent producer goes on
    under a new producer id, its sequences from 0."""
    bootstrap = exactly_broker.bootstrap
    topic = "sequence-lost"
    create_topic(bootstrap, topic, partitions=1)

    async def scenario() -> None:
        async with AsyncProducer({"bootstrap.servers": bootstrap}) as producer:
            assert (await (await producer.send(topic, b"one"))).offset == 0
            sender = producer._sender
            first_id = sender.producer_id
            producer._acc.state(topic, 0).next_sequence += 10  # a gap the broker will refuse
            lost = await producer.send(topic, b"lost")
            with pytest.raises(KafkaError, match="OUT_OF_ORDER_SEQUENCE_NUMBER") as info:
                await lost
            assert info.value.code == ErrorCode.out_of_order_sequence_number
            after = await producer.send(topic, b"two")
            assert (await after).offset == 1
            assert sender.producer_id != first_id
            assert producer._acc.state(topic, 0).acked_next == 1

    asyncio.run(scenario())
    assert [r[3] for r in read_confluent(bootstrap, topic, 1, 2, idle=0.5)] == [b"one", b"two"]
