"""Admin's transaction tools against Exactly's broker over TCP: a confluent-kafka transactional
producer's open and committed transaction as list/describe show it, its producer state on the
partitions, and a hanging transaction (written by a producer that then vanished) ended with
abort_transaction. librdkafka's mock offers none of these APIs (see test_admin.py)."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.static.primitive import i16, i32

from exactly.client.admin import Admin, AdminError, NewTopic
from exactly.client.errors import KafkaError
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from tests.rawclient import RawConnection

TOPIC = "adm-txn"
HANGING = "adm-hanging"


@pytest.fixture(scope="module")
def admin(exactly_broker):
    with Admin({"bootstrap.servers": exactly_broker.bootstrap}) as a:
        a.create_topics([NewTopic(TOPIC, 2), NewTopic(HANGING, 1)])
        yield a


def _txn_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 45_000})
    producer.init_transactions(10)
    return producer


def test_open_then_committed_transaction(exactly_broker, admin):
    producer = _txn_producer(exactly_broker.bootstrap, "adm-open")
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(TOPIC, b"v", partition=partition)
    assert producer.flush(10) == 0
    before = int(time.time() * 1000)

    desc = admin.describe_transactions(["adm-open"])["adm-open"]
    assert desc.state == "Ongoing"
    assert desc.partitions == [(TOPIC, 0), (TOPIC, 1)]
    assert desc.timeout_ms == 45_000
    assert 0 < desc.start_time_ms <= before
    pid = desc.producer_id

    listing = {t.transactional_id: t for t in admin.list_transactions()}
    assert (listing["adm-open"].producer_id, listing["adm-open"].state) == (pid, "Ongoing")
    assert [t.transactional_id for t in admin.list_transactions(states=["Ongoing"],
                                                                producer_ids=[pid])] == ["adm-open"]
    assert "adm-open" not in {t.transactional_id for t in admin.list_transactions(states=["Empty"])}
    assert "adm-open" in {t.transactional_id for t in admin.list_transactions(running_longer_than_ms=0)}
    assert "adm-open" not in {t.transactional_id
                              for t in admin.list_transactions(running_longer_than_ms=3_600_000)}

    producers = admin.describe_producers([(TOPIC, 0), (TOPIC, 1)])
    for partition in (0, 1):
        (mine,) = [p for p in producers[(TOPIC, partition)] if p.producer_id == pid]
        assert mine.producer_epoch == desc.producer_epoch
        assert mine.current_txn_start_offset >= 0 and mine.last_sequence == 0

    producer.commit_transaction(10)
    desc = admin.describe_transactions(["adm-open"])["adm-open"]
    assert desc.state == "CompleteCommit" and desc.partitions == []
    assert {t.transactional_id: t.state for t in admin.list_transactions()}["adm-open"] == "CompleteCommit"
    for producers_of_partition in admin.describe_producers([(TOPIC, 0), (TOPIC, 1)]).values():
        (mine,) = [p for p in producers_of_partition if p.producer_id == pid]
        assert mine.current_txn_start_offset == -1
    assert "__transaction_state" in admin.list_topics(include_internal=True)
    assert "__transaction_state" not in admin.list_topics()


def test_unknown_partition_fails_per_item(admin):
    with pytest.raises(AdminError) as caught:
        admin.describe_producers([(TOPIC, 0), (TOPIC, 7)])
    assert caught.value.name == "UNKNOWN_TOPIC_OR_PARTITION" and f"{TOPIC}-7" in str(caught.value)
    assert set(caught.value.errors) == {(TOPIC, 7)}


def test_describe_unknown_and_empty_transactions(exactly_broker, admin):
    producer = _txn_producer(exactly_broker.bootstrap, "adm-empty")  # initialized, never begun
    assert admin.describe_transactions(["adm-empty"])["adm-empty"].start_time_ms == -1
    del producer
    with pytest.raises(AdminError) as caught:
        admin.describe_transactions(["adm-no-such-txn"])
    assert caught.value.name == "TRANSACTIONAL_ID_NOT_FOUND"
    assert "adm-no-such-txn" in str(caught.value)


# -- a hanging transaction ---------------------------------------------------------------------


def _raw_open_transaction(conn: RawConnection, txn_id: str) -> tuple[int, int]:
    """Init, add the partition, write one transactional batch; then never end it."""
    init = conn.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn_id,
                        transaction_timeout=datetime.timedelta(minutes=10), producer_id=-1,
                        producer_epoch=-1)
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    add_m = __import__("kio.schema.add_partitions_to_txn.v3.request", fromlist=["_"])
    added = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn_id,
                         v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                         v3_and_below_topics=(add_m.AddPartitionsToTxnTopic(
                             name=HANGING, partitions=(i32(0),)),))
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    produce_m = __import__("kio.schema.produce.v9.request", fromlist=["_"])
    batch = build_batch([Record(None, b"hanging")], timestamp=int(time.time() * 1000),
                        producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
    request = build(request_class(ApiKey.PRODUCE, 9), transactional_id=txn_id, acks=i16(-1),
                    timeout=datetime.timedelta(seconds=10),
                    topic_data=(produce_m.TopicProduceData(name=HANGING, partition_data=(
                        produce_m.PartitionProduceData(index=i32(0), records=batch),)),))
    conn.send_bytes(conn.frame(ApiKey.PRODUCE, 9, request))
    produced = conn.read_response(ApiKey.PRODUCE, 9)
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
    return pid, epoch


def _offsets(bootstrap: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of the hanging partition."""
    host, port = bootstrap.rsplit(":", 1)
    conn = RawConnection(host, int(port))
    m = __import__("kio.schema.list_offsets.v7.request", fromlist=["_"])
    try:
        result = []
        for isolation in (0, 1):
            resp = conn.request(ApiKey.LIST_OFFSETS, 7, replica_id=i32(-1), isolation_level=isolation,
                                topics=(m.ListOffsetsTopic(name=HANGING, partitions=(
                                    m.ListOffsetsPartition(partition_index=i32(0),
                                                           current_leader_epoch=i32(-1),
                                                           timestamp=-1),)),))
            result.append(resp.topics[0].partitions[0].offset)
        return result[0], result[1]
    finally:
        conn.close()


