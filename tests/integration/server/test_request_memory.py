"""Bytes of requests waiting for their answers are bounded (issue 14, item 2;
`queued.max.request.bytes`). Produce handlers are made to wait (the fault point
`produce.before_append` paused), so every request read is held until it is answered; 20
connections pipeline 12 requests of 960 KiB each. With no bound the broker holds them all (about
240 MiB more); with a 16 MiB bound connections stop reading while 16 MiB are held (back-pressure
through TCP), and every request is still answered and appended, in order."""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from kio.static.primitive import i16, i32

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.framing import RequestHeader, decode_response, encode_request
from exactly.protocol.records import Record, build_batch
from exactly.server.config import BrokerConfig, ConfigError
from exactly.testing import EmbeddedBroker
from tests.support import create_topic, end_offsets

pytestmark = pytest.mark.serial  # measures the broker: run alone (see tests/conftest.py)

CONNECTIONS = 20
REQUESTS = 12  # per connection: under the 16 MiB a connection may hold on its own
RECORDS = 15  # of 64 KiB per request: just under max.message.bytes (1 MiB)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def produce_frame(correlation_id: int) -> bytes:
    module = __import__(request_class(ApiKey.PRODUCE, 9).__module__, fromlist=["_"])
    records = build_batch([Record(None, bytes(64 * 1024))] * RECORDS, timestamp=1_700_000_000_000)
    data = build(module.TopicProduceData, name="held", partition_data=(
        build(module.PartitionProduceData, index=i32(0), records=records),))
    request = build(request_class(ApiKey.PRODUCE, 9), transactional_id=None, acks=i16(1),
                    timeout=datetime.timedelta(seconds=60), topic_data=(data,))
    return encode_request(RequestHeader(ApiKey.PRODUCE, 9, correlation_id, "held"), request)


def pipeline(host: str, port: int, errors: list[str]) -> None:
    """Send REQUESTS produce requests at once, then read the answers: all in order, no error."""
    with socket.create_connection((host, port), timeout=120) as sock:
        sock.sendall(b"".join(produce_frame(n) for n in range(REQUESTS)))
        reader = sock.makefile("rb")
        for n in range(REQUESTS):
            (size,) = struct.unpack(">i", reader.read(4))
            correlation_id, answer = decode_response(ApiKey.PRODUCE, 9, reader.read(size))
            error = answer.responses[0].partition_responses[0].error_code
            if correlation_id != n or error != 0:
                errors.append(f"answer {correlation_id} (expected {n}): error {error}")


def peak_rss_while(broker: EmbeddedBroker) -> tuple[float, float]:
    """The broker's RSS before, and its peak while the connections pipeline."""
    assert broker.process is not None
    create_topic(broker.bootstrap, "held")
    before = rss_mib(broker.process.pid)
    errors: list[str] = []
    clients = [threading.Thread(target=pipeline, args=(broker.host, broker.port, errors))
               for _ in range(CONNECTIONS)]
    for c in clients:
        c.start()
    peak = before
    while any(c.is_alive() for c in clients):
        peak = max(peak, rss_mib(broker.process.pid))
        time.sleep(0.05)
    assert errors == []
    assert end_offsets(broker.bootstrap, "held", 1) == [CONNECTIONS * REQUESTS * RECORDS]
    return before, peak


@pytest.mark.parametrize("bound", [16 * 1024 * 1024, -1])
def test_requests_held_are_bounded(broker_factory, bound: int) -> None:
    broker = broker_factory(
        settings={"queued.max.request.bytes": bound, "log.flush.policy": "os"},
        env={"EXACTLY_FAILPOINTS": "produce.before_append=pause:0.5"})
    before, peak = peak_rss_while(broker)
    print(f"\nqueued.max.request.bytes={bound}: RSS {before:.0f} -> peak {peak:.0f} MiB")
    if bound > 0:
        assert peak - before < 100, f"RSS grew {peak - before:.0f} MiB under a 16 MiB bound"
    else:  # what the bound prevents: every request read is held at once
        assert peak - before > 150, f"RSS grew only {peak - before:.0f} MiB with no bound"


@pytest.mark.parametrize("value", ["0", "-2", "lots"])
def test_queued_bytes_setting_is_checked(value: str) -> None:
    with pytest.raises(ConfigError, match="queued.max.request.bytes"):
        BrokerConfig.from_sources(None, {"queued.max.request.bytes": value})


def test_no_bound_is_minus_one() -> None:
    assert BrokerConfig.from_sources(None, {"queued.max.request.bytes": "-1"})[
        "queued.max.request.bytes"] == -1
