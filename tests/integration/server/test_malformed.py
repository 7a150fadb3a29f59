"""Bad input (DESIGN invariant 8): each malformed frame of the corpus gets Kafka's error or a
closed connection; the broker stays up, keeps serving another client, and nothing from a
rejected request reaches the log."""

import datetime
import struct

import pytest
from kio.static.primitive import i16, i32

from exactly.protocol.apis import ApiKey, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic

TOPIC = "target"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(settings={"socket.request.max.bytes": str(1024 * 1024)}) as b:
        create_topic(b.bootstrap, TOPIC, partitions=1)
        yield b


@pytest.fixture(scope="module")
def bystander(broker):
    """A well-behaved client whose connection stays open through the whole corpus."""
    conn = RawConnection(broker.host, broker.port)
    yield conn
    conn.close()


def _metadata(conn):
    return conn.request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)


def _end_offset(conn) -> int:
    resp = conn.request(ApiKey.LIST_OFFSETS, 7, replica_id=i32(-1), isolation_level=0,
                        topics=(_lo_topic(),))
    return resp.topics[0].partitions[0].offset


def _lo_topic():
    module = __import__("kio.schema.list_offsets.v7.request", fromlist=["x"])
    return module.ListOffsetsTopic(name=TOPIC, partitions=(
        module.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1),
                                    timestamp=-1),))


def _produce_frame(conn, records: bytes, acks: int = -1, partition: int = 0) -> bytes:
    module = __import__("kio.schema.produce.v9.request", fromlist=["x"])
    req = module.ProduceRequest(
        transactional_id=None, acks=i16(acks), timeout=datetime.timedelta(seconds=5),
        topic_data=(module.TopicProduceData(name=TOPIC, partition_data=(
            module.PartitionProduceData(index=i32(partition), records=records),)),))
    return conn.frame(ApiKey.PRODUCE, 9, req)


def _good_batch() -> bytes:
    return build_batch([Record(b"k", b"v")], timestamp=1_700_000_000_000)


APPENDING = {"test_a_good_produce_still_appends"}


@pytest.fixture(autouse=True)
def still_serving(request, broker, bystander):
    before = _end_offset(bystander)
    yield
    assert broker.process.poll() is None, "the broker process died"
    assert TOPIC in {t.name for t in _metadata(bystander).topics}
    fresh = RawConnection(broker.host, broker.port)
    assert _metadata(fresh).brokers[0].port == broker.port
    fresh.close()
    if request.node.name not in APPENDING:
        assert _end_offset(bystander) == before, "a rejected request reached the log"


def _expect_closed(broker, data: bytes) -> None:
    conn = RawConnection(broker.host, broker.port)
    conn.send_bytes(data)
    assert conn.is_closed_by_peer(), "the broker kept a connection that sent a malformed frame"
    conn.close()


