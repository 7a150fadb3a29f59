"""TransactionSession heartbeats (KIP-1309) against Exactly's broker over TCP: seed 004's
"Heartbeat Logic" row (the task's lifecycle follows transaction.session.timeout.ms), a live
session kept open past 3 x the interval, and a worker process killed with SIGKILL or frozen with
SIGSTOP whose transaction is aborted in about 3 x the interval while transaction.timeout.ms is a
minute: its records never reach read_committed."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from exactly.client import Producer
from exactly.client.errors import ConfigError, ProducerFencedError
from exactly.client.session import AsyncTransactionSession, State, TransactionSession
from tests.integration.client.test_session import commit_sentinel, describe, read_committed
from tests.support import create_topic

INTERVAL_MS = 200  # the session timeout is 3 x this: 600 ms
TXN_TIMEOUT_MS = 60_000
ABORTED = ("PrepareAbort", "CompleteAbort")


def hb_config(bootstrap: str, txn_id: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
            "transaction.heartbeat.interval.ms": INTERVAL_MS,
            "transaction.timeout.ms": TXN_TIMEOUT_MS, **extra}


@pytest.fixture
def bootstrap(exactly_broker) -> str:
    return exactly_broker.bootstrap


@pytest.fixture
def topic(bootstrap: str, request: pytest.FixtureRequest) -> str:
    name = f"hb-{request.node.name}".replace("[", "-").replace("]", "")[:100]
    create_topic(bootstrap, name)
    return name


def wait_for_state(bootstrap: str, txn_id: str, states: tuple[str, ...],
                   timeout: float) -> float:
    """Seconds until the coordinator shows the transaction in one of `states`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if describe(bootstrap, txn_id).transaction_state in states:
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{txn_id}: not in {states} after {timeout} s: "
                         f"{describe(bootstrap, txn_id)}")


# -- configuration --------------------------------------------------------------------------------

def test_timing_from_either_setting(bootstrap: str) -> None:
    def timing(**extra: Any) -> tuple[int, int]:
        s = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": "t", **extra})
        try:
            return s.heartbeat_interval_ms, s.session_timeout_ms
        finally:
            s.close()

    assert timing() == (0, -1)  # off unless asked for
    assert timing(**{"transaction.heartbeat.interval.ms": 200}) == (200, 600)
    assert timing(**{"transaction.session.timeout.ms": 900}) == (300, 900)
    assert timing(**{"transaction.session.timeout.ms": 900,
                     "transaction.heartbeat.interval.ms": 100}) == (100, 900)
    assert timing(**{"transaction.session.timeout.ms": -1}) == (0, -1)


@pytest.mark.parametrize(("extra", "message"), [
    ({"transaction.session.timeout.ms": 0}, "use -1 to turn transaction heartbeats off"),
    ({"transaction.session.timeout.ms": -5}, "must be at least -1"),
    ({"transaction.heartbeat.interval.ms": -1}, "must be at least 0"),
    ({"transaction.session.timeout.ms": 300, "transaction.heartbeat.interval.ms": 300},
     "must be lower than transaction.session.timeout.ms"),
])
def test_bad_timing_is_a_clear_error(bootstrap: str, extra: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": "t", **extra})


# -- lifecycle (seed 004: "Heartbeat Logic") -------------------------------------------------------

def test_heartbeat_task_runs_exactly_while_a_transaction_is_open(bootstrap: str, topic: str,
                                                                 ) -> None:
    s = TransactionSession(hb_config(bootstrap, "hb-life"))
    s.initialize()
    assert not s.heartbeating
    for end in (s.commit_transaction, s.abort_transaction):
        s.begin_transaction()
        assert s.heartbeating
        s.add_partitions_to_transaction([(topic, 0)])
        end()
        assert not s.heartbeating
    s.begin_transaction()
    assert s.heartbeating
    s.prepare_transaction()  # a prepared transaction waits for its decision: no heartbeats
    assert not s.heartbeating
    s.abort_transaction()
    s.begin_transaction()
    assert s.heartbeating
    s.close()
    assert not s.heartbeating


def test_no_heartbeat_task_when_off(bootstrap: str) -> None:
    with TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": "hb-off",
                             "transaction.session.timeout.ms": -1}) as s:
        s.initialize()
        s.begin_transaction()
        assert not s.heartbeating
        s.abort_transaction()


def test_resumed_session_heartbeats(bootstrap: str, topic: str) -> None:
    first = TransactionSession(hb_config(bootstrap, "hb-resume"))
    first.initialize()
    first.begin_transaction()
    producer = Producer({"bootstrap.servers": bootstrap}, session=first)
    producer.send(topic, "resumed", key="k")
    producer.flush()
    producer.close()
    first.close()  # the transaction stays open; only heartbeats keep it
    resumed = TransactionSession.resume("hb-resume", first.producer_id, first.producer_epoch,
                                        hb_config(bootstrap, "hb-resume"))
    assert resumed.heartbeating
    time.sleep(5 * INTERVAL_MS / 1000)  # past the session timeout of the first session
    assert describe(bootstrap, "hb-resume").transaction_state == "Ongoing"
    resumed.commit_transaction()
    assert not resumed.heartbeating
    resumed.close()
    commit_sentinel(bootstrap, topic, "hb-resume-sentinel")
    assert read_committed(bootstrap, topic, "sentinel") == ["resumed", "sentinel"]


