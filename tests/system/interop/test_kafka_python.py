"""kafka-python 3.x produces idempotently and consumes, with every codec, against the broker's
own ApiVersions answer (no api_version pinning)."""

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from exactly.testing import EmbeddedBroker
from tests.support import CODECS, create_topic


@pytest.fixture(scope="module")
def shared_broker():
    with EmbeddedBroker() as broker:
        yield broker


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_round_trip(shared_broker, codec):
    topic = f"kafka-python-{codec}"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=True,
                             acks="all", compression_type=None if codec == "none" else codec,
                             linger_ms=5)
    futures = [producer.send(topic, key=f"k{i % 5}".encode(), value=f"kp-{i}".encode())
               for i in range(1000)]
    producer.flush(30)
    placed = [f.get(timeout=30) for f in futures]
    producer.close()
    assert len({(m.partition, m.offset) for m in placed}) == 1000

    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, p) for p in range(2)])
    consumer.seek_to_beginning()
    got = {}
    for msg in consumer:
        got[msg.value] = (msg.partition, msg.offset, msg.key)
        if len(got) == 1000:
            break
    consumer.close()
    assert len(got) == 1000
    for i, meta in enumerate(placed):
        assert got[f"kp-{i}".encode()] == (meta.partition, meta.offset, f"k{i % 5}".encode())