def test_abort_a_hanging_transaction(exactly_broker, admin):
    bootstrap = exactly_broker.bootstrap
    conn = RawConnection(exactly_broker.host, exactly_broker.port)
    pid, epoch = _raw_open_transaction(conn, "adm-hanging-txn")
    conn.close()  # the producer disappears, its transaction open

    # A committed record after it: read_committed cannot get past the open transaction.
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    plain.produce(HANGING, b"after", partition=0)
    assert plain.flush(10) == 0
    hwm, lso = _offsets(bootstrap)
    assert lso < hwm

    (hanging,) = [p for p in admin.describe_producers([(HANGING, 0)])[(HANGING, 0)]
                  if p.current_txn_start_offset >= 0]
    assert (hanging.producer_id, hanging.producer_epoch) == (pid, epoch)
    assert hanging.current_txn_start_offset == lso
    assert any(t.producer_id == pid and t.state == "Ongoing" for t in admin.list_transactions())

    admin.abort_transaction(HANGING, 0, hanging.producer_id, hanging.producer_epoch,
                            hanging.coordinator_epoch)

    hwm_after, lso_after = _offsets(bootstrap)
    assert lso_after == hwm_after == hwm + 1  # the marker, and nothing holds the LSO back
    assert all(p.current_txn_start_offset == -1
               for p in admin.describe_producers([(HANGING, 0)])[(HANGING, 0)])

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "adm-hanging-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(HANGING, 0, 0)])
    values = []
    deadline = time.monotonic() + 20
    while not values and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    assert values == [b"after"]  # the aborted record is never handed out


def test_abort_transaction_names_the_partition_on_error(admin):
    with pytest.raises(KafkaError) as caught:
        admin.abort_transaction(HANGING, 5, 1, 0, 0)
    assert caught.value.name == "UNKNOWN_TOPIC_OR_PARTITION" and f"{HANGING}-5" in str(caught.value)
