"""KIP-890's hanging-transaction scenarios (seed 003), over TCP with exact request versions:
a buggy client writing before adding the partition, a produce delayed past its transaction's
abort, and a delayed EndTxn arriving after a new transaction began. None may leave a hanging
transaction or put a record into the wrong transaction."""

import datetime

import pytest
from kio.static.primitive import i16, i32

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic

TOPIC = "kip890"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        yield b


@pytest.fixture
def conn(broker):
    c = RawConnection(broker.host, broker.port)
    yield c
    c.close()


def _module(api: str, version: int):
    return __import__(f"kio.schema.{api}.v{version}.request", fromlist=["x"])


def init(conn, txn_id):
    resp = conn.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=txn_id,
                        transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                        producer_epoch=-1)
    assert resp.error_code == ErrorCode.none
    return resp.producer_id, resp.producer_epoch


def add_partition(conn, txn_id, pid, epoch, partition):
    m = _module("add_partitions_to_txn", 3)
    resp = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn_id,
                        v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                        v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=TOPIC,
                                                                        partitions=(i32(partition),)),))
    return resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def produce(conn, version, txn_id, pid, epoch, seq, partition, value, acks=-1):
    """A transactional batch of one record; with `txn_id` None, a plain one (pid -1)."""
    m = _module("produce", version)
    batch = build_batch([Record(None, value)], timestamp=1_700_000_000_000, producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, transactional=txn_id is not None)
    req = build(request_class(ApiKey.PRODUCE, version), transactional_id=txn_id, acks=i16(acks),
                timeout=datetime.timedelta(seconds=10),
                topic_data=(m.TopicProduceData(name=TOPIC, partition_data=(
                    m.PartitionProduceData(index=i32(partition), records=batch),)),))
    conn.send_bytes(conn.frame(ApiKey.PRODUCE, version, req))
    resp = conn.read_response(ApiKey.PRODUCE, version)
    return resp.responses[0].partition_responses[0].error_code


def end_txn(conn, version, txn_id, pid, epoch, commit):
    resp = conn.request(ApiKey.END_TXN, version, transactional_id=txn_id, producer_id=pid,
                        producer_epoch=epoch, committed=commit)
    return resp.error_code, getattr(resp, "producer_id", -1), getattr(resp, "producer_epoch", -1)


def offsets(conn, partition):
    """(high watermark, last stable offset) of a partition, from ListOffsets."""
    m = _module("list_offsets", 7)
    result = []
    for isolation in (0, 1):
        resp = conn.request(ApiKey.LIST_OFFSETS, 7, replica_id=i32(-1), isolation_level=isolation,
                            topics=(m.ListOffsetsTopic(name=TOPIC, partitions=(
                                m.ListOffsetsPartition(partition_index=i32(partition),
                                                       current_leader_epoch=i32(-1),
                                                       timestamp=-1),)),))
        result.append(resp.topics[0].partitions[0].offset)
    return tuple(result)


def test_buggy_client_writes_before_adding_the_partition(conn):
    pid, epoch = init(conn, "buggy")
    before = offsets(conn, 0)
    assert produce(conn, 9, "buggy", pid, epoch, 0, 0, b"too early") == ErrorCode.invalid_txn_state
    # Even with a transaction ongoing on another partition, this one is not part of it.
    assert add_partition(conn, "buggy", pid, epoch, 1) == ErrorCode.none
    assert produce(conn, 9, "buggy", pid, epoch, 0, 0, b"wrong partition") == ErrorCode.invalid_txn_state
    assert offsets(conn, 0) == before  # nothing written, nothing hanging
    assert end_txn(conn, 3, "buggy", pid, epoch, False)[0] == ErrorCode.none


def test_produce_delayed_past_its_transactions_abort(conn):
    pid, epoch = init(conn, "late-produce")
    assert add_partition(conn, "late-produce", pid, epoch, 0) == ErrorCode.none
    assert produce(conn, 9, "late-produce", pid, epoch, 0, 0, b"in time") == ErrorCode.none
    assert end_txn(conn, 3, "late-produce", pid, epoch, False)[0] == ErrorCode.none
    hwm, lso = offsets(conn, 0)
    assert hwm == lso
    # The delayed request arrives after the abort: no transaction holds the partition.
    assert produce(conn, 9, "late-produce", pid, epoch, 1, 0, b"late") == ErrorCode.invalid_txn_state
    # A new transaction on the other partition does not make it acceptable either.
    assert add_partition(conn, "late-produce", pid, epoch, 1) == ErrorCode.none
    assert produce(conn, 9, "late-produce", pid, epoch, 1, 0, b"late") == ErrorCode.invalid_txn_state
    assert offsets(conn, 0) == (hwm, lso)
    assert end_txn(conn, 3, "late-produce", pid, epoch, False)[0] == ErrorCode.none


def test_transaction_version_2_epoch_bump_fences_delayed_requests(conn):
    pid, epoch = init(conn, "tv2")
    # Produce v12 adds the partition implicitly: no AddPartitionsToTxn.
    assert produce(conn, 12, "tv2", pid, epoch, 0, 0, b"first") == ErrorCode.none
    error, new_pid, new_epoch = end_txn(conn, 5, "tv2", pid, epoch, True)
    assert error == ErrorCode.none and (new_pid, new_epoch) == (pid, epoch + 1)
    # A produce of the finished transaction, delayed: its epoch is fenced.
    assert produce(conn, 12, "tv2", pid, epoch, 1, 0, b"delayed") == ErrorCode.invalid_producer_epoch
    # The next transaction, with the bumped epoch, starts at sequence 0.
    assert produce(conn, 12, "tv2", pid, new_epoch, 0, 0, b"second") == ErrorCode.none
    # A delayed EndTxn from the first transaction cannot end the second one.
    assert end_txn(conn, 5, "tv2", pid, epoch, False)[0] == ErrorCode.producer_fenced
    hwm, lso = offsets(conn, 0)
    assert lso < hwm  # the second transaction is still open
    error, _, last_epoch = end_txn(conn, 5, "tv2", pid, new_epoch, False)
    assert error == ErrorCode.none and last_epoch == new_epoch + 1
    hwm, lso = offsets(conn, 0)
    assert hwm == lso


def test_retried_end_txn_after_the_bump_succeeds(conn):
    pid, epoch = init(conn, "tv2-retry")
    assert produce(conn, 12, "tv2-retry", pid, epoch, 0, 1, b"x") == ErrorCode.none
    first = end_txn(conn, 5, "tv2-retry", pid, epoch, True)
    assert first[0] == ErrorCode.none
    # The response was lost; the client retries with the epoch it had.
    assert end_txn(conn, 5, "tv2-retry", pid, epoch, True) == first
