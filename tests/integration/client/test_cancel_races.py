"""A cancellation of Exactly's client calls is never lost (Python 3.11's asyncio traps), over TCP
against a real broker where the race can be reached that way.

Two patterns lost a cancellation, both now in `exactly.client._loop` (`wait_event`,
`stop_tasks`):
- `asyncio.wait_for` returns instead of raising when the waiting task is cancelled in the step
  its awaitable completes (fixed in 3.12): `BrokerConnection.connect` handed a connection to a
  caller cancelled as it opened; `Fetcher.wait_for_data` (a poll) went on after its cancel.
- `with suppress(CancelledError): await task`, stopping a child task, also swallows a
  cancellation of the caller: a close() (or commit) cancelled as it stopped its child went on
  as if it had not been, and close()'s bound (`bounded_close`) did not stop it. A session's
  close() cancelled there still closes its connections, as do a consumer's, a share
  consumer's and a producer's (`close_in_order`).

Each test cancels the caller in the same step as the thing it waits for ends, through the real
code paths: a done callback on the child task (or on the real TCP connect) cancels the caller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from exactly.client._loop import stop_tasks, wait_event
from exactly.client.aio import Consumer, Producer, ShareConsumer
from exactly.client.connection import BrokerConnection
from exactly.client.session import AsyncTransactionSession
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS, create_topic, produce


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={**SETTINGS, "group.initial.rebalance.delay.ms": 0}) as b:
        create_topic(b, "races")
        yield b


def _cancel_when_done(child: asyncio.Task[Any] | None, caller: asyncio.Task[Any]) -> None:
    """Cancel `caller` in the step `child` ends, before `caller` (waiting for it) runs again."""
    assert child is not None and not child.done(), "no running child task to race with"
    child.add_done_callback(lambda _: caller.cancel())


async def _until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"{what} not after 20 s"
        await asyncio.sleep(0.02)


async def _is_cancelled(task: asyncio.Task[Any]) -> bool:
    """Whether `task` ended cancelled (rather than going on and returning)."""
    done, _ = await asyncio.wait({task}, timeout=20)
    assert done, "the cancelled call did not end in 20 s"
    return task.cancelled()


async def _close_cancelled(close: Callable[[], Awaitable[object]], child: asyncio.Task[Any] | None,
                           connections: list[BrokerConnection]) -> tuple[bool, list[bool]]:
    """Run `close()`, cancelled in the step `child` ends: whether it ended cancelled, and whether
    each of `connections` is closed afterwards."""
    closing = asyncio.create_task(close())
    _cancel_when_done(child, closing)
    return await _is_cancelled(closing), [c.closed for c in connections]


# -- the helpers, on plain asyncio ----------------------------------------------------------------

def test_wait_event_raises_a_cancel_that_comes_as_the_event_is_set() -> None:
    async def main() -> bool:
        event = asyncio.Event()
        waiter = asyncio.create_task(wait_event(event, 10))
        await asyncio.sleep(0)  # waiter waits on the event
        event.set()
        waiter.cancel()  # the same step
        return await _is_cancelled(waiter)

    assert asyncio.run(main())


def test_stop_tasks_swallows_the_childs_cancel_but_not_the_callers() -> None:
    async def main() -> tuple[bool, bool]:
        child = asyncio.create_task(asyncio.sleep(10))
        await stop_tasks([child, None])  # the child's own CancelledError: swallowed
        stopped = child.cancelled()
        child = asyncio.create_task(asyncio.sleep(10))
        stopping = asyncio.create_task(stop_tasks([child]))
        _cancel_when_done(child, stopping)
        return stopped, await _is_cancelled(stopping)

    assert asyncio.run(main()) == (True, True)


# -- over TCP ------------------------------------------------------------------------------------

def test_connect_cancelled_as_it_opens(broker: EmbeddedBroker) -> None:
    """connect() cancelled in the step its TCP connection opens raises CancelledError and closes
    the connection, instead of returning it to a caller that was cancelled."""
    host, port = broker.bootstrap.rsplit(":", 1)

    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        real_create_connection = loop.create_connection
        opened: list[asyncio.BaseTransport] = []

        async def create_connection(*args: Any, **kwargs: Any) -> Any:
            transport, protocol = await real_create_connection(*args, **kwargs)
            opened.append(transport)
            connecting.cancel()  # the connection is open: cancel in this very step
            return transport, protocol

        loop.create_connection = create_connection  # type: ignore[method-assign]
        connecting = asyncio.create_task(BrokerConnection.connect(host, int(port)))
        cancelled = await _is_cancelled(connecting)
        closed = opened[0].is_closing()
        if not cancelled:
            await connecting.result().close()
        return cancelled, closed

    assert asyncio.run(main()) == (True, True)


def test_consumer_close_cancelled_as_its_membership_task_ends(broker: EmbeddedBroker) -> None:
    async def main() -> bool:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "races-classic"})
        consumer.subscribe(["races"])
        await _until(consumer.assignment, "an assignment")
        closing = asyncio.create_task(consumer.close(timeout=None))
        _cancel_when_done(consumer._membership._task, closing)  # type: ignore[union-attr]
        return await _is_cancelled(closing)

    assert asyncio.run(main())


def test_share_consumer_close_cancelled_as_its_membership_task_ends(
        broker: EmbeddedBroker) -> None:
    async def main() -> bool:
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap,
                                  "group.id": "races-share"})
        consumer.subscribe(["races"])
        await _until(consumer.assignment, "an assignment")
        closing = asyncio.create_task(consumer.close(timeout=None))
        _cancel_when_done(consumer._membership._task, closing)
        return await _is_cancelled(closing)

    assert asyncio.run(main())


def test_consumer_close_cancelled_as_its_fetcher_ends(broker: EmbeddedBroker) -> None:
    async def main() -> tuple[bool, list[bool]]:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap})
        consumer.assign([("races", 0)])
        await consumer.poll(timeout_ms=10)  # starts the fetcher's task
        return await _close_cancelled(lambda: consumer.close(timeout=None), consumer._fetcher._task,
                                      list(consumer._cluster._connections.values()))

    cancelled, closed = asyncio.run(main())
    assert cancelled and closed and all(closed)  # the connections are closed all the same


def test_producer_close_cancelled_as_its_sender_ends(broker: EmbeddedBroker) -> None:
    """close() cancelled as it stops the sender raises CancelledError, and still closes the
    producer's connections."""
    async def main() -> tuple[bool, list[bool]]:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        await producer.send("races", b"v", partition=0)
        await producer.flush()
        return await _close_cancelled(producer.close, producer._task,
                                      list(producer._cluster._connections.values()))

    cancelled, closed = asyncio.run(main())
    assert cancelled and closed and all(closed)


