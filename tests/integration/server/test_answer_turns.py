"""A handler that suspended has its answer written in its task's last step (issue 19): not from a
done callback one loop turn later, and before any task it started takes a step; so EndTxn's
answer leaves before the transaction driver appends the markers. Answers keep request order."""

from __future__ import annotations

import asyncio
import socket
import struct
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer

from exactly.protocol import fast_responses
from exactly.protocol.apis import ApiKey, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import RequestHeader, encode_request
from exactly.server import network
from exactly.server.broker import Broker
from exactly.server.config import BrokerConfig
from exactly.server.connection_limits import ConnectionLimits
from exactly.server.transactions import TransactionDriver
from tests.support import create_topic


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_end_txn_is_answered_before_its_markers_are_appended(tmp_path, monkeypatch):
    """In the broker's process under fsync, where EndTxn waits for PrepareCommit's sync: the
    order of the EndTxn answers' writes and of the markers' appends, for confluent-kafka's
    sequential transactions."""
    events: list[str] = []
    end_txns: set[tuple[object, int]] = set()  # (connection's session, correlation id) of each
    handle_end_txn = network.HANDLERS[ApiKey.END_TXN]

    async def end_txn(ctx, request):
        end_txns.add((ctx.session, ctx.correlation_id))
        return await handle_end_txn(ctx, request)

    write, write_markers = network.Connection._write, TransactionDriver.write_markers

    def recording_write(self, frame):
        answering = (self.session, struct.unpack_from(">i", frame, 4)[0])
        if isinstance(frame, bytes) and answering in end_txns:
            events.append("EndTxn answer")
        return write(self, frame)

    def recording_markers(self, *args, **kwargs):
        events.append("markers")
        return write_markers(self, *args, **kwargs)

    monkeypatch.setitem(network.HANDLERS, ApiKey.END_TXN, end_txn)
    monkeypatch.setattr(network.Connection, "_write", recording_write)
    monkeypatch.setattr(TransactionDriver, "write_markers", recording_markers)
    port = _free_port()
    config = BrokerConfig.from_sources(None, {
        "log.dirs": str(tmp_path), "log.flush.policy": "fsync",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}"})

    def transactions() -> None:
        bootstrap = f"127.0.0.1:{port}"
        create_topic(bootstrap, "turns")
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-turns",
                             "linger.ms": 0})
        producer.init_transactions(30)
        for i in range(5):
            producer.begin_transaction()
            producer.produce("turns", value=f"v{i}")
            producer.commit_transaction(30)

    async def main() -> None:
        broker = Broker(config)
        await broker.start()
        try:
            await asyncio.to_thread(transactions)
            await broker.services.transactions.wait_for_all_markers()
        finally:
            await broker.stop()

    asyncio.run(main())
    assert events == ["EndTxn answer", "markers"] * 5


class _Transport:
    """Records the correlation ids of the answers written."""

    def __init__(self) -> None:
        self.answers: list[int] = []

    def write(self, frame: bytes) -> None:
        self.answers.append(struct.unpack_from(">i", frame, 4)[0])

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("slow_first_done", [True, False])
def test_answers_keep_request_order_around_a_suspended_handler(monkeypatch, slow_first_done):
    """A suspended EndTxn, then a fast one (answered inline) and a second suspended one on the
    same connection: the answers go out in request order, whichever handler finishes first."""
    releases: dict[int, asyncio.Future[None]] = {}

    async def end_txn(ctx, request):
        if request.producer_id in releases:
            await releases[request.producer_id]
        return fast_responses.end_txn(ctx.api_version, ErrorCode.none)

    monkeypatch.setitem(network.HANDLERS, ApiKey.END_TXN, end_txn)
    services = SimpleNamespace(config={"socket.request.max.bytes": 1 << 20,
                                       "sasl.server.max.receive.size": 1 << 16,
                                       "metrics.listen": None})
    session = SimpleNamespace(raw_tokens_expected=lambda: False, authenticated=True,
                              close_after_response=False, principal="User:ANONYMOUS")

    def frame(correlation_id: int, producer_id: int) -> bytes:
        request = request_class(ApiKey.END_TXN, 3)(
            transactional_id="t", producer_id=producer_id, producer_epoch=0, committed=True)
        sized = encode_request(RequestHeader(ApiKey.END_TXN, 3, correlation_id, "c"), request)
        return sized[4:]  # as _take_frames hands it over: without its size

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        releases.update({1: loop.create_future(), 3: loop.create_future()})
        conn = network.Connection(services, SimpleNamespace(name="PLAINTEXT"), set(),
                                  ConnectionLimits(10, 10, {}), network.Turns())
        conn.transport, conn.session = _Transport(), session
        for correlation_id, producer_id in ((11, 1), (12, 2), (13, 3)):
            assert conn._dispatch(frame(correlation_id, producer_id))
        assert conn.transport.answers == []  # the fast answer waits for the one before it
        first, last = (releases[1], releases[3]) if slow_first_done else (releases[3], releases[1])
        first.set_result(None)
        for _ in range(3):
            await asyncio.sleep(0)
        last.set_result(None)
        for _ in range(3):
            await asyncio.sleep(0)
        return conn.transport.answers

    assert asyncio.run(main()) == [11, 12, 13]
