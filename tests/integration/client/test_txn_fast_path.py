"""The client's 1-record transaction path (issue 19): what it sends, counted by the broker's
metrics endpoint (exactly_requests_total per API), and where it does not wait.

- Transaction version 2: Produce and EndTxn, nothing else (no AddPartitionsToTxn, no lookups).
- Transaction version 1: AddPartitionsToTxn leaves at send(), not when the batch is ready
  (linger.ms, or the commit's flush), so its round trip overlaps the way to commit.
- The blocking begin_transaction() runs in the caller's thread: it works while the client's
  loop thread is busy.
- The blocking client's loop is uvloop's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop

from exactly.client import Producer, TransactionSession, aio
from exactly.client._loop import LoopThread
from exactly.testing import EmbeddedBroker
from tests.integration.client.test_session import config, describe, read_committed
from tests.integration.server.test_metrics import _metrics_url, _scrape
from tests.support import create_topic

TOPIC = "fast-path"
TRANSACTIONS = 4


def _broker(transaction_version: str) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"log.flush.policy": "os", "metrics.listen": "127.0.0.1:0",
                                  "transaction.version": transaction_version}) as broker:
        create_topic(broker.bootstrap, TOPIC, partitions=2)
        yield broker


@pytest.fixture(scope="module")
def v2_broker() -> Iterator[EmbeddedBroker]:
    yield from _broker("2")


@pytest.fixture(scope="module")
def v1_broker() -> Iterator[EmbeddedBroker]:
    yield from _broker("0")


def _requests(broker: EmbeddedBroker) -> dict[str, float]:
    """exactly_requests_total per API, as the broker counts them."""
    return {dict(labels)["api"]: value
            for (name, labels), value in _scrape(_metrics_url(broker)).items()
            if name == "exactly_requests_total"}


def _sent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {api: after[api] - before.get(api, 0.0) for api in after
            if after[api] != before.get(api, 0.0)}


def _blocking_transactions(bootstrap: str, txn_id: str, count: int,
                           between: Any = lambda: None) -> None:
    """A warm-up transaction, then `between()`, then `count` 1-record transactions."""
    cfg = config(bootstrap, txn_id)
    with TransactionSession(cfg) as session, Producer(cfg, session=session) as producer:
        session.initialize()
        for i in range(count + 1):
            session.begin_transaction()
            producer.send(TOPIC, f"{txn_id}-{i}", partition=0)
            session.commit_transaction()
            if i == 0:
                between()


def _async_transactions(bootstrap: str, txn_id: str, count: int,
                        between: Any = lambda: None) -> None:
    async def run() -> None:
        cfg = config(bootstrap, txn_id)
        async with aio.TransactionSession(cfg) as session, \
                aio.Producer(cfg, session=session) as producer:
            await session.initialize()
            for i in range(count + 1):
                await session.begin_transaction()
                await producer.send(TOPIC, f"{txn_id}-{i}", partition=0)
                await session.commit_transaction()
                if i == 0:
                    between()
    asyncio.run(run())


CLIENTS = {"blocking": _blocking_transactions, "asyncio": _async_transactions}
# What a 1-record transaction sends once the session and the producer are warm.
EXPECTED = {
    "2": {"produce": 1, "end_txn": 1},
    "1": {"add_partitions_to_txn": 1, "produce": 1, "end_txn": 1},
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("version", ["2", "1"])
def test_a_one_record_transaction_sends_only_what_the_protocol_needs(client, version, request):
    broker = request.getfixturevalue("v2_broker" if version == "2" else "v1_broker")
    counts: dict[str, dict[str, float]] = {}

    def snapshot() -> None:
        counts["before"] = _requests(broker)

    txn_id = f"fast-count-{client}-v{version}"
    CLIENTS[client](broker.bootstrap, txn_id, TRANSACTIONS, between=snapshot)
    sent = _sent(counts["before"], _requests(broker))
    assert sent == {api: n * TRANSACTIONS for api, n in EXPECTED[version].items()}
    last = f"{txn_id}-{TRANSACTIONS}"
    assert read_committed(broker.bootstrap, TOPIC, last)[-TRANSACTIONS - 1:] == [
        f"{txn_id}-{i}" for i in range(TRANSACTIONS + 1)]


def _partitions_in(bootstrap: str, txn_id: str) -> set[tuple[str, int]]:
    found = describe(bootstrap, txn_id)
    if found.transaction_state != "Ongoing":
        return set()
    return {(t.topic, p) for t in found.topics for p in t.partitions}


def _wait_for_partitions(bootstrap: str, txn_id: str, wanted: set[tuple[str, int]]) -> None:
    deadline = time.monotonic() + 10
    while _partitions_in(bootstrap, txn_id) != wanted:
        assert time.monotonic() < deadline, (
            f"the coordinator has {_partitions_in(bootstrap, txn_id)} in the transaction, "
            f"not {wanted}, 10 s after send() (linger.ms is a minute)")
        time.sleep(0.02)


def test_version_1_blocking_send_leaves_the_add_to_the_commits_flush(v1_broker):
    """The blocking send() of a transaction under version 1 does not cross to the loop thread
    to add the partition (the asyncio send does, below): the commit's flush adds it
    (AddPartitionsToTxn before the Produce) and sends the lingering batch, so the record is
    committed inside the transaction although linger.ms is a minute (see
    exactly.client.producer's `_wake_at`)."""
    bootstrap = v1_broker.bootstrap
    cfg = config(bootstrap, "fast-early-add", **{"linger.ms": 60_000})
    with TransactionSession(cfg) as session, Producer(cfg, session=session) as producer:
        session.initialize()
        assert not session.uses_transaction_v2
        session.begin_transaction()
        sent = producer.send(TOPIC, "early", partition=1)
        assert not sent.done()  # the batch lingers
        session.commit_transaction()
        assert sent.result(0).partition == 1
    read_committed(bootstrap, TOPIC, "early", partitions=2)


def test_version_1_adds_the_partition_at_send_with_asyncio(v1_broker):
    bootstrap = v1_broker.bootstrap
    cfg = config(bootstrap, "fast-early-add-aio", **{"linger.ms": 60_000})

    async def run() -> None:
        async with aio.TransactionSession(cfg) as session, \
                aio.Producer(cfg, session=session) as producer:
            await session.initialize()
            await session.begin_transaction()
            sent = await producer.send(TOPIC, "early-aio", partition=1)
            await asyncio.to_thread(_wait_for_partitions, bootstrap, "fast-early-add-aio",
                                    {(TOPIC, 1)})
            assert not sent.done()
            await session.commit_transaction()
            assert (await sent).partition == 1
    asyncio.run(run())


def test_blocking_begin_does_not_wait_for_the_loop_thread(v2_broker):
    cfg = config(v2_broker.bootstrap, "fast-begin")
    with TransactionSession(cfg) as session:
        session.initialize()
        loop = LoopThread.shared().loop
        release = threading.Event()
        held = threading.Event()

        def hold() -> None:
            held.set()
            release.wait(30)

        loop.call_soon_threadsafe(hold)  # the loop thread is busy until `release`
        try:
            assert held.wait(10)
            began = threading.Thread(target=session.begin_transaction)
            began.start()
            began.join(10)
            assert not began.is_alive(), "begin_transaction() waited for the loop thread"
        finally:
            release.set()
        began.join(10)
        session.abort_transaction()


def test_the_blocking_clients_loop_is_uvloop():
    assert isinstance(LoopThread.shared().loop, uvloop.Loop)
