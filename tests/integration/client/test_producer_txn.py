"""Transactional writes with Exactly's Producer against Exactly's broker, checked by a
confluent-kafka read_committed consumer: a producer with its own transactional.id (transaction
version 2 and version 1), a producer bound to an external TransactionSession (whose lifecycle
calls it refuses), 2PC prepare/complete, offsets in a transaction, and fencing."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTP

from exactly.client.errors import IllegalStateError, ProducerFencedError, TransactionError
from exactly.client.producer import AsyncProducer, Producer
from exactly.client.session import TransactionSession
from exactly.testing import EmbeddedBroker
from tests.integration.client.test_producer import read_confluent
from tests.support import create_topic


def _committed_values(bootstrap: str, topic: str, partitions: int, count: int) -> list[bytes]:
    rows = read_confluent(bootstrap, topic, partitions, count, isolation="read_committed",
                          idle=1.5)
    return sorted(r[3] for r in rows)


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def _commit_abort_commit(bootstrap: str, topic: str, txn_id: str) -> list[int]:
    epochs = []
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                   "linger.ms": 2}) as producer:
        producer.init_transactions()
        session = producer.transaction_session
        for prefix, n, commit in (("c1", 300, True), ("a", 200, False), ("c2", 100, True)):
            epochs.append(session.producer_epoch)
            producer.begin_transaction()
            futures = [producer.send(topic, v, key=v[-1:]) for v in _values(prefix, n)]
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
            assert all(f.done() and f.exception() is None for f in futures)
    return epochs


def test_own_transactional_id_commit_and_abort(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "txn-own"
    create_topic(bootstrap, topic, partitions=3)
    epochs = _commit_abort_commit(bootstrap, topic, "own-1")
    # transaction version 2: every EndTxn bumps the epoch, and the sequences start again at 0
    assert epochs == [epochs[0], epochs[0] + 1, epochs[0] + 2]
    assert _committed_values(bootstrap, topic, 3, 400) == sorted(_values("c1", 300) +
                                                                 _values("c2", 100))
    all_rows = read_confluent(bootstrap, topic, 3, 600, isolation="read_uncommitted")
    assert len(all_rows) >= 600


def test_own_transactional_id_with_transaction_version_1():
    with EmbeddedBroker(settings={"log.flush.policy": "os", "transaction.version": "1"}) as broker:
        topic = "txn-v1"
        create_topic(broker.bootstrap, topic, partitions=3)
        epochs = _commit_abort_commit(broker.bootstrap, topic, "own-v1")
        assert len(set(epochs)) == 1  # no epoch bump: AddPartitionsToTxn and Produce v11
        assert _committed_values(broker.bootstrap, topic, 3, 400) == sorted(
            _values("c1", 300) + _values("c2", 100))


def test_producer_bound_to_an_external_session(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "txn-external"
    create_topic(bootstrap, topic, partitions=2)
    session = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": "ext-1"})
    producer = Producer({"bootstrap.servers": bootstrap}, session=session)
    try:
        assert producer.transaction_session is session
        for call, args in (("init_transactions", ()), ("begin_transaction", ()),
                           ("commit_transaction", ()), ("abort_transaction", ()),
                           ("prepare_transaction", ()), ("complete_transaction", (None,)),
                           ("send_offsets_to_transaction", ({}, "g"))):
            with pytest.raises(IllegalStateError, match="external TransactionSession"):
                getattr(producer, call)(*args)
        with pytest.raises(IllegalStateError, match="UNINITIALIZED"):
            producer.send(topic, b"too early")
        session.initialize()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            producer.send(topic, b"no transaction")
        session.begin_transaction()
        futures = [producer.send(topic, v) for v in _values("ext", 150)]
        session.commit_transaction()  # flushes the bound producer first
        assert all(f.done() and f.exception() is None for f in futures)
        session.begin_transaction()
        for v in _values("gone", 50):
            producer.send(topic, v)
        session.abort_transaction()
    finally:
        producer.close()
        session.close()
    assert _committed_values(bootstrap, topic, 2, 150) == sorted(_values("ext", 150))


def test_offsets_committed_with_the_transaction(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "txn-offsets"
    create_topic(bootstrap, topic, partitions=1)

    async def scenario() -> None:
        async with AsyncProducer({"bootstrap.servers": bootstrap,
                                  "transactional.id": "offsets-1"}) as producer:
            await producer.init_transactions()
            await producer.begin_transaction()
            await producer.send(topic, b"out")
            await producer.send_offsets_to_transaction({(topic, 0): 42}, "txn-offsets-group")
            await producer.commit_transaction()

    asyncio.run(scenario())
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-offsets-group"})
    try:
        (tp,) = consumer.committed([ConfluentTP(topic, 0)], timeout=20)
        assert tp.offset == 42
    finally:
        consumer.close()


def test_a_newer_producer_with_the_same_transactional_id_fences_the_older(exactly_broker):
    bootstrap = exactly_broker.bootstrap
    topic = "txn-fence"
    create_topic(bootstrap, topic, partitions=1)
    old = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fence-1"})
    new = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fence-1"})
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie-1").result(20)
        new.init_transactions()  # aborts the old transaction and bumps the epoch
        failed = old.send(topic, b"zombie-2")
        old.flush()
        assert isinstance(failed.exception(0), ProducerFencedError | TransactionError)
        with pytest.raises(TransactionError):
            old.commit_transaction()
        new.begin_transaction()
        new.send(topic, b"fresh")
        new.commit_transaction()
    finally:
        old.close()
        new.close()
    assert _committed_values(bootstrap, topic, 1, 1) == [b"fresh"]
