"""The blocking classes' trip to the client's loop thread and back (LoopThread.run, issue 19).

Counted, never timed: the Python calls one trip costs in the two threads (sys.setprofile on
each). asyncio.run_coroutine_threadsafe took 24 in the caller's thread and 65 on the loop (a
concurrent.futures.Future chained to an asyncio one, a Condition, the task's done callbacks);
the lean bridge takes 10 and 7. A waiting caller sleeps in a read of a pipe the loop thread
writes without the GIL, not on a lock (see _Call). And what run_coroutine_threadsafe did, it
still does: the result, the exception, a timeout that leaves the coroutine running, a
cancelled coroutine, a call from the loop's own thread refused.

With transaction version 1 a blocking send() does not wake the loop thread either (it did, for
AddPartitionsToTxn): the commit adds the partition in its own trip, or the linger timer does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from collections import Counter
from types import FrameType
from typing import Any

import pytest

from exactly.client import Producer, TransactionSession
from exactly.client._loop import LoopThread, _Waker
from tests.integration.client.test_session import config, read_committed
from tests.integration.client.test_txn_fast_path import (  # noqa: F401 - fixtures
    TOPIC,
    v1_broker,
    v2_broker,
)

TRIPS = 100
MAX_CALLS_PER_TRIP = 30  # both threads together; run_coroutine_threadsafe: 89


async def _value(value: int) -> int:
    return value


def test_a_trip_to_the_loop_and_back_costs_few_python_calls():
    loop_thread = LoopThread.shared()
    caller = threading.get_ident()
    calls: Counter[str] = Counter()

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            calls["caller" if threading.get_ident() == caller else "loop"] += 1

    loop_thread.run(_value(0))  # the loop thread exists and has run once
    loop_thread.run(_profile_loop(count))
    sys.setprofile(count)
    try:
        results = [loop_thread.run(_value(i)) for i in range(TRIPS)]
    finally:
        sys.setprofile(None)
        loop_thread.run(_profile_loop(None))
    assert results == list(range(TRIPS))
    per_trip = {thread: n / TRIPS for thread, n in calls.items()}
    assert sum(per_trip.values()) <= MAX_CALLS_PER_TRIP, (
        f"Python calls per LoopThread.run: {per_trip}, expected at most {MAX_CALLS_PER_TRIP}")


async def _profile_loop(profile: Any) -> None:
    sys.setprofile(profile)  # on the loop's thread, from its next step on


def test_the_bridge_hands_over_results_errors_timeouts_and_cancellations():
    loop_thread = LoopThread.shared()
    assert loop_thread.run(_value(7)) == 7

    async def fails() -> None:
        raise ValueError("from the loop")
    with pytest.raises(ValueError, match="from the loop"):
        loop_thread.run(fails())

    release = threading.Event()
    finished = threading.Event()

    async def slow() -> None:
        await asyncio.get_running_loop().run_in_executor(None, release.wait)
        finished.set()
    with pytest.raises(TimeoutError):
        loop_thread.run(slow(), timeout=0.05)
    release.set()  # the coroutine went on running after the caller stopped waiting
    assert finished.wait(10)

    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)
    with pytest.raises(concurrent.futures.CancelledError):
        loop_thread.run(cancelled())

    async def nested() -> None:
        loop_thread.run(_value(1))
    with pytest.raises(RuntimeError, match="own event loop"):
        loop_thread.run(nested())


@pytest.mark.skipif(not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/syscall"),
                    reason="reads what a thread sleeps in from Linux's /proc")
def test_a_waiting_caller_sleeps_in_a_read_of_its_pipe():
    """The caller sleeps in read(2) on its thread's pipe, which the loop thread writes without
    holding the GIL (see _Call), not in lock.acquire() (a futex), whose release the loop thread
    made holding the GIL: the caller woke to a GIL still taken and slept again."""
    loop_thread = LoopThread.shared()
    release = threading.Event()
    seen: dict[str, Any] = {}

    async def waits() -> int:
        await asyncio.get_running_loop().run_in_executor(None, release.wait)
        return 5

    def caller() -> None:
        seen["pipe"] = _Waker.of_this_thread()._read
        seen["tid"] = threading.get_native_id()
        seen["result"] = loop_thread.run(waits())
    thread = threading.Thread(target=caller)
    thread.start()
    try:
        for _ in range(10_000):
            if "tid" in seen:
                # "<number> <first argument> ...", or "running": the read's first argument is
                # its file descriptor.
                with open(f"/proc/self/task/{seen['tid']}/syscall") as f:
                    fields = f.read().split()
                if len(fields) > 1 and int(fields[1], 16) == seen["pipe"]:
                    break
            threading.Event().wait(0.001)
        else:
            pytest.fail(f"the waiting caller never slept in a read of its pipe: {fields}")
    finally:
        release.set()
        thread.join(10)
    assert seen["result"] == 5


def test_a_stray_wake_up_does_not_end_a_wait():
    """A wake-up left in the thread's pipe (a wait interrupted by KeyboardInterrupt leaves
    one when its call ends) does not end the next call's wait early."""
    loop_thread = LoopThread.shared()
    _Waker.of_this_thread().wake()

    async def slow() -> int:
        await asyncio.sleep(0.01)
        return 9
    assert loop_thread.run(slow()) == 9
    assert loop_thread.run(_value(3)) == 3


