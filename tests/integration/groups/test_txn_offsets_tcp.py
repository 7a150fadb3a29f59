"""send_offsets_to_transaction over TCP with confluent-kafka (librdkafka: AddOffsetsToTxn, then
TxnOffsetCommit): the offsets become visible when the transaction commits, never when it aborts,
a read_committed consumer is held back while one is open, and they survive a kill -9."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.support import create_topic

GROUP = "copier"
IN = TopicPartition("in", 0)


def _committed(consumer: Any, timeout: float = 10) -> int:
    return int(consumer.committed([IN], timeout=timeout)[0].offset)


def test_transactional_offsets_commit_abort_and_restart(broker: Any) -> None:
    create_topic(broker.bootstrap, "in")
    create_topic(broker.bootstrap, "out")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "copier-1"})
    producer.init_transactions(20)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()
    try:
        for offset, commit, expected in ((5, True, 5), (9, False, 5), (12, True, 12)):
            producer.begin_transaction()
            producer.produce("out", b"x")
            producer.send_offsets_to_transaction([TopicPartition("in", 0, offset)], metadata, 20)
            if commit:
                producer.commit_transaction(20)
            else:
                producer.abort_transaction(20)
            assert _committed(consumer) == expected

        # While a transaction holds offsets, a read_committed consumer's OffsetFetch asks for
        # stable offsets and gets UNSTABLE_OFFSET_COMMIT: librdkafka retries until its timeout.
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition("in", 0, 20)], metadata, 20)
        try:
            _committed(consumer, timeout=2)
        except KafkaException as exc:
            assert "Timed out" in str(exc)
        else:
            raise AssertionError("offsets of an open transaction were returned")
        producer.commit_transaction(20)
        assert _committed(consumer) == 20
    finally:
        consumer.close()

    broker.restart()  # kill -9, then start on the same data: the log is replayed
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                         "isolation.level": "read_committed"})
    try:
        assert _committed(consumer) == 20
    finally:
        consumer.close()
