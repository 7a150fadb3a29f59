"""Wire compatibility with a second, independent implementation of the protocol: librdkafka's
mock cluster. Exactly's Producer writes (every codec, idempotent, acks 0/1/all, a transaction)
and confluent-kafka reads back; keys land where confluent-kafka puts them on the same cluster.
Transaction semantics are checked against Exactly's broker (test_producer_txn.py), not here."""

from __future__ import annotations

import asyncio
import random

import pytest
from confluent_kafka import Producer as ConfluentProducer

from exactly.client.producer import AsyncProducer, Producer
from tests.integration.client.test_producer import (
    expected_rows,
    produce_all,
    read_confluent,
    sample_records,
)
from tests.support import CODECS

PARTITIONS = 4  # the mock auto-creates topics (it does not implement CreateTopics)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_on_the_mock(mock_bootstrap, codec):
    topic = f"mock-rt-{codec}"
    records = sample_records(400, seed=3)
    placed = asyncio.run(produce_all({"bootstrap.servers": mock_bootstrap,
                                      "compression.type": codec, "batch.size": 4096},
                                     topic, records))
    # The mock answers every Produce with a made-up LogAppendTime (1234), which RecordMetadata
    # reports as Kafka's clients do; the records themselves carry their create time.
    rows = read_confluent(mock_bootstrap, topic, PARTITIONS, len(records))
    assert [r[:5] for r in rows] == [r[:5] for r in expected_rows(records, placed)]
    at = {(r[0], r[1]): r[5] for r in rows}
    for record, md in zip(records, placed, strict=True):
        if record["timestamp"] is not None:
            assert at[(md.partition, md.offset)] == record["timestamp"]


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_on_the_mock(mock_bootstrap, acks):
    topic = f"mock-acks-{acks}"
    records = [{"value": f"m{i}".encode()} for i in range(300)]
    asyncio.run(produce_all({"bootstrap.servers": mock_bootstrap, "acks": acks}, topic, records))
    rows = read_confluent(mock_bootstrap, topic, PARTITIONS, 300)
    assert sorted(r[3] for r in rows) == sorted(r["value"] for r in records)


def test_keys_land_where_confluent_puts_them_on_the_mock(mock_bootstrap):
    topic = "mock-murmur2"
    rng = random.Random(2)
    keys = [rng.randbytes(rng.randrange(1, 30)) for _ in range(200)]
    theirs: dict[bytes, int] = {}
    confluent = ConfluentProducer({"bootstrap.servers": mock_bootstrap,
                                   "partitioner": "murmur2_random"})
    for key in keys:
        confluent.produce(topic, b"c", key=key,
                          on_delivery=lambda err, msg: theirs.__setitem__(msg.key(),
                                                                           msg.partition()))
    assert confluent.flush(30) == 0
    placed = asyncio.run(produce_all({"bootstrap.servers": mock_bootstrap}, topic,
                                     [{"key": k, "value": b"e"} for k in keys]))
    assert {k: md.partition for k, md in zip(keys, placed, strict=True)} == theirs


def test_blocking_producer_on_the_mock(mock_bootstrap):
    topic = "mock-blocking"
    with Producer({"bootstrap.servers": mock_bootstrap, "compression.type": "zstd"}) as producer:
        futures = [producer.send(topic, f"b{i}".encode(), key=b"k", headers={"h": "v"})
                   for i in range(500)]
        producer.flush()
        offsets = [f.result(0).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 500
    rows = read_confluent(mock_bootstrap, topic, PARTITIONS, 500)
    assert [r[3] for r in rows] == [f"b{i}".encode() for i in range(500)]
    assert all(r[4] == [("h", b"v")] for r in rows)


def test_transactional_producer_speaks_the_wire_protocol_with_the_mock(mock_bootstrap):
    """Wire compatibility only (InitProducerId, AddPartitionsToTxn or Produce v12, EndTxn): the
    mock was seen to show open and aborted transactions to read_committed consumers."""
    topic = "mock-txn"

    async def scenario() -> None:
        async with AsyncProducer({"bootstrap.servers": mock_bootstrap,
                                  "transactional.id": "mock-txn-1"}) as producer:
            await producer.init_transactions()
            for round_ in range(3):
                await producer.begin_transaction()
                futures = [await producer.send(topic, f"t{round_}-{i}".encode(),
                                               key=f"{i}".encode()) for i in range(50)]
                await producer.commit_transaction()
                assert all([(await f).offset >= 0 for f in futures])

    asyncio.run(scenario())
    rows = read_confluent(mock_bootstrap, topic, PARTITIONS, 150, isolation="read_committed")
    assert sorted(r[3] for r in rows) == sorted(f"t{r}-{i}".encode() for r in range(3)
                                                for i in range(50))
