"""The descriptor reserve (connection_limits.py, FD_RESERVE): whatever `max.connections` says,
clients may use the broker process's descriptor limit less the reserve, which the broker keeps for
its own files. A broker process started with a small limit (RLIMIT_NOFILE) is filled with idle
connections until it turns one away; with every one of them still open, it appends with acks=all
(answered once synced: log.flush.policy=fsync, the default), rolls segments, and, once a few idle
connections are closed, a consumer reads everything back.

Without the reserve the broker serves connections until its descriptors run out, and then cannot
roll a segment: the Produce that rolls one fails (EMFILE opening the sealed segment's index) and
the producer's connection is closed.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import sys
import time
from importlib import import_module
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kio.static.primitive import i16, i32

from exactly.protocol.apis import ApiKey, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import RequestHeader, encode_request
from exactly.protocol.records import Record, build_batch
from exactly.server.connection_limits import FD_RESERVE
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic

NOFILE = FD_RESERVE + 188  # the broker process's descriptor limit: room for 188 clients
TOPIC = "reserve"
SEGMENT_BYTES = 64 * 1024
RECORDS = 120  # of VALUE_BYTES, a batch each: 7 to a segment
VALUE_BYTES = 8 * 1024
# Starts the broker's command with its descriptor limit lowered (soft and hard), as a
# `LimitNOFILE=` of a service manager would.
_LIMITED = ("import os, resource, sys; n = int(sys.argv[1]); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])")


class LimitedBroker(EmbeddedBroker):
    """A broker process whose RLIMIT_NOFILE is `nofile`."""

    def __init__(self, nofile: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.nofile = nofile

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", _LIMITED, str(self.nofile), *super().command(port)]


def api_versions_frame() -> bytes:
    request = request_class(ApiKey.API_VERSIONS, 3)(client_software_name="reserve",
                                                    client_software_version="1")
    return encode_request(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "reserve"), request)


def served(sock: socket.socket) -> bool | None:
    """Ask ApiVersions on a new connection: True if answered, False if the broker closed it
    unanswered (turned away), None if nothing came back at all (never accepted)."""
    sock.sendall(api_versions_frame())
    try:
        data = sock.recv(4)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return False
    return bool(data)


def produce(conn: RawConnection, value: bytes) -> ErrorCode:
    m = import_module("kio.schema.produce.v9.request")
    batch = build_batch([Record(None, value)], timestamp=1_700_000_000_000)
    answer = conn.request(ApiKey.PRODUCE, 9, transactional_id=None, acks=i16(-1),
                          timeout=datetime.timedelta(seconds=30), topic_data=(m.TopicProduceData(
                              name=TOPIC, partition_data=(m.PartitionProduceData(
                                  index=i32(0), records=batch),)),))
    return ErrorCode(answer.responses[0].partition_responses[0].error_code)


def read_back(bootstrap: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reserve",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_clients_cannot_take_the_descriptors_the_broker_keeps(tmp_path: Path) -> None:
    with LimitedBroker(NOFILE, data_dir=tmp_path / "data") as broker:
        assert broker.process is not None
        limits = Path(f"/proc/{broker.process.pid}/limits").read_text()
        assert any(line.startswith("Max open files") and line.split()[3:5] == [str(NOFILE)] * 2
                   for line in limits.splitlines()), limits
        create_topic(broker.bootstrap, TOPIC, config={"segment.bytes": str(SEGMENT_BYTES)})
        values = [bytes([i]) * VALUE_BYTES for i in range(RECORDS)]
        idle: list[socket.socket] = []
        with contextlib.ExitStack() as held:
            producer = held.enter_context(contextlib.closing(RawConnection(broker.host,
                                                                           broker.port)))
            assert produce(producer, values[0]) == ErrorCode.none
            # Idle connections until one is not served (NOFILE of them at most: the broker
            # cannot serve more).
            last: bool | None = True
            while last and len(idle) < NOFILE:
                sock = held.enter_context(socket.create_connection((broker.host, broker.port),
                                                                   timeout=10))
                last = served(sock)
                if last:
                    idle.append(sock)

            # With every connection it serves still open, it appends (answered once synced)
            # and rolls segments: the descriptors it kept are enough for its files.
            answers = [produce(producer, value) for value in values[1:]]
            assert set(answers) == {ErrorCode.none}, answers
            segments = sorted((broker.data_dir / f"{TOPIC}-0").glob("*.log"))
            assert len(segments) >= RECORDS * VALUE_BYTES // SEGMENT_BYTES, segments

            assert last is False, ("the broker never turned a connection away: "
                                   + ("the next one was never answered" if last is None
                                      else f"it served {len(idle)} idle connections"))
            # It served clients up to its limit less the reserve (the producer, the idle ones,
            # and maybe a connection of create_topic's admin client not yet seen closed).
            assert NOFILE - FD_RESERVE - 3 <= len(idle) + 1 <= NOFILE - FD_RESERVE, len(idle)

            for sock in idle[:10]:  # room for a consumer
                sock.close()
            assert read_back(broker.bootstrap, RECORDS) == values