class TripsToTheLoop:
    """The client loop, noting what each call from another thread asks it to run."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.trips: list[str] = []

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> Any:
        self.trips.append(getattr(callback, "__qualname__", repr(callback)))
        return self.loop.call_soon_threadsafe(callback, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loop, name)


@pytest.mark.parametrize("version", ["2", "1"])
def test_a_blocking_transaction_crosses_to_the_loop_thread_once(version, request):
    """begin_transaction() and send() run in the caller's thread; commit_transaction() is the
    one trip (version 1 took two: send() woke the sender for AddPartitionsToTxn)."""
    bootstrap = request.getfixturevalue(f"v{version}_broker").bootstrap
    cfg = config(bootstrap, f"one-trip-v{version}", **{"linger.ms": 60_000})
    transactions = TRIPS // 10
    with TransactionSession(cfg) as session, Producer(cfg, session=session) as producer:
        session.initialize()
        assert session.uses_transaction_v2 is (version == "2")
        session.begin_transaction()  # the first send() sets the sender's linger timer
        producer.send(TOPIC, f"one-trip-v{version}-0", partition=0)
        session.commit_transaction()
        loop_thread, loop = producer._loop, producer._loop.loop
        proxy = TripsToTheLoop(loop)
        loop_thread.loop = producer.aio._loop = proxy  # type: ignore[assignment]
        try:
            sent = []
            for i in range(1, transactions + 1):
                session.begin_transaction()
                sent.append(producer.send(TOPIC, f"one-trip-v{version}-{i}", partition=0))
                session.commit_transaction()
        finally:
            loop_thread.loop = producer.aio._loop = loop
        assert len(proxy.trips) == transactions, (
            f"{len(proxy.trips) / transactions:.1f} trips to the loop thread per transaction: "
            f"{Counter(proxy.trips)}")
        assert all(f.result(0).offset >= 0 for f in sent)
    read_committed(bootstrap, TOPIC, f"one-trip-v{version}-{transactions}")


def test_a_lingering_version_1_batch_is_added_and_sent_without_a_commit(request):
    bootstrap = request.getfixturevalue("v1_broker").bootstrap
    cfg = config(bootstrap, "linger-v1", **{"linger.ms": 1})
    with TransactionSession(cfg) as session, Producer(cfg, session=session) as producer:
        session.initialize()
        for i in range(2):  # the second on a producer that knows the topic and the partition
            session.begin_transaction()
            sent = producer.send(TOPIC, f"linger-v1-{i}", partition=0)
            assert sent.result(30).offset >= 0  # AddPartitionsToTxn then Produce, by the timer
            session.commit_transaction()
    read_committed(bootstrap, TOPIC, "linger-v1-1")
