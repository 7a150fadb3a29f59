"""KIP-1289 on the client: TransactionSession.add_share_acks_to_transaction and
ShareConsumer.acknowledge_transactionally, over TCP.

Against Exactly's broker (which offers TxnShareAcknowledge): acknowledgements staged in a
transaction are applied by its commit and released (delivered again, delivery count 2) by its
abort, together with the transaction's output; the consumer's own commit leaves them alone.
Against a broker without KIP-1289 (librdkafka's mock cluster): a clear UnsupportedVersionError
before anything is sent, the transaction unchanged. And the state checks."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from confluent_kafka import Producer as MockProducer
from examples.share_read_process_write import read_committed

from exactly.client import (
    IllegalStateError,
    Producer,
    ShareAcknowledgements,
    ShareConsumer,
    ShareGroupMetadata,
    ShareRecord,
    State,
    TransactionSession,
    UnsupportedVersionError,
)
from exactly.client.share_consumer import AcknowledgeType
from exactly.protocol.structs import TopicPartition
from exactly.testing import EmbeddedBroker
from tests.integration.client.test_share_consumer import _consumer, _poll_until, _queue, broker

__all__ = ["broker"]  # the module's broker fixture, shared with test_share_consumer


def _session(bootstrap: str, txn_id: str) -> TransactionSession:
    session = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    session.initialize()
    return session


def _records(b: EmbeddedBroker, topic: str, group: str, count: int
             ) -> tuple[ShareConsumer, list[ShareRecord]]:
    """A share consumer holding `count` records of a new topic (implicit mode)."""
    _queue(b, topic, group, count)
    consumer = _consumer(b, group, topic)
    return consumer, _poll_until(consumer, count)


def _offsets(records: list[ShareRecord]) -> dict[tuple[str, int], list[int]]:
    return {(records[0].topic, 0): [r.offset for r in records]}


def test_commit_applies_the_acknowledgements_with_the_output(broker: EmbeddedBroker) -> None:
    consumer, records = _records(broker, "tx-in1", "tx-g1", 4)
    session = _session(broker.bootstrap, "tx-share-1")
    producer = Producer({"bootstrap.servers": broker.bootstrap}, session=session)
    try:
        session.begin_transaction()
        for r in records:
            producer.send("tx-out1", value=(r.value or b"").upper(), partition=0)
        consumer.acknowledge_transactionally(session, _offsets(records))
        assert session.share_acknowledgements == {
            "tx-g1": {TopicPartition("tx-in1", 0): {r.offset for r in records}}}
        session.commit_transaction()
        assert session.share_acknowledgements == {}
        assert consumer.commit_sync() == {}  # the consumer had nothing left to acknowledge
        assert consumer.poll(500) == []  # accepted: never delivered again
        assert sorted(read_committed(broker.bootstrap, "tx-out1")) == [b"0", b"1", b"2", b"3"]
    finally:
        producer.close()
        consumer.close()
        session.close()


def test_abort_releases_the_records_for_redelivery(broker: EmbeddedBroker) -> None:
    consumer, records = _records(broker, "tx-in2", "tx-g2", 3)
    session = _session(broker.bootstrap, "tx-share-2")
    try:
        session.begin_transaction()
        consumer.acknowledge_transactionally(session, _offsets(records[:2]))
        session.abort_transaction()
        # the consumer accepts only what it still held (the third record); the first two come
        # back from the abort, delivered a second time
        assert consumer.commit_sync() == {("tx-in2", 0): None}
        again = sorted(_poll_until(consumer, 2), key=lambda r: r.offset)
        assert [(r.offset, r.delivery_count) for r in again] == [
            (records[0].offset, 2), (records[1].offset, 2)]
    finally:
        consumer.close()
        session.close()


def test_refused_clearly_by_a_broker_without_kip_1289(mock_bootstrap: str) -> None:
    holder = MockProducer({"bootstrap.servers": mock_bootstrap})  # makes the topic on the mock
    holder.produce("tx-mock", b"x", partition=0)
    assert holder.flush(10) == 0
    session = _session(mock_bootstrap, "tx-share-mock")
    acks = ShareAcknowledgements(ShareGroupMetadata("g", "member", 1),
                                 {TopicPartition("tx-mock", 0): {0: AcknowledgeType.ACCEPT}})
    try:
        session.begin_transaction()
        with pytest.raises(UnsupportedVersionError, match="KIP-1289"):
            session.add_share_acks_to_transaction("g", acks)
        # nothing was sent: the transaction is open, holds nothing, and commits
        assert session.state is State.IN_TRANSACTION
        assert session.share_acknowledgements == {}
        session.commit_transaction()
    finally:
        session.close()


def test_session_accepts_share_acks_only_in_a_transaction(broker: EmbeddedBroker) -> None:
    session = _session(broker.bootstrap, "tx-share-3")
    acks = ShareAcknowledgements(ShareGroupMetadata("tx-g3", "member", 1),
                                 {TopicPartition("tx-in3", 0): {0: AcknowledgeType.ACCEPT}})
    try:
        with pytest.raises(IllegalStateError, match="add_share_acks_to_transaction"):
            session.add_share_acks_to_transaction("tx-g3", acks)  # READY: no transaction
        session.begin_transaction()
        with pytest.raises(ValueError, match="not 'other'"):
            session.add_share_acks_to_transaction("other", acks)
        session.commit_transaction()
    finally:
        session.close()
    with pytest.raises(IllegalStateError, match="closed"):
        session.add_share_acks_to_transaction("tx-g3", acks)


def test_consumer_refuses_records_it_does_not_hold(broker: EmbeddedBroker) -> None:
    consumer, _ = _records(broker, "tx-in4", "tx-g4", 2)
    session = _session(broker.bootstrap, "tx-share-4")
    try:
        session.begin_transaction()
        with pytest.raises(IllegalStateError, match="offset 99"):
            consumer.acknowledge_transactionally(session, {("tx-in4", 0): [99]})
        with pytest.raises(ValueError, match="ACCEPT and REJECT"):
            consumer.acknowledge_transactionally(session, {("tx-in4", 0): [0]},
                                                 AcknowledgeType.RELEASE)
        assert session.share_acknowledgements == {}
        session.abort_transaction()
    finally:
        consumer.close()
        session.close()


@pytest.mark.parametrize("example", ["share_read_process_write", "share_to_database"])
def test_examples_process_every_record_once(broker: EmbeddedBroker, example: str,
                                            tmp_path: Any) -> None:
    """Seed 004's use cases 4.2 and 4.6 as the examples run them: they check themselves (every
    input record's output or row exactly once, nothing delivered again) and exit 0."""
    module = importlib.import_module(f"examples.{example}")
    argv = ["--bootstrap", broker.bootstrap, "--records", "8", "--input", f"ex-{example}",
            "--group", f"ex-{example}"]
    if example == "share_to_database":
        argv += ["--db", str(tmp_path / "sink.db")]
    assert module.main(argv) == 0
