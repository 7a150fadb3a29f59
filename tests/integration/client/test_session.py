"""TransactionSession against Exactly's broker over TCP (transaction version 2, its default): the
seed 004 test plan — lifecycle, abort, illegal calls, resume, epoch fencing, identity — plus
offsets in a transaction, KIP-939 prepare/complete, and the KIP-890 epoch bump."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Coroutine
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.static.primitive import i16, i32

from exactly.client._loop import LoopThread
from exactly.client.errors import (
    IllegalStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
)
from exactly.client.prepared import PreparedTxnState
from exactly.client.session import (
    AsyncTransactionSession,
    ConsumerGroupMetadata,
    State,
    TransactionSession,
)
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic

# -- helpers (test_session_v1 uses them too) ----------------------------------------------------


def config(bootstrap: str, txn_id: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra}


def write(bootstrap: str, session: Any, topic: str, partition: int, values: list[str], *,
          seq: int = 0, version: int | None = None) -> None:
    """One transactional batch under the session's identity, as a bound producer would send it:
    Produce v12 with transaction version 2 (the broker adds the partition), else v9."""
    version = version if version is not None else (12 if session.uses_transaction_v2 else 9)
    host, _, port = bootstrap.rpartition(":")
    conn = RawConnection(host, int(port))
    try:
        m = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
        batch = build_batch([Record(None, v.encode()) for v in values], timestamp=1_700_000_000_000,
                            producer_id=session.producer_id, producer_epoch=session.producer_epoch,
                            base_sequence=seq, transactional=True)
        req = build(request_class(ApiKey.PRODUCE, version), transactional_id=session.transactional_id,
                    acks=i16(-1), timeout=datetime.timedelta(seconds=10),
                    topic_data=(m.TopicProduceData(name=topic, partition_data=(
                        m.PartitionProduceData(index=i32(partition), records=batch),)),))
        conn.send_bytes(conn.frame(ApiKey.PRODUCE, version, req))
        resp = conn.read_response(ApiKey.PRODUCE, version)
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    finally:
        conn.close()


def read_committed(bootstrap: str, topic: str, until: str, *, partitions: int = 1,
                   timeout: float = 30) -> list[str]:
    """Every value a read_committed consumer gets from the beginning, up to and with `until`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    got: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while until not in got and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
    finally:
        consumer.close()
    assert until in got, f"{until!r} not read in {timeout}s; got {got}"
    return got


def commit_sentinel(bootstrap: str, topic: str, txn_id: str, value: str = "sentinel") -> None:
    """A committed record after the ones under test: read_committed reaching it has seen all."""
    with TransactionSession(config(bootstrap, txn_id)) as s:
        s.initialize()
        s.begin_transaction()
        s.add_partitions_to_transaction([(topic, 0)])
        write(bootstrap, s, topic, 0, [value])
        s.commit_transaction()


def describe(bootstrap: str, txn_id: str) -> Any:
    host, _, port = bootstrap.rpartition(":")
    conn = RawConnection(host, int(port))
    try:
        return conn.request(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                            transactional_ids=(txn_id,)).transaction_states[0]
    finally:
        conn.close()


async def observe(session: AsyncTransactionSession, coro: Coroutine[Any, Any, Any]) -> list[State]:
    """The states the session goes through while `coro` runs."""
    seen = [session.state]
    task = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.sleep(0)
        if session.state is not seen[-1]:
            seen.append(session.state)
    await task
    return seen


@pytest.fixture
def topic(exactly_broker, request):
    name = request.node.name.replace("[", "-").replace("]", "")
    create_topic(exactly_broker.bootstrap, name, partitions=1)
    return name


@pytest.fixture
def bootstrap(exactly_broker):
    return exactly_broker.bootstrap


# -- lifecycle ----------------------------------------------------------------------------------

