"""How the broker cuts a TCP stream into frames (exactly.server.network): frames split across
reads at any byte, several frames in one read, frames larger than the receive buffer (read in
place, into a buffer the connection reuses), and more pipelined requests than MAX_IN_FLIGHT.
Every answer must come back, in request order, and every record must land intact."""

import datetime
import os

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.static.primitive import i8, i16, i32, i64

from exactly.protocol.apis import ApiKey, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import decode_response
from exactly.protocol.records import Record, build_batch
from exactly.server.network import MAX_IN_FLIGHT, RECEIVE_BUFFER
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic

TOPIC = "framing"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        create_topic(b.bootstrap, TOPIC, partitions=1)
        create_topic(b.bootstrap, "quiet", partitions=1)
        yield b


def _metadata_frame(conn: RawConnection) -> bytes:
    req = request_class(ApiKey.METADATA, 12)(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False)
    return conn.frame(ApiKey.METADATA, 12, req)


def _produce_frame(conn: RawConnection, values: list[bytes]) -> bytes:
    module = __import__("kio.schema.produce.v9.request", fromlist=["x"])
    records = build_batch([Record(None, v) for v in values], timestamp=1_700_000_000_000)
    req = module.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
        topic_data=(module.TopicProduceData(name=TOPIC, partition_data=(
            module.PartitionProduceData(index=i32(0), records=records),)),))
    return conn.frame(ApiKey.PRODUCE, 9, req)


def _answers(conn: RawConnection, expected: list[tuple[int, int, int]]) -> list:
    """Read one answer per (api key, version, correlation id), checking their order."""
    out = []
    for api_key, version, correlation_id in expected:
        got_id, response = decode_response(api_key, version, conn.read_frame())
        assert got_id == correlation_id, "answers out of request order"
        out.append(response)
    return out


def _read_values(broker, count: int, start: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "framing-check",
                         "enable.auto.commit": False, "fetch.message.max.bytes": 4 * 1024 * 1024})
    consumer.assign([TopicPartition(TOPIC, 0, start)])
    values = []
    try:
        while len(values) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(values)} of {count} records came back"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def _end_offset(conn: RawConnection) -> int:
    module = __import__("kio.schema.list_offsets.v7.request", fromlist=["x"])
    topic = module.ListOffsetsTopic(name=TOPIC, partitions=(
        module.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1),
                                    timestamp=-1),))
    resp = conn.request(ApiKey.LIST_OFFSETS, 7, replica_id=i32(-1), isolation_level=0,
                        topics=(topic,))
    return resp.topics[0].partitions[0].offset


def test_several_frames_in_one_write_are_all_answered_in_order(broker):
    conn = RawConnection(broker.host, broker.port)
    frames = [_metadata_frame(conn) for _ in range(5)]
    conn.send_bytes(b"".join(frames))
    answers = _answers(conn, [(ApiKey.METADATA, 12, i + 1) for i in range(5)])
    assert all(TOPIC in {t.name for t in a.topics} for a in answers)
    conn.close()


def test_a_frame_sent_one_byte_at_a_time(broker):
    conn = RawConnection(broker.host, broker.port)
    conn.sock.setsockopt(6, 1, 1)  # TCP_NODELAY: each byte its own segment
    frame = _metadata_frame(conn)
    for i in range(len(frame)):
        conn.send_bytes(frame[i:i + 1])
    (answer,) = _answers(conn, [(ApiKey.METADATA, 12, 1)])
    assert TOPIC in {t.name for t in answer.topics}
    conn.close()


def test_large_frames_in_odd_chunks_land_intact_with_a_small_one_behind(broker):
    """Two produce frames larger than the receive buffer (the second smaller than the first, so
    it reuses the first one's buffer), then a small frame, all in one stream cut into chunks
    that end inside sizes, headers and bodies."""
    conn = RawConnection(broker.host, broker.port)
    start = _end_offset(conn)
    first = [os.urandom(100_000) for _ in range(4)]
    second = [os.urandom(90_000) for _ in range(2)]
    frames = [_produce_frame(conn, first), _produce_frame(conn, second), _metadata_frame(conn)]
    assert len(frames[0]) > len(frames[1]) > RECEIVE_BUFFER
    stream = b"".join(frames)
    for at in range(0, len(stream), 7_777):
        conn.send_bytes(stream[at:at + 7_777])
    base = conn.correlation_id - 3
    produced_a, produced_b, metadata = _answers(conn, [
        (ApiKey.PRODUCE, 9, base + 1), (ApiKey.PRODUCE, 9, base + 2),
        (ApiKey.METADATA, 12, base + 3)])
    for answer in (produced_a, produced_b):
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert TOPIC in {t.name for t in metadata.topics}
    conn.close()
    assert _read_values(broker, 6, start) == first + second


def _fetch_frames(conn: RawConnection, count: int) -> list[bytes]:
    """Fetches of an empty partition that each wait 20 ms for data (long polls)."""
    module = __import__("kio.schema.fetch.v11.request", fromlist=["x"])
    frames = []
    for _ in range(count):
        req = module.FetchRequest(
            replica_id=i32(-1), max_wait=datetime.timedelta(milliseconds=20), min_bytes=i32(1),
            max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
            session_epoch=i32(-1), topics=(module.FetchTopic(topic="quiet", partitions=(
                module.FetchPartition(partition=i32(0), current_leader_epoch=i32(-1),
                                      fetch_offset=i64(0), log_start_offset=i64(-1),
                                      partition_max_bytes=i32(1 << 20)),)),),
            forgotten_topics_data=(), rack_id="")
        frames.append(conn.frame(ApiKey.FETCH, 11, req))
    return frames


