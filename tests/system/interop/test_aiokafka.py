"""aiokafka produces idempotently and consumes, with every codec."""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from exactly.testing import EmbeddedBroker
from tests.support import CODECS, create_topic


@pytest.fixture(scope="module")
def shared_broker():
    with EmbeddedBroker() as broker:
        yield broker


async def _round_trip(bootstrap: str, topic: str, codec: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                                compression_type=None if codec == "none" else codec, linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=f"k{i % 3}".encode(), value=f"aio-{i}".encode())
                   for i in range(n)]
        placed = [await f for f in futures]
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    got = {}
    try:
        async with asyncio.timeout(30):
            async for msg in consumer:
                got[msg.value] = (msg.partition, msg.offset)
                if len(got) == n:
                    break
    finally:
        await consumer.stop()
    assert len(got) == n
    for i, meta in enumerate(placed):
        assert got[f"aio-{i}".encode()] == (meta.partition, meta.offset)


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_round_trip(shared_broker, codec):
    topic = f"aiokafka-{codec}"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    asyncio.run(_round_trip(shared_broker.bootstrap, topic, codec, 1000))