def test_lifecycle_initialize_begin_commit(bootstrap, topic):
    async def main() -> None:
        s = AsyncTransactionSession(config(bootstrap, "life"))
        assert await observe(s, s.initialize()) == [State.UNINITIALIZED, State.INITIALIZING,
                                                    State.READY]
        await s.begin_transaction()
        assert s.state is State.IN_TRANSACTION
        await s.add_partitions_to_transaction([(topic, 0)])
        write(bootstrap, s, topic, 0, ["life-1"])
        assert await observe(s, s.commit_transaction()) == [State.IN_TRANSACTION,
                                                            State.COMMITTING, State.READY]
        await s.close()
    asyncio.run(main())
    assert read_committed(bootstrap, topic, "life-1") == ["life-1"]


def test_abort_path_leaves_nothing_visible(bootstrap, topic):
    async def main() -> None:
        async with AsyncTransactionSession(config(bootstrap, "aborter")) as s:
            await s.initialize()
            await s.begin_transaction()
            await s.add_partitions_to_transaction([(topic, 0)])
            write(bootstrap, s, topic, 0, ["aborted-1", "aborted-2"])
            assert await observe(s, s.abort_transaction()) == [State.IN_TRANSACTION,
                                                               State.ABORTING, State.READY]
            await s.begin_transaction()  # the session goes on
            assert s.state is State.IN_TRANSACTION
            await s.abort_transaction()  # nothing written: nothing sent
    asyncio.run(main())
    commit_sentinel(bootstrap, topic, "aborter")
    assert read_committed(bootstrap, topic, "sentinel") == ["sentinel"]


def test_illegal_calls_name_the_state_and_the_call(bootstrap, topic):
    s = TransactionSession(config(bootstrap, "illegal"))
    with pytest.raises(IllegalStateError, match=r"begin_transaction\(\) in state UNINITIALIZED"):
        s.begin_transaction()
    s.initialize()
    with pytest.raises(IllegalStateError, match=r"initialize\(\) in state READY"):
        s.initialize()
    for call in (s.commit_transaction, s.abort_transaction, s.prepare_transaction):
        with pytest.raises(IllegalStateError, match="in state READY.*begin_transaction"):
            call()
    with pytest.raises(IllegalStateError, match=r"add_partitions_to_transaction\(\) in state READY"):
        s.add_partitions_to_transaction([(topic, 0)])
    with pytest.raises(IllegalStateError, match=r"ensure_partitions\(\) in state READY"):
        on_loop(s.aio.ensure_partitions({(topic, 0)}))
    s.begin_transaction()
    with pytest.raises(IllegalStateError, match=r"begin_transaction\(\) in state IN_TRANSACTION"):
        s.begin_transaction()
    with pytest.raises(IllegalStateError, match=r"complete_transaction\(\) in state IN_TRANSACTION"):
        s.complete_transaction(PreparedTxnState())
    s.prepare_transaction()
    with pytest.raises(IllegalStateError, match=r"add_partitions_to_transaction\(\) in state PREPARED"):
        s.add_partitions_to_transaction([(topic, 0)])
    with pytest.raises(IllegalStateError, match="in state PREPARED"):
        s.send_offsets_to_transaction({(topic, 0): 1}, "g")
    s.abort_transaction()
    s.close()
    with pytest.raises(IllegalStateError, match="closed"):
        s.begin_transaction()


def on_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run an asyncio call of a blocking session's core where the session lives."""
    return LoopThread.shared().run(coro)


# -- resume -------------------------------------------------------------------------------------

@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_resume_starts_in_transaction_and_ends_it(bootstrap, topic, outcome):
    a = TransactionSession(config(bootstrap, f"resume-{outcome}"))
    a.initialize()
    a.begin_transaction()
    a.add_partitions_to_transaction([(topic, 0)])
    write(bootstrap, a, topic, 0, [f"resumed-{outcome}"])
    pid, epoch = a.producer_id, a.producer_epoch
    a.close()  # A is gone; its transaction is open

    b = TransactionSession.resume(f"resume-{outcome}", pid, epoch, {"bootstrap.servers": bootstrap})
    assert (b.state, b.transactional_id, b.producer_id, b.producer_epoch) == (
        State.IN_TRANSACTION, f"resume-{outcome}", pid, epoch)
    if outcome == "commit":
        b.commit_transaction()
    else:
        b.abort_transaction()
    assert b.state is State.READY
    b.close()
    commit_sentinel(bootstrap, topic, f"resume-{outcome}")
    expected = [f"resumed-{outcome}"] if outcome == "commit" else []
    assert read_committed(bootstrap, topic, "sentinel") == [*expected, "sentinel"]


