"""Produce to a compacted topic over TCP (issue 13, item 6): a batch with a keyless record gets
INVALID_RECORD with the per-record error list of Produce v8+, as Kafka answers, and nothing of it
is written; keyed records go in. With confluent-kafka and with exact Produce v9 bytes."""

from __future__ import annotations

import datetime

from confluent_kafka import KafkaError, Producer

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from tests.rawclient import RawConnection
from tests.support import consume_confluent, create_topic, end_offsets

COMPACT = {"cleanup.policy": "compact"}


def test_confluent_kafka_keyless_record_is_refused(broker) -> None:
    create_topic(broker.bootstrap, "compacted", config=COMPACT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False,
                         "acks": "all", "retries": 0, "linger.ms": 0})
    reports: list[tuple[bytes | None, KafkaError | None]] = []

    def report(err: KafkaError | None, msg: object) -> None:
        reports.append((msg.key(), err))  # type: ignore[attr-defined]

    producer.produce("compacted", b"kept", key=b"k1", on_delivery=report)
    producer.flush(20)
    producer.produce("compacted", b"refused", on_delivery=report)  # no key
    producer.flush(20)
    producer.produce("compacted", b"kept too", key=b"k2", on_delivery=report)
    producer.flush(20)
    assert [(key, None if err is None else err.code()) for key, err in reports] == [
        (b"k1", None), (None, KafkaError.INVALID_RECORD), (b"k2", None)]
    records = consume_confluent(broker.bootstrap, "compacted", 2, timeout=20)
    assert [(m.key(), m.value()) for m in records] == [(b"k1", b"kept"), (b"k2", b"kept too")]
    assert end_offsets(broker.bootstrap, "compacted", 1) == [2]


def test_produce_v9_answer_lists_each_keyless_record(broker) -> None:
    create_topic(broker.bootstrap, "compacted-raw", config=COMPACT)
    module = __import__("kio.schema.produce.v9.request", fromlist=["x"])
    batch = build_batch([Record(b"a", b"1"), Record(None, b"2"), Record(b"c", b"3"),
                         Record(None, b"4")], timestamp=1_700_000_000_000)
    request = module.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(module.TopicProduceData(name="compacted-raw", partition_data=(
            module.PartitionProduceData(index=0, records=batch),)),))
    conn = RawConnection(broker.host, broker.port)
    try:
        conn.send_bytes(conn.frame(ApiKey.PRODUCE, 9, request))
        answer = conn.read_response(ApiKey.PRODUCE, 9).responses[0].partition_responses[0]
    finally:
        conn.close()
    assert answer.error_code == ErrorCode.invalid_record
    reason = ("Compacted topic cannot accept message without key in topic partition "
              "compacted-raw-0.")
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (1, reason), (3, reason)]
    assert "2 record errors" in answer.error_message
    assert end_offsets(broker.bootstrap, "compacted-raw", 1) == [0]
