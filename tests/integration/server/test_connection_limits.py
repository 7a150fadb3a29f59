"""Connection limits with Kafka's keys (issue 14, item 3), over TCP against a broker process:
connections over `max.connections` or `max.connections.per.ip` (with its overrides) are closed as
they come while a transactional producer keeps committing; `connections.max.idle.ms` closes silent
connections and leaves busy ones alone."""

from __future__ import annotations

import socket
import threading
import time

from confluent_kafka import Producer

from exactly.protocol.apis import ApiKey, request_class
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic


def refused(host: str, port: int) -> bool:
    """Connect; True if the broker closes the connection without a word."""
    with socket.create_connection((host, port), timeout=10) as s:
        try:
            return s.recv(1) == b""
        except ConnectionResetError:
            return True


def api_versions(conn: RawConnection) -> None:
    req = request_class(ApiKey.API_VERSIONS, 3)(client_software_name="t",
                                                client_software_version="1")
    conn.send_bytes(conn.frame(ApiKey.API_VERSIONS, 3, req))
    conn.read_response(ApiKey.API_VERSIONS, 3)


def test_max_connections_refuses_the_rest_while_a_producer_commits(broker_factory) -> None:
    broker = broker_factory(settings={"max.connections": "40"})
    create_topic(broker.bootstrap, "busy")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "busy-t"})
    producer.init_transactions(10)
    commits: list[int] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def commit_all_along() -> None:
        try:
            while not stop.is_set():
                producer.begin_transaction()
                producer.produce("busy", b"x")
                producer.commit_transaction(30)
                commits.append(1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    held: list[RawConnection] = []
    sockets: list[socket.socket] = []
    try:
        while True:  # fill up to the limit with connections that answer
            conn = RawConnection(broker.host, broker.port)
            try:
                api_versions(conn)
            except (ConnectionError, OSError, EOFError):
                conn.close()
                break
            held.append(conn)
        assert 30 <= len(held) < 40  # the producer holds the rest
        committer = threading.Thread(target=commit_all_along)
        committer.start()
        before = len(commits)
        # 20,000 attempts, each closed at once. The producer may drop a connection of its own
        # meanwhile (librdkafka lets its bootstrap connection go): a slot freed so is taken by
        # the next attempt, which is then held.
        taken = 0
        for _ in range(20_000):
            s = socket.create_connection((broker.host, broker.port), timeout=10)
            s.settimeout(2)
            try:
                closed = s.recv(1) == b""
            except ConnectionResetError:
                closed = True
            except TimeoutError:
                closed = False
            if closed:
                s.close()
            else:
                taken += 1
                sockets.append(s)
        assert taken <= 3
        time.sleep(0.5)
        stop.set()
        committer.join(60)
        assert failures == [] and len(commits) > before
    finally:
        stop.set()
        for conn in held:
            conn.close()
        for sock in sockets:
            sock.close()
    time.sleep(0.5)  # the held connections are gone: room again
    again = RawConnection(broker.host, broker.port)
    try:
        api_versions(again)
    finally:
        again.close()
    assert "event=connections_refused" in broker.log_text()


def test_per_ip_limit_and_its_override(broker_factory) -> None:
    broker = broker_factory(settings={"max.connections.per.ip": "5"})
    held = [socket.create_connection((broker.host, broker.port)) for _ in range(5)]
    try:
        time.sleep(0.2)
        assert refused(broker.host, broker.port)
    finally:
        for s in held:
            s.close()
    other = broker_factory(settings={"max.connections.per.ip": "5",
                                     "max.connections.per.ip.overrides": "127.0.0.1:8"})
    held = []
    try:
        for _ in range(8):
            conn = RawConnection(other.host, other.port)
            held.append(conn)
            api_versions(conn)
        assert refused(other.host, other.port)
    finally:
        for conn in held:
            conn.close()


def test_idle_connections_are_closed(broker_factory) -> None:
    broker = broker_factory(settings={"connections.max.idle.ms": "1500"})
    silent = socket.create_connection((broker.host, broker.port), timeout=10)
    busy = RawConnection(broker.host, broker.port)
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            api_versions(busy)  # a request every 0.3 s keeps it open
            time.sleep(0.3)
        assert silent.recv(1) == b""  # closed by the broker meanwhile
        api_versions(busy)
    finally:
        silent.close()
        busy.close()
    assert "event=connection_idle_closed" in broker.log_text()


def test_bad_overrides_are_refused_at_start(tmp_path) -> None:
    b = EmbeddedBroker(data_dir=tmp_path / "d",
                       settings={"max.connections.per.ip.overrides": "nohost"})
    try:
        b.start()
    except Exception as exc:  # noqa: BLE001 - BrokerStartError with the broker's message
        assert "max.connections.per.ip.overrides" in str(exc)
    else:
        raise AssertionError("the broker started with a malformed override")
    finally:
        b.close()