def test_broker_without_txn_heartbeat_works_as_before(mock_bootstrap: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka's mock cluster has no TxnHeartbeat: no task, a debug log, and heartbeat()
    falls back to the identity check it did before."""
    caplog.set_level(logging.DEBUG, logger="exactly.client")
    with TransactionSession(hb_config(mock_bootstrap, "hb-mock")) as s:
        s.initialize()
        s.begin_transaction()
        assert not s.heartbeating
        s.heartbeat()
        s.abort_transaction()
    assert "event=session_heartbeats_off" in caplog.text


# -- liveness -------------------------------------------------------------------------------------

def test_live_session_stays_open_past_three_intervals(bootstrap: str, topic: str) -> None:
    with TransactionSession(hb_config(bootstrap, "hb-live")) as s:
        s.initialize()
        s.begin_transaction()
        producer = Producer({"bootstrap.servers": bootstrap}, session=s)
        producer.send(topic, "kept", key="k")
        producer.flush()
        time.sleep(10 * INTERVAL_MS / 1000)  # more than three session timeouts
        assert describe(bootstrap, "hb-live").transaction_state == "Ongoing"
        s.heartbeat()
        s.commit_transaction()
        producer.close()
    commit_sentinel(bootstrap, topic, "hb-live-sentinel")
    assert read_committed(bootstrap, topic, "sentinel") == ["kept", "sentinel"]


def test_async_session_heartbeats_on_its_loop(bootstrap: str, topic: str) -> None:
    async def run() -> None:
        s = AsyncTransactionSession(hb_config(bootstrap, "hb-aio"))
        try:
            await s.initialize()
            await s.begin_transaction()
            assert s.heartbeating
            await s.add_partitions_to_transaction([(topic, 0)])
            await asyncio.sleep(5 * INTERVAL_MS / 1000)
            # Resumed on a running loop, a session starts heartbeating by itself.
            resumed = AsyncTransactionSession.resume("hb-aio", s.producer_id, s.producer_epoch,
                                                     hb_config(bootstrap, "hb-aio"))
            deadline = time.monotonic() + 10
            while not resumed.heartbeating:
                assert time.monotonic() < deadline, "the resumed session never heartbeat"
                await asyncio.sleep(0.01)
            await resumed.close()
            assert not resumed.heartbeating
            await s.commit_transaction()
            assert not s.heartbeating and s.state is State.READY
        finally:
            await s.close()

    asyncio.run(run())


def test_heartbeat_raises_when_fenced(bootstrap: str) -> None:
    old = TransactionSession(hb_config(bootstrap, "hb-fenced"))
    old.initialize()
    old.begin_transaction()
    TransactionSession(hb_config(bootstrap, "hb-fenced")).initialize()
    with pytest.raises(ProducerFencedError, match="fenced"):
        old.heartbeat()
    assert old.state is State.FATAL_ERROR
    old.close()


# -- a worker process that dies or freezes -------------------------------------------------------

WORKER = textwrap.dedent("""\
    import sys, time
    from exactly.client import Producer, ProducerFencedError, TransactionSession
    bootstrap, txn_id, topic, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    s = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                            "transaction.heartbeat.interval.ms": %(interval)d,
                            "transaction.timeout.ms": %(timeout)d})
    s.initialize()
    s.begin_transaction()
    p = Producer({"bootstrap.servers": bootstrap}, session=s)
    p.send(topic, "doomed", key="k")
    p.flush()
    print("READY", flush=True)
    time.sleep(hold)
    try:
        s.commit_transaction()
        print("COMMITTED", flush=True)
    except ProducerFencedError:
        print("COMMIT-FAILED fenced", flush=True)
    p.close()
    s.close()
""") % {"interval": INTERVAL_MS, "timeout": TXN_TIMEOUT_MS}


@pytest.fixture
def worker(bootstrap: str, topic: str) -> Iterator[Any]:
    started: list[subprocess.Popen[str]] = []

    def start(txn_id: str, hold: float) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", WORKER, bootstrap, txn_id, topic,
                                 str(hold)], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        assert describe(bootstrap, txn_id).transaction_state == "Ongoing"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(10)


def test_killed_worker_transaction_is_aborted_in_about_three_intervals(
        bootstrap: str, topic: str, worker: Any) -> None:
    proc = worker("hb-killed", 3600)
    proc.kill()  # SIGKILL
    proc.wait(10)
    took = wait_for_state(bootstrap, "hb-killed", ABORTED, timeout=TXN_TIMEOUT_MS / 1000 / 3)
    assert took < TXN_TIMEOUT_MS / 1000 / 3  # well before transaction.timeout.ms
    commit_sentinel(bootstrap, topic, "hb-killed-sentinel")
    assert read_committed(bootstrap, topic, "sentinel") == ["sentinel"]


def test_frozen_worker_transaction_is_aborted_and_it_is_fenced_on_waking(
        bootstrap: str, topic: str, worker: Any) -> None:
    proc = worker("hb-frozen", 1.0)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        took = wait_for_state(bootstrap, "hb-frozen", ABORTED, timeout=TXN_TIMEOUT_MS / 1000 / 3)
        assert took < TXN_TIMEOUT_MS / 1000 / 3
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["COMMIT-FAILED", "fenced"]
    commit_sentinel(bootstrap, topic, "hb-frozen-sentinel")
    assert read_committed(bootstrap, topic, "sentinel") == ["sentinel"]
