"""QueryCoordinator (exactly.spark.coordinator) against a broker over TCP, without Spark: the
driver's side of the exactly-once sink's two-phase commit (leftovers, decision, completion) with
the clients it holds from one micro-batch to the next, and the count of the clients it makes.

The tasks' part is played by `prepare`: rows in a transaction of its own, left open (prepared,
KIP-939; or, in producer-id mode, flushed and left Ongoing), as StreamWriter.write leaves it."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from exactly.client import Admin, PreparedTxnState, Producer, TransactionSession
from exactly.spark import coordinator as coordinator_module
from exactly.spark.clients import PROCESS
from exactly.spark.coordinator import BatchOutputLost, QueryCoordinator
from exactly.spark.decisions import Decision
from exactly.spark.options import PRODUCER_ID
from exactly.spark.stream_sink import open_transactions
from exactly.testing import EmbeddedBroker
from tests.support import create_topic
from tests.system.spark.test_stream_faults import PARTITIONS, difference, read_committed

NO_2PC = {"transaction.two.phase.commit.enable": "false",
          # timed-out transactions aborted within half a second
          "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
Rows = Counter[tuple[bytes, bytes]]


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(bootstrap: str) -> str:
    topic = _name("out")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    return topic


def prepare(bootstrap: str, txn_id: str, topic: str, tag: str, expected: Rows | None = None,
            rows: int = 10, timeout_ms: int | None = None) -> str:
    """A task's part: `rows` rows in a transaction left open; its PreparedTxnState text. KIP-939
    prepared, or with `timeout_ms` an ordinary transaction of that timeout (producer-id mode).
    The rows go into `expected` if given."""
    config = {"bootstrap.servers": bootstrap, "transactional.id": txn_id}
    if timeout_ms is None:
        config["transaction.two.phase.commit.enable"] = "true"
    else:
        config["transaction.timeout.ms"] = str(timeout_ms)
    with TransactionSession(config) as session:
        if timeout_ms is None:
            session.initialize(keep_prepared_txn=True)
        else:
            session.initialize()
        session.begin_transaction()
        with Producer({"bootstrap.servers": bootstrap}, session=session) as producer:
            for i in range(rows):
                key, value = f"k{i}".encode(), f"{tag}-{i}".encode()
                producer.send(topic, value, key, partition=i % PARTITIONS)
                if expected is not None:
                    expected[key, value] += 1
            producer.flush()
        if timeout_ms is None:
            return str(session.prepare_transaction())
        return str(PreparedTxnState.of(session.producer_id, session.producer_epoch))


def one_batch(coordinator: QueryCoordinator, batch: int, participants: dict[str, str]) -> int:
    """The driver's part of a micro-batch, as StreamWriter does it (the writer's constructor,
    then its commit()); the clients the coordinator made for it."""
    coordinator.check()
    decision = coordinator.latest()
    coordinator.leftovers(keep=set(participants), decision=decision)
    coordinator.decide(batch, participants, "query-1")
    coordinator.complete(batch, participants)
    return coordinator.batch_bootstraps()


def test_micro_batches_after_the_first_make_no_client(bootstrap: str) -> None:
    client = {"bootstrap.servers": bootstrap}
    topic, prefix = new_topic(bootstrap), _name("q")
    expected: Rows = Counter()
    made = []
    in_process = PROCESS.bootstraps
    with QueryCoordinator(client, prefix, _name("decisions")) as coordinator:
        for batch in range(3):
            participants = {f"{prefix}-{p}": prepare(bootstrap, f"{prefix}-{p}", topic,
                                                     f"b{batch}p{p}", expected)
                            for p in range(PARTITIONS)}
            made.append(one_batch(coordinator, batch, participants))
            assert coordinator.latest() == Decision(prefix, batch, participants, "query-1")
        # the first batch: the capability probe's session, the Admin, the decisions reader's
        # consumer and the decisions producer; then none
        assert made == [4, 0, 0]
        assert coordinator.clients.counts() == {"admin": 1, "producer": 1, "consumer": 1,
                                                "session": 1, "resume": 3 * PARTITIONS}
        # nothing in this process made a client the coordinator's factory did not count
        assert PROCESS.bootstraps - in_process == sum(made)
    assert difference(expected, read_committed(bootstrap, topic)) == (0, 0)
    assert open_transactions(client, prefix) == []


def test_leftovers_are_finished_by_the_newest_decision(bootstrap: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A driver killed after its decision: the next (a new process: a new coordinator) commits
    the decided transactions and aborts the undecided one."""
    client = {"bootstrap.servers": bootstrap}
    topic, prefix, decisions = new_topic(bootstrap), _name("q"), _name("decisions")
    expected: Rows = Counter()
    decided = {f"{prefix}-{p}": prepare(bootstrap, f"{prefix}-{p}", topic, f"d{p}", expected)
               for p in range(PARTITIONS)}
    with QueryCoordinator(client, prefix, decisions) as killed:
        killed.decide(0, decided, "query-1")  # and no complete(): the driver dies here
    prepare(bootstrap, f"{prefix}-{PARTITIONS}", topic, "undecided")
    assert open_transactions(client, prefix) == sorted([*decided, f"{prefix}-{PARTITIONS}"])

    caplog.set_level(logging.INFO, logger="exactly.spark")
    with QueryCoordinator(client, prefix, decisions) as restarted:
        restarted.leftovers()  # by the newest decision, read now
    assert difference(expected, read_committed(bootstrap, topic)) == (0, 0)
    assert open_transactions(client, prefix) == []
    leftovers = [r.getMessage() for r in caplog.records
                 if r.getMessage().startswith("event=spark_leftover")]
    assert len(leftovers) == PARTITIONS + 1
    assert sum("decided=-" in m for m in leftovers) == 1  # the undecided one, aborted


