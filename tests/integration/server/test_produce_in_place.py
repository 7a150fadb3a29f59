"""Produce requests decoded in place (issue 19, broker CPU per GB produced): the records of a
large Produce go from the connection's receive buffer to the segment file without a copy.

The decoder is checked against kio's (the oracle) on every version, with tagged fields, null
fields, negative lengths and truncations; the broker's use of it over TCP with pipelined large
requests, also while handlers wait for their fsync or are paused before they append (their
buffer is then lent to them), reading every byte back; and, in the broker's own process, that a
large Produce is no longer copied (tracemalloc).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from exactly.protocol.framing import MalformedRequest, decode_request
from exactly.protocol.primitives import write_uvarint
from exactly.protocol.produce_request import decode_produce_in_place
from exactly.testing import EmbeddedBroker
from tests.support import create_topic

VERSIONS = range(3, 14)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    raw = None if value is None else value.encode()
    if flexible:
        write_uvarint(out, 0 if raw is None else len(raw) + 1)
    else:
        out += struct.pack(">h", -1 if raw is None else len(raw))
    out += raw or b""


def _tags(out: bytearray, flexible: bool) -> None:
    if flexible:
        out += b"\0"  # no tagged fields


def _count(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += struct.pack(">i", n)


def encode(version: int, txn_id: str | None,
           topics: list[tuple[Any, list[tuple[int, bytes | None]]]]) -> bytes:
    """A Produce request frame body (header included, size prefix not), encoded by hand."""
    flexible = version >= 9
    out = bytearray(struct.pack(">hhi", 0, version, 7))
    out += struct.pack(">h", 6) + b"client"
    _tags(out, flexible)
    _string(out, txn_id, flexible)
    out += struct.pack(">hi", -1, 1500)
    _count(out, len(topics), flexible)
    for topic, partitions in topics:
        if version >= 13:
            out += topic.bytes
        else:
            _string(out, topic, flexible)
        _count(out, len(partitions), flexible)
        for index, records in partitions:
            out += struct.pack(">i", index)
            if flexible:
                write_uvarint(out, 0 if records is None else len(records) + 1)
            else:
                out += struct.pack(">i", -1 if records is None else len(records))
            out += records or b""
            _tags(out, flexible)
        _tags(out, flexible)
    _tags(out, flexible)
    return bytes(out)


def _plain(request: Any) -> Any:
    """The request as nested tuples, records as bytes: comparable across the two decoders."""
    return (request.transactional_id, request.acks, request.timeout, tuple(
        (getattr(t, "topic_id", None), getattr(t, "name", None),
         tuple((p.index, None if p.records is None else bytes(p.records))
               for p in t.partition_data))
        for t in request.topic_data))


def _sample(version: int, rng: random.Random) -> bytes:
    topics = []
    for n in range(rng.randint(1, 3)):
        topic = uuid.UUID(int=rng.getrandbits(128)) if version >= 13 else f"tópico-{n}"
        partitions = [(rng.randint(0, 9), None if rng.random() < 0.2 else rng.randbytes(
            rng.randint(0, 300))) for _ in range(rng.randint(1, 3))]
        topics.append((topic, partitions))
    return encode(version, None if rng.random() < 0.3 else "txn-é", topics)


@pytest.mark.parametrize("version", VERSIONS)
def test_same_request_as_kio(version: int) -> None:
    rng = random.Random(version)
    for _ in range(30):
        frame = _sample(version, rng)
        if version >= 9 and rng.random() < 0.3:  # kio refuses tagged fields Produce lacks
            tagged = frame[:-1] + b"\x01\x05\x01x"
            with pytest.raises(MalformedRequest):
                decode_request(tagged)
            with pytest.raises(MalformedRequest, match="tagged fields"):
                decode_produce_in_place(memoryview(tagged))
        header, mine = decode_produce_in_place(memoryview(frame))
        kio_header, theirs = decode_request(frame)
        assert header == kio_header
        assert type(mine) is type(theirs)
        assert _plain(mine) == _plain(theirs)
    zero_id = encode(version, None, [(uuid.UUID(int=0) if version >= 13 else "t", [(0, b"")])])
    assert _plain(decode_produce_in_place(memoryview(zero_id))[1]) == _plain(
        decode_request(zero_id)[1])


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_frames_refused_as_kio_refuses_them(version: int) -> None:
    frame = _sample(version, random.Random(100 + version))
    for cut in range(len(frame)):
        short = frame[:cut]
        try:
            decode_request(short)
        except MalformedRequest:
            with pytest.raises(MalformedRequest):
                decode_produce_in_place(memoryview(short))
        else:  # what kio accepts, this decoder reads the same way
            assert _plain(decode_produce_in_place(memoryview(short))[1]) == _plain(
                decode_request(short)[1])


def test_records_are_views_of_the_frame_not_copies() -> None:
    """The finding: kio copies every records field into a new bytes object."""
    payload = bytes(range(256)) * 4096  # 1 MiB
    frame = bytearray(encode(9, None, [("t", [(0, payload), (1, payload)])]))
    _header, request = decode_produce_in_place(memoryview(frame).toreadonly())
    for pdata in request.topic_data[0].partition_data:
        assert isinstance(pdata.records, memoryview) and pdata.records.obj is frame
        assert pdata.records.readonly and pdata.records == payload


@pytest.mark.parametrize("field", ["records", "transactional_id"])
def test_negative_lengths_other_than_null_are_malformed(field: str) -> None:
    if field == "records":
        frame = encode(8, None, [("t", [(0, None)])]).replace(b"\xff" * 4, b"\xff\xff\xff\xfe")
    else:
        frame = encode(8, "ab", [("t", [(0, b"")])]).replace(b"\x00\x02ab", b"\xff\xfeab")
    with pytest.raises(MalformedRequest):
        decode_request(frame)
    with pytest.raises(MalformedRequest, match="negative"):
        decode_produce_in_place(memoryview(frame))


def test_bad_utf8_and_null_arrays_are_malformed() -> None:
    bad_name = encode(8, None, [("t", [(0, b"")])]).replace(b"\x00\x01t", b"\x00\x01\xff")
    with pytest.raises(MalformedRequest, match="UTF-8"):
        decode_produce_in_place(memoryview(bad_name))
    null_topics = encode(8, None, []).replace(b"\x00\x00\x00\x00", b"\xff\xff\xff\xff")
    with pytest.raises(MalformedRequest, match="null array"):
        decode_produce_in_place(memoryview(null_topics))


# -- over TCP -----------------------------------------------------------------------------------

RECORD = 64 * 1024  # batches of several hundred KiB: frames read in place (network.py)


def _produce_and_read_back(broker: EmbeddedBroker, topic: str, count: int) -> None:
    """Pipelined large Produce requests (several in flight), every record read back intact."""
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, "batch.size": 300_000,
                         "max.in.flight.requests.per.connection": 5})
    values = [random.Random(n).randbytes(RECORD) for n in range(count)]
    errors: list[object] = []
    for n, value in enumerate(values):
        producer.produce(topic, value, key=str(n).encode(), partition=n % 2,
                         on_delivery=lambda err, _m: err is not None and errors.append(err))
    assert producer.flush(60) == 0 and errors == []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "check.crcs": True})
    consumer.subscribe([topic])
    got: dict[int, bytes] = {}
    for _ in range(200):
        for m in consumer.consume(100, 0.5):
            assert m.error() is None, m.error()
            got[int(m.key())] = m.value()
        if len(got) == count:
            break
    consumer.close()
    assert sorted(got) == list(range(count))
    assert all(got[n] == values[n] for n in range(count))
    # A batch overwritten under its handler fails its CRC check and the producer's retry hides
    # it: the broker's log tells.
    assert "refused" not in broker.log_text(), broker.log_tail(20)


@pytest.mark.broker_settings({"log.flush.policy": "os"})
def test_large_pipelined_produces(broker: EmbeddedBroker) -> None:
    _produce_and_read_back(broker, "in-place-os", 120)


@pytest.mark.broker_settings({"log.flush.policy": "fsync"})
def test_large_produces_waiting_for_fsync_keep_their_bytes(broker: EmbeddedBroker) -> None:
    """Handlers wait for their fsync while the next frames arrive: each keeps its buffer."""
    _produce_and_read_back(broker, "in-place-fsync", 120)


def test_large_produces_paused_before_their_append_keep_their_bytes(broker_factory: Any) -> None:
    """Handlers suspended before they append (as when a transaction's markers are being written)
    while the next frames arrive: each reads its records later from the buffer it was lent."""
    broker = broker_factory(settings={"log.flush.policy": "os"},
                            env={**os.environ,
                                 "EXACTLY_FAILPOINTS": "produce.before_append=pause:0.2"})
    _produce_and_read_back(broker, "in-place-paused", 60)


def test_malformed_large_produce_closes_the_connection(broker: EmbeddedBroker) -> None:
    body = encode(9, None, [("t", [(0, bytes(200_000))])])
    body = body[:-10]  # the records run past the end of the frame
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert s.recv(100) == b""  # closed, no answer



# -- in the broker's own process: what a large Produce allocates ---------------------------------

def _produce_frame(correlation_id: int, records: bytes) -> bytes:
    body = bytearray(encode(9, None, [("t", [(0, records)])]))
    struct.pack_into(">i", body, 4, correlation_id)
    return struct.pack(">i", len(body)) + bytes(body)


def _answers(sock: socket.socket, frames: list[bytes]) -> None:
    """Send each frame and read its answer (the caller checks the log for the appends)."""
    for frame in frames:
        sock.sendall(frame)
        size = struct.unpack(">i", _exactly(sock, 4))[0]
        answer = _exactly(sock, size)
        assert struct.unpack_from(">i", answer)[0] == struct.unpack_from(">i", frame, 8)[0]


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


def test_a_large_produce_is_not_copied_on_its_way_to_the_log(tmp_path: Any) -> None:
    """The finding: kio copied the records of every Produce (a megabyte here) into a new bytes
    object before the log wrote them. Now the broker allocates next to nothing per request.
    (tracemalloc sees what Python allocates, kio's copies included.)"""
    import asyncio
    import threading
    import tracemalloc

    from exactly.protocol.records import Record, build_batch
    from exactly.server.broker import Broker
    from exactly.server.config import BrokerConfig

    batch = build_batch([Record(None, bytes(900 * 1024))], timestamp=1)
    frames = [_produce_frame(n, batch) for n in range(8)]

    async def scenario() -> int:
        config = BrokerConfig.from_sources(None, {
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.flush.policy": "os",
            "log.dirs": str(tmp_path)})
        broker = Broker(config)
        host, port = await broker.start()
        try:
            broker.services.logs.create_topic("t", 1)
            peak: list[int] = []

            def client() -> None:
                with socket.create_connection((host, port), timeout=30) as sock:
                    _answers(sock, frames[:2])  # the connection's buffers grow to their size
                    tracemalloc.start()
                    try:
                        _answers(sock, frames[2:])
                        peak.append(tracemalloc.get_traced_memory()[1])
                    finally:
                        tracemalloc.stop()

            thread = threading.Thread(target=client)
            thread.start()
            while thread.is_alive():
                await asyncio.sleep(0.01)
            thread.join()
            assert broker.services.logs.get_log("t", 0).high_watermark == len(frames)
            return peak[0]
        finally:
            await broker.stop()

    peak = asyncio.run(scenario())
    assert peak < 256 * 1024, f"{peak} bytes allocated at the peak of six 900 KiB Produce requests"
