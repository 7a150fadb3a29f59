"""The hand-written request encoders of exactly.protocol.fast_requests write byte for byte what
kio writes for the same request, header included, at every version they cover; and the broker's
decoder reads them back."""

import datetime

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from exactly.protocol import fast_requests
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.framing import (
    RequestHeader,
    client_id_field,
    decode_request,
    encode_request,
    encoded_request,
)
from exactly.protocol.records import Record, build_batch


def _nested(api_key: int, version: int, entity: str, /, **fields):
    module = load_payload_module(api_key, version, EntityType.request)
    return build(getattr(module, entity), **fields)


def _same_frame(entity, body: fast_requests.Encoded, client_id: str | None = "exactly-client"):
    api_key, version = int(entity.__api_key__), int(entity.__version__)
    assert (body.api_key, body.version) == (api_key, version)
    expected = encode_request(RequestHeader(api_key, version, 4242, client_id), entity)
    frame = encoded_request(4242, client_id_field(client_id), body)
    assert frame == expected
    header, decoded = decode_request(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        api_key, version, 4242, client_id)
    return decoded


BATCH = build_batch([Record(b"k", b"v" * 40)], timestamp=1_700_000_000_000, producer_id=9,
                    producer_epoch=2, base_sequence=5, transactional=True)


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("txn_id", [None, "orders-txn", "é" * 200])
@pytest.mark.parametrize("topics", [
    [],
    [("orders", [(0, BATCH)])],
    [("orders", [(0, BATCH), (7, BATCH + BATCH)]), ("é-topic", [(2, memoryview(BATCH))])],
    [("t" * 300, [(p, BATCH) for p in range(70)])],
])
def test_produce(version, txn_id, topics):
    k = ApiKey.PRODUCE
    entity = build(request_class(k, version), transactional_id=txn_id, acks=-1,
                   timeout=datetime.timedelta(milliseconds=30_000), topic_data=tuple(
                       _nested(k, version, "TopicProduceData", name=name, partition_data=tuple(
                           _nested(k, version, "PartitionProduceData", index=p,
                                   records=bytes(records))
                           for p, records in parts))
                       for name, parts in topics))
    decoded = _same_frame(entity, fast_requests.produce(version, txn_id, -1, 30_000, topics))
    assert [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data])
            for t in decoded.topic_data] == [
        (name, [(p, bytes(r)) for p, r in parts]) for name, parts in topics]


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_timeout_and_no_client_id(acks):
    k, version = ApiKey.PRODUCE, 12
    topics = [("orders", [(3, BATCH)])]
    entity = build(request_class(k, version), transactional_id=None, acks=acks,
                   timeout=datetime.timedelta(milliseconds=1234), topic_data=tuple(
                       _nested(k, version, "TopicProduceData", name=name, partition_data=tuple(
                           _nested(k, version, "PartitionProduceData", index=p, records=r)
                           for p, r in parts))
                       for name, parts in topics))
    decoded = _same_frame(entity, fast_requests.produce(version, None, acks, 1234, topics),
                          client_id=None)
    assert decoded.acks == acks


@pytest.mark.parametrize("version", range(4))
@pytest.mark.parametrize("topics", [
    [],
    [("orders", [0])],
    [("orders", [0, 7]), ("é-topic", [2])],
    [("t" * 300, list(range(70)))],
])
def test_add_partitions_to_txn(version, topics):
    k = ApiKey.ADD_PARTITIONS_TO_TXN
    entity = build(request_class(k, version), v3_and_below_transactional_id="orders-txn",
                   v3_and_below_producer_id=2**40, v3_and_below_producer_epoch=32767,
                   v3_and_below_topics=tuple(
                       _nested(k, version, "AddPartitionsToTxnTopic", name=name,
                               partitions=tuple(parts))
                       for name, parts in topics))
    body = fast_requests.add_partitions_to_txn(version, "orders-txn", 2**40, 32767, topics)
    decoded = _same_frame(entity, body)
    assert [(t.name, list(t.partitions)) for t in decoded.v3_and_below_topics] == topics


@pytest.mark.parametrize("version", range(6))
@pytest.mark.parametrize(("txn_id", "pid", "epoch", "committed"), [
    ("orders-txn", 4711, 3, True), ("é" * 70, 0, 0, False), ("x", 2**62, 32767, True)])
def test_end_txn(version, txn_id, pid, epoch, committed):
    entity = build(request_class(ApiKey.END_TXN, version), transactional_id=txn_id,
                   producer_id=pid, producer_epoch=epoch, committed=committed)
    decoded = _same_frame(entity, fast_requests.end_txn(version, txn_id, pid, epoch, committed))
    assert (decoded.producer_id, decoded.committed) == (pid, committed)


def test_versions_outside_the_encoders_are_refused():
    with pytest.raises(ValueError, match="Produce v13"):
        fast_requests.produce(13, None, -1, 1000, [])
    with pytest.raises(ValueError, match="AddPartitionsToTxn v4"):
        fast_requests.add_partitions_to_txn(4, "t", 1, 0, [])
    with pytest.raises(ValueError, match="EndTxn v6"):
        fast_requests.end_txn(6, "t", 1, 0, True)