def test_resume_of_an_identity_no_longer_current(bootstrap, topic):
    a = TransactionSession(config(bootstrap, "stale"))
    a.initialize()
    old = (a.producer_id, a.producer_epoch)
    a.begin_transaction()
    a.add_partitions_to_transaction([(topic, 0)])
    write(bootstrap, a, topic, 0, ["stale"])
    a.commit_transaction()  # ended, and with version 2 the epoch bumped
    # Committing it again is a retry of the same decision: it succeeds.
    again = TransactionSession.resume("stale", *old, {"bootstrap.servers": bootstrap})
    again.commit_transaction()
    assert again.state is State.READY
    again.close()
    # Aborting what committed is refused, and the session cannot go on.
    wrong = TransactionSession.resume("stale", *old, {"bootstrap.servers": bootstrap})
    with pytest.raises(TransactionFatalError, match="already ended with the other outcome"):
        wrong.abort_transaction()
    assert wrong.state is State.FATAL_ERROR
    with pytest.raises(TransactionFatalError, match="FATAL_ERROR"):
        wrong.commit_transaction()
    wrong.close()
    # Once a newer transaction ended too, the old identity is fenced.
    a.begin_transaction()
    a.add_partitions_to_transaction([(topic, 0)])
    write(bootstrap, a, topic, 0, ["newer"])
    a.commit_transaction()
    zombie = TransactionSession.resume("stale", *old, {"bootstrap.servers": bootstrap})
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    assert zombie.state is State.FATAL_ERROR
    zombie.close()
    a.close()
    assert read_committed(bootstrap, topic, "newer") == ["stale", "newer"]


def test_resume_rejects_an_impossible_identity(bootstrap):
    with pytest.raises(ValueError, match="epoch"):
        TransactionSession.resume("x", 1, 40000, {"bootstrap.servers": bootstrap})


# -- fencing, identity, heartbeat ---------------------------------------------------------------

def test_newer_session_with_the_same_transactional_id_fences_the_older(bootstrap, topic):
    old = TransactionSession(config(bootstrap, "fenced"))
    old.initialize()
    old.heartbeat()
    old.begin_transaction()
    old.add_partitions_to_transaction([(topic, 0)])
    write(bootstrap, old, topic, 0, ["zombie"])
    new = TransactionSession(config(bootstrap, "fenced"))
    new.initialize()  # aborts the old session's transaction, bumps the epoch
    assert new.producer_id == old.producer_id and new.producer_epoch > old.producer_epoch
    with pytest.raises(ProducerFencedError, match="close this session"):
        old.commit_transaction()
    assert old.state is State.FATAL_ERROR
    for call in (old.abort_transaction, old.begin_transaction, old.heartbeat):
        with pytest.raises(ProducerFencedError, match="FATAL_ERROR"):
            call()
    old.close()
    new.heartbeat()
    new.close()
    commit_sentinel(bootstrap, topic, "fenced")
    assert read_committed(bootstrap, topic, "sentinel") == ["sentinel"]


def test_heartbeat_detects_fencing(bootstrap):
    old = TransactionSession(config(bootstrap, "hb"))
    old.initialize()
    old.heartbeat()
    assert old.state is State.READY
    TransactionSession(config(bootstrap, "hb")).initialize()
    with pytest.raises(ProducerFencedError, match="fenced"):
        old.heartbeat()
    assert old.state is State.FATAL_ERROR
    old.close()


