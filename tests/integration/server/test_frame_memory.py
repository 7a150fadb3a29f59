"""Memory bounded by what clients send, not by what they claim (issue 14, item 2): 1,000
connections each announcing a 100 MB frame leave the broker's memory where it was and a producer
served, on a plain listener and unauthenticated on a SASL one; before authentication a SASL
listener refuses frames over sasl.server.max.receive.size (512 KiB, Kafka's default). Idle
connections cost a few KiB each (before: 62 KB, a 64 KiB receive buffer per connection)."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.framing import RequestHeader, encode_request
from exactly.testing import EmbeddedBroker
from tests.support import create_topic

pytestmark = pytest.mark.serial  # measures the broker: run alone (see tests/conftest.py)

CLAIMED = 100 * 1024 * 1024 - 1  # just under socket.request.max.bytes (100 MiB)
CONNECTIONS = 1000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def claim_big_frames(host: str, port: int) -> list[socket.socket]:
    """Connections that each send a size claiming ~100 MB and the first 8 bytes of a request."""
    held = []
    for _ in range(CONNECTIONS):
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(struct.pack(">i", CLAIMED) + b"\x00\x03\x00\x0c\x00\x00\x00\x01")
        held.append(s)
    return held


def canary(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[object] = []
    for n in range(20):
        producer.produce("canary", f"c{n}".encode(),
                         on_delivery=lambda err, _m: err is not None and errors.append(err))
    assert producer.flush(30) == 0 and errors == []


def test_claimed_sizes_allocate_nothing(broker: EmbeddedBroker) -> None:
    assert broker.process is not None
    create_topic(broker.bootstrap, "canary")
    canary(broker.bootstrap)
    before = rss_mib(broker.process.pid)
    held = claim_big_frames(broker.host, broker.port)
    try:
        time.sleep(1)  # let the broker read what was sent
        canary(broker.bootstrap)
        after = rss_mib(broker.process.pid)
    finally:
        for s in held:
            s.close()
    assert after < 300, f"RSS {before:.0f} MiB -> {after:.0f} MiB"


def test_before_authentication_big_frames_are_refused(broker_factory) -> None:
    broker = broker_factory(settings={"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                      "sasl.enabled.mechanisms": "PLAIN",
                                      "sasl.plain.users": "alice:alice-pw"})
    host, port = broker.listener_addresses["SASL_PLAINTEXT"]
    assert broker.process is not None
    before = rss_mib(broker.process.pid)
    held = claim_big_frames(host, port)
    try:
        for s in held[:20]:  # each is closed by the broker without reading any further
            s.settimeout(10)
            assert s.recv(1) == b""
        after = rss_mib(broker.process.pid)
    finally:
        for s in held:
            s.close()
    assert after < 300, f"RSS {before:.0f} MiB -> {after:.0f} MiB"
    assert "frame size 104857599 outside 0..524288 (sasl.server.max.receive.size)" in \
        broker.log_text()
    sasl = {"bootstrap.servers": f"{host}:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-pw"}
    producer = Producer({**sasl, "acks": "all"})
    errors: list[object] = []
    producer.produce("after-auth", b"x" * 600_000,  # larger than the limit: fine once authenticated
                     on_delivery=lambda err, _m: err is not None and errors.append(err))
    assert producer.flush(30) == 0 and errors == []


def test_idle_connections_cost_little_memory(broker: EmbeddedBroker) -> None:
    """5,000 clients that connect, ask ApiVersions and go quiet; one then sends a large frame,
    so the buffers still grow for a client that talks."""
    assert broker.process is not None
    frame = encode_request(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "idle"),
                           build(request_class(ApiKey.API_VERSIONS, 3),
                                 client_software_name="idle", client_software_version="1"))
    before = rss_mib(broker.process.pid)
    held = []
    try:
        for _ in range(5000):
            s = socket.create_connection((broker.host, broker.port), timeout=10)
            s.sendall(frame)
            held.append(s)
        for s in held:
            assert s.recv(65536), "no ApiVersions answer"
        time.sleep(0.5)
        per_connection_kib = (rss_mib(broker.process.pid) - before) * 1024 / len(held)
        canary(broker.bootstrap)  # large frames too: confluent-kafka batches its produce
    finally:
        for s in held:
            s.close()
    assert per_connection_kib < 16, f"{per_connection_kib:.1f} KiB per idle connection"