def test_checks_are_made_once_per_process(bootstrap: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()

    def counting(name: str) -> Callable[..., Any]:
        real = getattr(coordinator_module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)
        return call

    for name in ("check_keep_prepared", "create_topic_if_missing"):
        monkeypatch.setattr(coordinator_module, name, counting(name))
    client = {"bootstrap.servers": bootstrap}
    topic, prefix, decisions = new_topic(bootstrap), _name("q"), _name("decisions")
    coordinator = QueryCoordinator.of(client, prefix, decisions)
    try:
        assert QueryCoordinator.of(dict(client), prefix, decisions) is coordinator
        assert QueryCoordinator.of(client, prefix, decisions, PRODUCER_ID) is not coordinator
        for batch in range(3):
            participants = {f"{prefix}-0": prepare(bootstrap, f"{prefix}-0", topic, f"b{batch}")}
            one_batch(coordinator, batch, participants)
        assert calls == {"check_keep_prepared": 1, "create_topic_if_missing": 1}
    finally:
        coordinator_module.close_all()


def test_a_held_client_that_fails_is_made_anew_once(broker_factory: Callable[..., EmbeddedBroker],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    broker = broker_factory()
    client = {"bootstrap.servers": broker.bootstrap}
    topic, prefix = new_topic(broker.bootstrap), _name("q")
    expected: Rows = Counter()

    def batch(coordinator: QueryCoordinator, number: int) -> int:
        participants = {f"{prefix}-0": prepare(broker.bootstrap, f"{prefix}-0", topic,
                                               f"b{number}", expected)}
        return one_batch(coordinator, number, participants)

    caplog.set_level(logging.INFO, logger="exactly.spark")
    with QueryCoordinator(client, prefix, _name("decisions")) as coordinator:
        assert batch(coordinator, 0) == 4
        coordinator._held["producer"].close()  # the decisions producer breaks
        assert batch(coordinator, 1) == 1  # a new producer, once
        assert "event=spark_client_renewed" in caplog.text
        assert coordinator.describe(f"{prefix}-none") is None  # a definite answer: no new Admin
        assert coordinator.batch_bootstraps() == 0

        broker.restart(kill=True)  # the held clients find the broker again, or are made anew
        assert batch(coordinator, 2) <= 3

        broker.stop()  # gone: one new Admin tried, then the error
        with pytest.raises(ConnectionError):
            coordinator.open_transactions()
        assert coordinator.batch_bootstraps() == 1
        broker.start()
        assert batch(coordinator, 3) == 1  # the Admin discarded after the error, made anew
    assert difference(expected, read_committed(broker.bootstrap, topic)) == (0, 0)
    assert open_transactions(client, prefix) == []


def _wait_aborted(bootstrap: str, txn_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        while admin.describe_transactions([txn_id])[txn_id].state != "CompleteAbort":
            assert time.monotonic() < deadline, f"{txn_id} was not aborted by its timeout"
            time.sleep(0.2)


def test_producer_id_mode_commits_leftovers_and_reports_a_lost_participant(
        broker_factory: Callable[..., EmbeddedBroker], caplog: pytest.LogCaptureFixture) -> None:
    """transactionResume=producer-id (Flink's KafkaSink before FLIP-319): a decided leftover
    still Ongoing is committed by resuming it; a participant the broker aborted at its timeout
    before complete() is reported lost, after every other participant is committed."""
    bootstrap = broker_factory(settings=NO_2PC).bootstrap
    client = {"bootstrap.servers": bootstrap}
    topic, prefix, decisions = new_topic(bootstrap), _name("q"), _name("decisions")
    expected: Rows = Counter()
    caplog.set_level(logging.INFO, logger="exactly.spark")
    leftover = {f"{prefix}-0": prepare(bootstrap, f"{prefix}-0", topic, "left", expected,
                                       timeout_ms=60000)}
    with QueryCoordinator(client, prefix, decisions, PRODUCER_ID) as killed:
        killed.check()
        killed.decide(0, leftover, "query-1")  # the driver dies before complete()
    with QueryCoordinator(client, prefix, decisions, PRODUCER_ID) as coordinator:
        coordinator.check()
        coordinator.leftovers()
        assert "action=commit" in caplog.text
        participants = {
            f"{prefix}-0": prepare(bootstrap, f"{prefix}-0", topic, "kept", expected,
                                   timeout_ms=60000),
            f"{prefix}-1": prepare(bootstrap, f"{prefix}-1", topic, "lost", timeout_ms=1000)}
        coordinator.decide(1, participants, "query-1")
        _wait_aborted(bootstrap, f"{prefix}-1")
        with pytest.raises(BatchOutputLost, match=f"batch 1: .* of {prefix}-1 before"):
            coordinator.complete(1, participants)
    assert f"event=spark_batch_output_lost transactional_id={prefix}-1 " in caplog.text
    assert difference(expected, read_committed(bootstrap, topic)) == (0, 0)
    assert open_transactions(client, prefix) == []