def test_identity_accessors_after_initialize(bootstrap):
    s = TransactionSession(config(bootstrap, "who"))
    assert (s.transactional_id, s.producer_id, s.producer_epoch) == ("who", -1, -1)
    s.initialize()
    coordinator = describe(bootstrap, "who")
    assert (s.producer_id, s.producer_epoch) == (coordinator.producer_id, coordinator.producer_epoch)
    assert s.producer_id >= 0 and s.producer_epoch >= 0 and s.transactional_id == "who"
    s.close()


def test_transactional_id_is_required(bootstrap):
    with pytest.raises(KafkaError, match="transactional.id"):
        TransactionSession({"bootstrap.servers": bootstrap})


# -- offsets ------------------------------------------------------------------------------------

def _committed(bootstrap: str, group: str, topic: str, isolation: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation,
                  "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


@pytest.mark.parametrize("group_metadata", ["plain", "metadata"])
def test_offsets_in_a_transaction_are_visible_only_after_commit(bootstrap, topic, group_metadata):
    group = f"offsets-{group_metadata}"
    meta: Any = group if group_metadata == "plain" else ConsumerGroupMetadata(group)
    s = TransactionSession(config(bootstrap, f"offsets-{group_metadata}"))
    s.initialize()
    s.begin_transaction()
    s.send_offsets_to_transaction({(topic, 0): (17, "meta")}, meta)
    assert _committed(bootstrap, group, topic, "read_uncommitted") < 0  # pending: not committed
    s.commit_transaction()
    assert _committed(bootstrap, group, topic, "read_committed") == 17
    s.begin_transaction()
    s.send_offsets_to_transaction({(topic, 0): 30}, meta)
    s.abort_transaction()
    assert _committed(bootstrap, group, topic, "read_committed") == 17
    s.close()


# -- KIP-939 prepare / complete -----------------------------------------------------------------

@pytest.mark.parametrize("matches", [True, False])
def test_prepare_then_complete_commits_when_the_state_matches(bootstrap, topic, matches):
    s = TransactionSession(config(bootstrap, f"prepared-{matches}"))
    s.initialize()
    s.begin_transaction()
    s.add_partitions_to_transaction([(topic, 0)])
    write(bootstrap, s, topic, 0, ["prepared"])
    state = s.prepare_transaction()
    assert s.state is State.PREPARED
    assert state == PreparedTxnState.of(s.producer_id, s.producer_epoch)
    stored = str(state)  # what an external coordinator keeps
    decided = PreparedTxnState(stored) if matches else PreparedTxnState("1:1")
    s.complete_transaction(decided)
    assert s.state is State.READY
    s.close()
    commit_sentinel(bootstrap, topic, f"prepared-{matches}")
    expected = ["prepared"] if matches else []
    assert read_committed(bootstrap, topic, "sentinel") == [*expected, "sentinel"]


def test_resumed_session_completes_a_prepared_transaction(bootstrap, topic):
    a = TransactionSession(config(bootstrap, "prep-resume"))
    a.initialize()
    a.begin_transaction()
    a.add_partitions_to_transaction([(topic, 0)])
    write(bootstrap, a, topic, 0, ["from-a"])
    stored = str(a.prepare_transaction())
    a.close()
    state = PreparedTxnState(stored)
    b = TransactionSession.resume("prep-resume", state.producer_id, state.epoch,
                                  {"bootstrap.servers": bootstrap})
    b.complete_transaction(state)
    b.close()
    assert read_committed(bootstrap, topic, "from-a") == ["from-a"]


# -- transaction version 2 (KIP-890) ------------------------------------------------------------

def test_transaction_version_2_bumps_the_epoch_and_adds_partitions_on_produce(bootstrap, topic):
    s = TransactionSession(config(bootstrap, "tv2"))
    s.initialize()
    assert s.uses_transaction_v2
    pid, epoch = s.producer_id, s.producer_epoch
    s.begin_transaction()
    s.add_partitions_to_transaction([(topic, 0)])
    assert describe(bootstrap, "tv2").transaction_state == "Empty"  # nothing sent: remembered
    write(bootstrap, s, topic, 0, ["tv2-1"])
    assert describe(bootstrap, "tv2").transaction_state == "Ongoing"  # Produce v12 added it
    s.commit_transaction()
    assert (s.producer_id, s.producer_epoch) == (pid, epoch + 1)  # adopted from EndTxn v5
    s.begin_transaction()
    s.add_partitions_to_transaction([(topic, 0)])
    write(bootstrap, s, topic, 0, ["tv2-2"])  # the bumped epoch writes from sequence 0
    s.commit_transaction()
    assert s.producer_epoch == epoch + 2
    s.begin_transaction()
    s.add_partitions_to_transaction([(topic, 0)])
    s.commit_transaction()  # partitions named, nothing written: an empty commit
    assert s.state is State.READY
    s.close()
    assert read_committed(bootstrap, topic, "tv2-2") == ["tv2-1", "tv2-2"]


# -- bound producers ----------------------------------------------------------------------------

class FakeProducer:
    """Stands in for exactly.client.Producer's side of the interface: flush() and record_error."""

    def __init__(self, session: AsyncTransactionSession, fail: Exception | None = None) -> None:
        self.session, self.fail = session, fail
        self.flushed_in: list[State] = []

    async def flush(self) -> None:
        self.flushed_in.append(self.session.state)
        await asyncio.sleep(0.01)
        if self.fail is not None:
            self.session.record_error(self.fail)
            raise self.fail


def test_bound_producers_are_flushed_before_commit_prepare_and_abort(bootstrap, topic):
    async def main() -> None:
        async with AsyncTransactionSession(config(bootstrap, "bound")) as s:
            p = FakeProducer(s)
            s.bind_producer(p)
            await s.initialize()
            for end in ("commit", "prepare", "abort"):
                await s.begin_transaction()
                await s.ensure_partitions({(topic, 0)})
                if end == "prepare":
                    await s.prepare_transaction()
                    await s.abort_transaction()
                elif end == "commit":
                    await s.commit_transaction()
                else:
                    await s.abort_transaction()
            assert p.flushed_in == [State.IN_TRANSACTION] * 3
            s.unbind_producer(p)
            await s.begin_transaction()
            await s.commit_transaction()
            assert len(p.flushed_in) == 3
    asyncio.run(main())


def test_a_failed_write_makes_the_transaction_abortable(bootstrap, topic):
    async def main() -> None:
        async with AsyncTransactionSession(config(bootstrap, "failing")) as s:
            await s.initialize()
            p = FakeProducer(s, fail=KafkaError("record too large", ErrorCode.message_too_large))
            s.bind_producer(p)
            await s.begin_transaction()
            with pytest.raises(TransactionAbortableError, match="record too large"):
                await s.commit_transaction()
            assert s.state is State.ABORTABLE_ERROR
            with pytest.raises(TransactionAbortableError, match="ABORTABLE_ERROR"):
                await s.commit_transaction()
            await s.abort_transaction()
            assert s.state is State.READY
            s.unbind_producer(p)
            await s.begin_transaction()
            s.record_error(KafkaError("fenced write", ErrorCode.invalid_producer_epoch))
            assert s.state is State.FATAL_ERROR
            with pytest.raises(ProducerFencedError):
                await s.abort_transaction()
    asyncio.run(main())


# -- retries ------------------------------------------------------------------------------------

def test_commit_retries_until_a_crashed_broker_is_back(tmp_path):
    with EmbeddedBroker(data_dir=tmp_path / "data", settings={"log.flush.policy": "os"}) as broker:
        create_topic(broker.bootstrap, "crash", partitions=1)
        s = TransactionSession(config(broker.bootstrap, "crash", **{"retry.backoff.ms": 50}))
        s.initialize()
        s.begin_transaction()
        s.add_partitions_to_transaction([("crash", 0)])
        write(broker.bootstrap, s, "crash", 0, ["survives"])
        broker.kill()
        restarter = threading.Timer(1.0, broker.start)
        restarter.start()
        try:
            s.commit_transaction()  # connection lost, coordinator rediscovered, EndTxn again
        finally:
            restarter.join()
        assert s.state is State.READY
        s.close()
        assert read_committed(broker.bootstrap, "crash", "survives") == ["survives"]
