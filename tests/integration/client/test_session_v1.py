"""TransactionSession with the version-1 transaction protocol (explicit AddPartitionsToTxn and
AddOffsetsToTxn, no epoch bump): against Exactly's broker with transaction.version 0, where the
semantics are checked, and against librdkafka's mock cluster for wire compatibility only (it
neither filters read_committed nor fences zombies, so only the calls' success is checked there)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from exactly.client.errors import ProducerFencedError
from exactly.client.session import ConsumerGroupMetadata, State, TransactionSession
from exactly.testing import EmbeddedBroker
from tests.integration.client.test_session import (
    commit_sentinel,
    config,
    describe,
    read_committed,
    write,
)
from tests.support import create_topic

TOPIC = "v1"


@pytest.fixture(scope="module")
def v1_bootstrap():
    with EmbeddedBroker(settings={"log.flush.policy": "os", "transaction.version": "0",
                                  "group.initial.rebalance.delay.ms": "0"}) as b:
        create_topic(b.bootstrap, TOPIC, partitions=3)
        yield b.bootstrap


def _partitions(bootstrap: str, txn_id: str) -> set[tuple[str, int]]:
    return {(t.topic, p) for t in describe(bootstrap, txn_id).topics for p in t.partitions}


def test_version_1_adds_partitions_explicitly_and_keeps_the_epoch(v1_bootstrap):
    s = TransactionSession(config(v1_bootstrap, "v1-life"))
    s.initialize()
    assert not s.uses_transaction_v2
    pid, epoch = s.producer_id, s.producer_epoch
    s.begin_transaction()
    s.add_partitions_to_transaction([(TOPIC, 0), (TOPIC, 1)])
    found = describe(v1_bootstrap, "v1-life")
    assert found.transaction_state == "Ongoing"  # before any write: AddPartitionsToTxn did it
    assert _partitions(v1_bootstrap, "v1-life") == {(TOPIC, 0), (TOPIC, 1)}
    s.add_partitions_to_transaction([(TOPIC, 1), (TOPIC, 2)])  # only partition 2 is new
    assert _partitions(v1_bootstrap, "v1-life") == {(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)}
    write(v1_bootstrap, s, TOPIC, 0, ["v1-a", "v1-b"])
    s.commit_transaction()
    assert (s.producer_id, s.producer_epoch, s.state) == (pid, epoch, State.READY)
    assert describe(v1_bootstrap, "v1-life").transaction_state == "CompleteCommit"
    # The next transaction: the same epoch, sequences go on.
    s.begin_transaction()
    s.add_partitions_to_transaction([(TOPIC, 0)])
    write(v1_bootstrap, s, TOPIC, 0, ["v1-aborted"], seq=2)
    s.abort_transaction()
    assert (s.producer_id, s.producer_epoch) == (pid, epoch)
    s.close()
    commit_sentinel(v1_bootstrap, TOPIC, "v1-sentinel-writer")
    assert read_committed(v1_bootstrap, TOPIC, "sentinel") == ["v1-a", "v1-b", "sentinel"]


def test_version_1_resume_and_fencing(v1_bootstrap):
    a = TransactionSession(config(v1_bootstrap, "v1-resume"))
    a.initialize()
    a.begin_transaction()
    a.add_partitions_to_transaction([(TOPIC, 1)])
    write(v1_bootstrap, a, TOPIC, 1, ["v1-resumed"])
    b = TransactionSession.resume("v1-resume", a.producer_id, a.producer_epoch,
                                  {"bootstrap.servers": v1_bootstrap})
    b.commit_transaction()
    b.close()
    newer = TransactionSession(config(v1_bootstrap, "v1-resume"))
    newer.initialize()
    with pytest.raises(ProducerFencedError):  # a never learnt that b ended its transaction
        a.add_partitions_to_transaction([(TOPIC, 2)])
    assert a.state is State.FATAL_ERROR
    a.close()
    newer.close()
    consumer = Consumer({"bootstrap.servers": v1_bootstrap, "group.id": "v1-reader",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(TOPIC, 1, -2)])
    msg = None
    for _ in range(100):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            break
    consumer.close()
    assert msg is not None and msg.value() == b"v1-resumed"


def test_version_1_offsets_go_through_add_offsets_to_txn(v1_bootstrap):
    s = TransactionSession(config(v1_bootstrap, "v1-offsets"))
    s.initialize()
    s.begin_transaction()
    s.send_offsets_to_transaction({(TOPIC, 0): 5, (TOPIC, 2): (9, None)},
                                  ConsumerGroupMetadata("v1-group"))
    assert describe(v1_bootstrap, "v1-offsets").transaction_state == "Ongoing"
    s.commit_transaction()
    s.close()
    c = Consumer({"bootstrap.servers": v1_bootstrap, "group.id": "v1-group",
                  "isolation.level": "read_committed"})
    offsets = c.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 2)], timeout=10)
    c.close()
    assert [tp.offset for tp in offsets] == [5, 9]


# -- librdkafka's mock cluster: wire compatibility ----------------------------------------------

def test_mock_cluster_commit_abort_offsets_resume(mock_bootstrap):
    # The mock has no CreateTopics; a first write creates the topic.
    creator = Producer({"bootstrap.servers": mock_bootstrap})
    creator.produce("mock-session", b"create", partition=0)
    assert creator.flush(10) == 0
    assert len(creator.list_topics("mock-session", timeout=10).topics["mock-session"].partitions) >= 2
    s = TransactionSession(config(mock_bootstrap, "mock-txn"))
    s.initialize()
    assert s.producer_id >= 0
    s.heartbeat()
    s.begin_transaction()
    s.add_partitions_to_transaction([("mock-session", 0), ("mock-session", 1)])
    write(mock_bootstrap, s, "mock-session", 0, ["m1"])
    s.send_offsets_to_transaction({("mock-session", 0): 1}, "mock-group")
    s.commit_transaction()
    assert s.state is State.READY
    s.begin_transaction()
    s.add_partitions_to_transaction([("mock-session", 1)])
    write(mock_bootstrap, s, "mock-session", 1, ["m2"])
    s.abort_transaction()
    s.begin_transaction()
    s.add_partitions_to_transaction([("mock-session", 0)])
    write(mock_bootstrap, s, "mock-session", 0, ["m3"], seq=1)
    state = s.prepare_transaction()
    s.close()
    b = TransactionSession.resume("mock-txn", state.producer_id, state.epoch,
                                  {"bootstrap.servers": mock_bootstrap})
    b.complete_transaction(state)
    assert b.state is State.READY
    b.close()