def test_truncated_frame(broker):
    conn = RawConnection(broker.host, broker.port)
    frame = _produce_frame(conn, _good_batch())
    conn.send_bytes(frame[: len(frame) // 2])
    conn.sock.shutdown(1)  # the rest never comes
    assert conn.is_closed_by_peer()
    conn.close()


def test_size_over_socket_request_max_bytes(broker):
    # Only the size is sent: the broker must refuse it before waiting for the body.
    _expect_closed(broker, struct.pack(">i", 50 * 1024 * 1024))


def test_negative_size(broker):
    _expect_closed(broker, struct.pack(">i", -7) + b"\0" * 16)


def test_frame_shorter_than_a_header(broker):
    _expect_closed(broker, struct.pack(">i", 3) + b"\0\x12\0")


def test_unknown_api_key(broker):
    body = struct.pack(">hhih", 9999, 0, 1, -1)
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_unsupported_version_of_an_api(broker):
    body = struct.pack(">hhih", ApiKey.METADATA, 99, 1, -1) + b"\0" * 8
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_unsupported_api_versions_version_gets_v0_answer(broker):
    conn = RawConnection(broker.host, broker.port)
    body = struct.pack(">hhih", ApiKey.API_VERSIONS, 77, 42, -1) + b"\x00\xff\xff"
    conn.send_bytes(struct.pack(">i", len(body)) + body)
    from exactly.protocol.framing import decode_response
    correlation_id, resp = decode_response(ApiKey.API_VERSIONS, 0, conn.read_frame())
    assert correlation_id == 42
    assert resp.error_code == ErrorCode.unsupported_version
    assert {k.api_key for k in resp.api_keys} >= {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.API_VERSIONS}
    # The client may go on with a version it now knows is supported.
    assert conn.request(ApiKey.API_VERSIONS, 3, client_software_name="raw",
                        client_software_version="1").error_code == ErrorCode.none
    conn.close()


def test_bad_varint(broker):
    # Metadata v12 is flexible: its topics array length is an unsigned varint; this one never ends.
    header = struct.pack(">hhih", ApiKey.METADATA, 12, 1, -1) + b"\0"
    body = header + b"\xff" * 12
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_negative_array_length(broker):
    # Metadata v4 is not flexible: an int32 array length; -1 means null, -5 means nothing.
    body = struct.pack(">hhih", ApiKey.METADATA, 4, 1, -1) + struct.pack(">i", -5) + b"\x01"
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_huge_compact_array_length(broker):
    # Metadata v12: a five-byte body claiming 4,294,967,294 topics. kio's reader would reserve
    # room for them (34 GB) and abort the process; the broker closes the connection, as Kafka.
    body = struct.pack(">hhih", ApiKey.METADATA, 12, 1, -1) + b"\0" + b"\xff\xff\xff\xff\x0f"
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_huge_array_inside_a_produce(broker):
    # Produce v9: one topic whose partitions array claims two million entries.
    body = (struct.pack(">hhih", ApiKey.PRODUCE, 9, 1, -1) + b"\0" + b"\x00"
            + struct.pack(">hi", 1, 1000) + b"\x02\x02t" + b"\xff\xff\x7f")
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def test_array_over_kafkas_million_element_cap(broker):
    # DescribeGroups v5: 1,000,001 empty group names, one byte each. They fit in the frame, but
    # Kafka 4.4's readers refuse an array of more than 1,000,000 elements
    # (MessageUtil.MAX_ARRAY_LENGTH): the connection is closed.
    count = 1_000_001
    body = (struct.pack(">hhih", ApiKey.DESCRIBE_GROUPS, 5, 1, -1) + b"\0"
            + _uvarint(count + 1) + b"\x01" * count + b"\0\0")
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_request_header_with_more_than_kafkas_tagged_field_cap(broker):
    # 10,001 empty tagged fields in the request header (MessageUtil.MAX_TAGGED_FIELD_COUNT is
    # 10,000), before a well-formed DescribeGroups v5 body.
    count = 10_001
    body = (struct.pack(">hhih", ApiKey.DESCRIBE_GROUPS, 5, 1, -1)
            + _uvarint(count) + b"\x05\x00" * count + _uvarint(2) + b"\x02g" + b"\0\0")
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_string_longer_than_frame(broker):
    body = struct.pack(">hhih", ApiKey.METADATA, 4, 1, 500) + b"abc"
    _expect_closed(broker, struct.pack(">i", len(body)) + body)


def test_garbage_after_a_valid_request_in_the_same_frame(broker):
    # Kafka's parser ignores bytes after the body inside a frame (librdkafka relies on it), so
    # the request is answered; the garbage goes nowhere.
    conn = RawConnection(broker.host, broker.port)
    req = request_class(ApiKey.METADATA, 12)(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False)
    frame = conn.frame(ApiKey.METADATA, 12, req)
    padded = struct.pack(">i", len(frame) - 4 + 5) + frame[4:] + b"\xde\xad\xbe\xef\x00"
    conn.send_bytes(padded)
    assert TOPIC in {t.name for t in conn.read_response(ApiKey.METADATA, 12).topics}
    conn.close()


def test_garbage_frame_after_a_valid_one(broker):
    conn = RawConnection(broker.host, broker.port)
    req = request_class(ApiKey.METADATA, 12)(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False)
    good = conn.frame(ApiKey.METADATA, 12, req)
    conn.send_bytes(good + struct.pack(">i", 6) + b"\xff" * 6)
    # The valid request is answered, then the connection is closed.
    assert conn.read_response(ApiKey.METADATA, 12).topics is not None
    assert conn.is_closed_by_peer()
    conn.close()


def _produce_error(broker, records: bytes) -> int:
    conn = RawConnection(broker.host, broker.port)
    conn.send_bytes(_produce_frame(conn, records))
    resp = conn.read_response(ApiKey.PRODUCE, 9)
    conn.close()
    return resp.responses[0].partition_responses[0].error_code


def test_bad_crc_is_corrupt_message(broker):
    batch = bytearray(_good_batch())
    batch[-1] ^= 0xFF  # flip a bit of the value: the CRC no longer matches
    assert _produce_error(broker, bytes(batch)) == ErrorCode.corrupt_message


# As Apache Kafka 4.4 answers them (tests/helpers/conformance/corpus/produce.py,
# produce.bad_batches): Produce v3+ carries exactly one complete batch per partition, so a second
# batch, good or bad, and a batch cut short (or whose length claims more than there is) are
# INVALID_RECORD.


def test_second_batch_bad_rejects_the_whole_partition_write(broker):
    bad = bytearray(_good_batch())
    bad[30] ^= 0x01  # inside baseTimestamp, covered by the CRC
    assert _produce_error(broker, _good_batch() + bytes(bad)) == ErrorCode.invalid_record


def test_truncated_batch_inside_records(broker):
    assert _produce_error(broker, _good_batch()[:-3]) == ErrorCode.invalid_record


def test_batch_length_field_too_large(broker):
    batch = bytearray(_good_batch())
    struct.pack_into(">i", batch, 8, 10_000)
    assert _produce_error(broker, bytes(batch)) == ErrorCode.invalid_record


def test_old_magic_is_invalid_record(broker):
    batch = bytearray(_good_batch())
    batch[16] = 1
    assert _produce_error(broker, bytes(batch)) in (ErrorCode.invalid_record, ErrorCode.corrupt_message)


@pytest.mark.parametrize("bad", ["unknown partition", "bad crc"])
def test_a_refused_acks_0_produce_closes_the_connection(broker, bad):
    # acks=0 has no answer to carry the error: as Kafka, the broker closes the connection (the
    # producer refreshes its metadata and reconnects). Conformance case produce.acks.
    conn = RawConnection(broker.host, broker.port)
    batch = bytearray(_good_batch())
    if bad == "bad crc":
        batch[30] ^= 0x01
    conn.send_bytes(_produce_frame(conn, bytes(batch), acks=0,
                                   partition=7 if bad == "unknown partition" else 0))
    assert conn.is_closed_by_peer()
    conn.close()


def test_empty_records_is_refused(broker):
    assert _produce_error(broker, b"") != ErrorCode.none


def test_a_good_produce_still_appends(broker, bystander):
    before = _end_offset(bystander)
    assert _produce_error(broker, _good_batch()) == ErrorCode.none
    assert _end_offset(bystander) == before + 1