@pytest.mark.parametrize("half_close", [False, True], ids=["open", "half-closed"])
def test_more_pipelined_requests_than_max_in_flight(broker, half_close):
    """Long-polling fetches wait, so their answers pile up: reading pauses at MAX_IN_FLIGHT with
    the remaining frames already received, and resumes as the waits end. A client that shuts
    its side down after sending still gets every answer, then the broker closes."""
    conn = RawConnection(broker.host, broker.port, timeout=30)
    count = MAX_IN_FLIGHT + 36
    frames = _fetch_frames(conn, count)
    frames.append(_metadata_frame(conn))
    conn.send_bytes(b"".join(frames))
    if half_close:
        conn.sock.shutdown(1)
    answers = _answers(conn, [(ApiKey.FETCH, 11, i + 1) for i in range(count)]
                       + [(ApiKey.METADATA, 12, count + 1)])
    assert all(a.error_code == ErrorCode.none for a in answers[:count])
    assert all(a.responses[0].partitions[0].error_code == ErrorCode.none for a in answers[:count])
    assert "quiet" in {t.name for t in answers[-1].topics}
    if half_close:
        assert conn.is_closed_by_peer()
    conn.close()


def test_a_large_frame_after_a_large_one_is_read_in_place_from_its_first_byte():
    """After a large frame the connection reads the next frame's size alone: a large frame that
    follows goes into the buffer for large frames from its first byte, none of it through the
    receive buffer (what was read there was copied over: up to 64 KiB per request). A small frame
    after it is read as before. Driven as the transport drives a connection: each read fills what
    get_buffer offers, as far as the stream goes."""
    import asyncio

    from exactly.protocol.framing import RequestHeader, encode_request
    from exactly.server.auth import ListenerRuntime
    from exactly.server.connection_limits import ConnectionLimits
    from exactly.server.network import Connection, Turns
    from exactly.testing import broker_in_process

    class Transport:
        def __init__(self) -> None:
            self.written: list[bytes] = []

        def get_extra_info(self, name: str, default: object = None) -> object:
            return ("127.0.0.1", 1) if name == "peername" else default

        def write(self, data: bytes) -> None:
            self.written.append(data)

        def is_closing(self) -> bool:
            return False

        def get_write_buffer_size(self) -> int:
            return 0

        def set_write_buffer_limits(self, high: int) -> None: ...
        def pause_reading(self) -> None: ...
        def resume_reading(self) -> None: ...

    module = __import__("kio.schema.produce.v9.request", fromlist=["x"])
    values = [[os.urandom(150_000)], [os.urandom(120_000)]]

    def produce(correlation_id: int, batch_values: list[bytes]) -> bytes:
        records = build_batch([Record(None, v) for v in batch_values], timestamp=1_700_000_000_000)
        req = module.ProduceRequest(
            transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
            topic_data=(module.TopicProduceData(name=TOPIC, partition_data=(
                module.PartitionProduceData(index=i32(0), records=records),)),))
        return encode_request(RequestHeader(ApiKey.PRODUCE, 9, correlation_id, "t"), req)

    metadata = request_class(ApiKey.METADATA, 12)(topics=None, allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False)
    frames = [produce(1, values[0]), produce(2, values[1]),
              encode_request(RequestHeader(ApiKey.METADATA, 12, 3, "t"), metadata)]

    async def scenario() -> None:
        async with broker_in_process({"log.flush.policy": "os"}) as services:
            services.logs.create_topic(TOPIC, 1)
            conn = Connection(services, ListenerRuntime("PLAINTEXT", "127.0.0.1", 0), set(),
                              ConnectionLimits(100, 100, {}), Turns())
            transport = Transport()
            conn.connection_made(transport)
            through_receive_buffer: list[int] = []  # per frame: its bytes read into the receive buffer
            for frame in frames:
                through_receive_buffer.append(0)
                at = 0
                while at < len(frame):
                    view = conn.get_buffer(-1)
                    n = min(len(view), len(frame) - at)
                    view[:n] = frame[at:at + n]
                    if view.obj is conn._buffer:
                        through_receive_buffer[-1] += n
                    view.release()
                    conn.buffer_updated(n)
                    at += n
            assert [decode_response(k, v, answer[4:])[0] for (k, v), answer in zip(
                [(ApiKey.PRODUCE, 9), (ApiKey.PRODUCE, 9), (ApiKey.METADATA, 12)],
                transport.written, strict=True)] == [1, 2, 3]
            first, second, small = through_receive_buffer
            assert first > 4  # the first large frame starts in the receive buffer
            assert second == 4  # its size only: the rest went straight into the large buffer
            assert small == len(frames[2])
            stored = services.logs.get_log(TOPIC, 0).read(0, 1 << 20)
            assert values[0][0] in stored and values[1][0] in stored

    asyncio.run(scenario())