def test_poll_cancelled_as_its_data_arrives(broker: EmbeddedBroker) -> None:
    """A poll cancelled in the step its fetch's records arrive either ends cancelled or had
    returned before the cancel (cancel() says which): a cancel that was taken and lost made
    poll() return the records to a caller that had given up on them."""
    create_topic(broker, "races-poll")

    async def main() -> tuple[bool, bool, int]:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "fetch.max.wait.ms": 10_000,
                             "auto.offset.reset": "earliest"})
        try:
            consumer.assign([("races-poll", 0)])
            assert await consumer.poll(timeout_ms=10) == []  # a fetch now waits on the broker
            await _until(lambda: consumer._fetcher._inflight, "a fetch in flight")
            (fetch,) = consumer._fetcher._inflight.values()
            polling = asyncio.create_task(consumer.poll(timeout_ms=20_000))
            await asyncio.sleep(0)  # the poll waits for data
            took: list[bool] = []
            fetch.add_done_callback(lambda _: took.append(polling.cancel()))
            produce(broker, "races-poll", [b"one"])  # the fetch answers, and ends
            cancelled = await _is_cancelled(polling)
            records = [] if cancelled else polling.result()
            if cancelled:  # the record is still there for the next poll
                records = await consumer.poll(timeout_ms=10_000)
            return took[0], cancelled, len(records)
        finally:
            await consumer.close()

    took, cancelled, received = asyncio.run(main())
    assert (cancelled, received) == (took, 1)


def test_commit_cancelled_as_its_heartbeat_task_ends(broker: EmbeddedBroker) -> None:
    """A commit cancelled as it stops the transaction's heartbeats (KIP-1309) raises
    CancelledError before EndTxn, instead of committing for a caller that was cancelled."""
    async def main() -> bool:
        session = AsyncTransactionSession({"bootstrap.servers": broker.bootstrap,
                                           "transactional.id": "races-txn",
                                           "transaction.heartbeat.interval.ms": 200})
        try:
            await session.initialize()
            await session.begin_transaction()
            committing = asyncio.create_task(session.commit_transaction())
            _cancel_when_done(session._heartbeats.task, committing)
            return await _is_cancelled(committing)
        finally:
            await session.close()

    assert asyncio.run(main())


def test_session_close_cancelled_as_its_heartbeat_task_ends(broker: EmbeddedBroker) -> None:
    """close() cancelled as it stops the heartbeats raises CancelledError, and still closes the
    session's connections."""
    async def main() -> tuple[bool, list[bool]]:
        session = AsyncTransactionSession({"bootstrap.servers": broker.bootstrap,
                                           "transactional.id": "races-close",
                                           "transaction.heartbeat.interval.ms": 200})
        await session.initialize()
        await session.begin_transaction()
        return await _close_cancelled(session.close, session._heartbeats.task,
                                      list(session._cluster._connections.values()))

    cancelled, closed = asyncio.run(main())
    assert cancelled and closed and all(closed)
