"""The hand-written encoders of exactly.protocol.fast_responses write byte for byte what kio writes for the
same response, at every version they cover, and kio reads them back."""

import datetime
import uuid

import pytest

from exactly.protocol import fast_responses
from exactly.protocol.apis import SUPPORTED, ApiKey, build, response_class, response_module
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import decode_response, encode_response

ZERO = datetime.timedelta(0)


def _nested(api_key: int, version: int, entity: str, /, **fields):
    return build(getattr(response_module(api_key, version), entity), **fields)


def _same_frame(api_key: int, version: int, entity, body: bytes):
    expected = encode_response(api_key, version, 12345, entity)
    frame = encode_response(api_key, version, 12345, body)
    assert frame == expected
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 12345
    return decoded


@pytest.mark.parametrize("version", range(SUPPORTED[ApiKey.END_TXN][0],
                                          SUPPORTED[ApiKey.END_TXN][1] + 1))
@pytest.mark.parametrize(("error", "pid", "epoch"), [
    (ErrorCode.none, 4711, 3), (ErrorCode.producer_fenced, -1, -1),
    (ErrorCode.none, 2**62, 32767)])
def test_end_txn(version, error, pid, epoch):
    entity = build(response_class(ApiKey.END_TXN, version), throttle_time=ZERO, error_code=error,
                   producer_id=pid, producer_epoch=epoch)
    decoded = _same_frame(ApiKey.END_TXN, version, entity, fast_responses.end_txn(version, error, pid, epoch))
    assert decoded.error_code == error


@pytest.mark.parametrize("version", range(4))
@pytest.mark.parametrize("results", [
    [],
    [("orders", [(0, ErrorCode.none)])],
    [("orders", [(0, ErrorCode.none), (7, ErrorCode.none)]),
     ("é-topic", [(2, ErrorCode.concurrent_transactions)])],
    [("t" * 300, [(p, ErrorCode.operation_not_attempted) for p in range(70)])],
])
def test_add_partitions_to_txn(version, results):
    k = ApiKey.ADD_PARTITIONS_TO_TXN
    entity = build(response_class(k, version), throttle_time=ZERO,
                   results_by_topic_v3_and_below=tuple(
                       _nested(k, version, "AddPartitionsToTxnTopicResult", name=name,
                               results_by_partition=tuple(
                                   _nested(k, version, "AddPartitionsToTxnPartitionResult",
                                           partition_index=p, partition_error_code=e)
                                   for p, e in parts))
                       for name, parts in results))
    _same_frame(k, version, entity, fast_responses.add_partitions_to_txn(version, results))


def test_add_partitions_to_txn_only_the_clients_versions():
    with pytest.raises(ValueError, match="v4"):
        fast_responses.add_partitions_to_txn(4, [])


TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def _time(ms: int) -> datetime.datetime | None:
    return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


@pytest.mark.parametrize("version", range(SUPPORTED[ApiKey.PRODUCE][0],
                                          SUPPORTED[ApiKey.PRODUCE][1] + 1))
@pytest.mark.parametrize("topics", [
    [],
    [("orders", TOPIC_ID, [(0, ErrorCode.none, 42, 0, None, (), -1)])],
    # A LogAppendTime topic's append, or a duplicate's original batch: its time.
    [("orders", TOPIC_ID, [(0, ErrorCode.none, 42, 0, None, (), 1_600_000_000_123)])],
    [("orders", None, [(0, ErrorCode.none, 42, 0, None, (), -1),
                       (3, ErrorCode.invalid_record, -1, -1, "empty or null record set", (),
                        -1)]),
     ("ünïcode", TOPIC_ID, [(1, ErrorCode.not_enough_replicas, -1, 17, "é" * 200, (), -1)])],
    [("", None, [(p, ErrorCode.unknown_topic_id, -1, -1, None, (), -1) for p in range(130)])],
    # Record errors (a compacted topic refusing keyless records); Produce v8+ carries them.
    [("compacted", TOPIC_ID, [(2, ErrorCode.invalid_record, -1, -1, "rejected", (
        (0, "Compacted topic cannot accept message without key in topic partition t-2."),
        (5, None)), -1)])],
])
def test_produce(version, topics):
    k = ApiKey.PRODUCE
    entity = build(response_class(k, version), throttle_time=ZERO, responses=tuple(
        _nested(k, version, "TopicProduceResponse", name=name, topic_id=topic_id,
                partition_responses=tuple(
                    _nested(k, version, "PartitionProduceResponse", index=i, error_code=e,
                            base_offset=b, log_append_time=_time(t), log_start_offset=s,
                            record_errors=tuple(
                                _nested(k, version, "BatchIndexAndErrorMessage", batch_index=j,
                                        batch_index_error_message=why) for j, why in errors
                                if version >= 8),  # older versions have no record errors
                            error_message=m)
                    for i, e, b, s, m, errors, t in parts))
        for name, topic_id, parts in topics))
    decoded = _same_frame(k, version, entity, fast_responses.produce(version, topics))
    assert len(decoded.responses) == len(topics)
