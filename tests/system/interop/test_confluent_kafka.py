"""confluent-kafka (librdkafka) produces idempotently and consumes, with every codec."""

import pytest

from exactly.testing import EmbeddedBroker
from tests.support import CODECS, consume_confluent, create_topic, produce_confluent


@pytest.fixture(scope="module")
def shared_broker():
    with EmbeddedBroker() as broker:
        yield broker


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_round_trip(shared_broker, codec):
    topic = f"confluent-{codec}"
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    values = [f"value-{i}".encode() * 3 for i in range(2000)]
    keys = [f"key-{i % 17}".encode() for i in range(2000)]
    placed = produce_confluent(shared_broker.bootstrap, topic, values, keys=keys, compression=codec)

    msgs = consume_confluent(shared_broker.bootstrap, topic, len(values))
    by_value = {m.value(): (m.partition(), m.offset(), m.key()) for m in msgs}
    assert len(by_value) == len(values), "a record was read twice"
    for i, value in enumerate(values):
        partition, offset, key = by_value[value]
        assert (partition, offset) == placed[i]
        assert key == keys[i]
    # Per key, records come back in the order they were produced.
    for key in set(keys):
        offsets = [by_value[v][1] for v, k in zip(values, keys) if k == key]
        assert offsets == sorted(offsets)


def test_headers_and_timestamps(shared_broker):
    from confluent_kafka import Producer

    topic = "confluent-headers"
    create_topic(shared_broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "enable.idempotence": True})
    p.produce(topic, value=b"v", key=b"k", headers=[("h1", b"x"), ("h2", None)], timestamp=1_700_000_000_123)
    assert p.flush(30) == 0
    (msg,) = consume_confluent(shared_broker.bootstrap, topic, 1)
    assert msg.headers() == [("h1", b"x"), ("h2", None)]
    assert msg.timestamp()[1] == 1_700_000_000_123
