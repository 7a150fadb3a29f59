"""KIP-939 end to end, over TCP with Exactly's own client and a real broker process.

A 2PC transaction prepared by process A survives `kill -9` of A and a broker restart; process B
takes it over with initialize(keep_prepared_txn=True), gets its producer id/epoch, and
complete_transaction() commits it when the stored state matches and aborts it otherwise. A
prepared 2PC transaction outlives transaction.max.timeout.ms while a plain one beside it is
aborted on time; force_terminate_transaction ends it and the LSO moves on. The seed's split
brain: the older of two instances is fenced at its commit. (The broker setting off, and
KeepPreparedTxn without 2PC: tests/integration/client/test_2pc_session.py.)
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from exactly.client import (
    Admin,
    PreparedTxnState,
    Producer,
    ProducerFencedError,
    State,
    TransactionSession,
)
from exactly.testing import EmbeddedBroker
from tests.support import create_topic
from tests.system.interop.test_transactions import read_all

MAX_TIMEOUT_MS = 2000

PROCESS_A = textwrap.dedent("""
    import sys, time
    from exactly.client import Producer, TransactionSession

    bootstrap, txn_id, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    session = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                  "transaction.two.phase.commit.enable": True})
    session.initialize()
    session.begin_transaction()
    producer = Producer({"bootstrap.servers": bootstrap}, session=session)
    for i in range(count):
        producer.send(topic, f"{txn_id}-{i}", key=str(i))
    state = session.prepare_transaction()
    print(str(state), flush=True)
    time.sleep(3600)  # killed with SIGKILL while prepared
""")


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={
            "transaction.two.phase.commit.enable": "true",
            "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
            "group.initial.rebalance.delay.ms": "0",
            "log.flush.policy": "os"}) as b:
        yield b


def two_pc(bootstrap: str, txn_id: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
            "transaction.two.phase.commit.enable": True, **extra}


def prepare_in_process_a(bootstrap: str, txn_id: str, topic: str, count: int
                         ) -> tuple[subprocess.Popen[str], PreparedTxnState]:
    proc = subprocess.Popen([sys.executable, "-c", PROCESS_A, bootstrap, txn_id, topic,
                             str(count)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        proc.wait()
        pytest.fail(f"process A printed no PreparedTxnState (exit {proc.returncode})")
    return proc, PreparedTxnState(line)


def commit_sentinel(bootstrap: str, topic: str, value: str) -> None:
    """A plain committed transaction after the others: what read_committed can reach tells
    where the LSO is."""
    session = TransactionSession({"bootstrap.servers": bootstrap,
                                  "transactional.id": f"sentinel-{value}",
                                  "transaction.timeout.ms": MAX_TIMEOUT_MS})
    session.initialize()
    session.begin_transaction()
    with Producer({"bootstrap.servers": bootstrap}, session=session) as producer:
        producer.send(topic, value, partition=0)
        session.commit_transaction()
    session.close()


def describe(bootstrap: str, txn_id: str) -> Any:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.describe_transactions([txn_id])[txn_id]


def wait_for_state(bootstrap: str, txn_id: str, wanted: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = describe(bootstrap, txn_id)
        if found.state == wanted or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@pytest.mark.parametrize("matches", [True, False], ids=["commit", "abort"])
def test_prepared_transaction_survives_kill_of_a_and_broker_restart(broker: EmbeddedBroker,
                                                                    matches: bool) -> None:
    topic, txn_id = f"dual-write-{matches}", f"app-{matches}"
    create_topic(broker.bootstrap, topic, partitions=2)
    a, stored = prepare_in_process_a(broker.bootstrap, txn_id, topic, 20)
    a.kill()  # kill -9 while prepared
    a.wait()
    broker.restart()
    found = describe(broker.bootstrap, txn_id)
    assert (found.state, found.producer_id, found.producer_epoch) == (
        "Ongoing", stored.producer_id, stored.epoch)
    assert found.timeout_ms == -1  # Enable2Pc: never times out

    b = TransactionSession(two_pc(broker.bootstrap, txn_id))
    b.initialize(keep_prepared_txn=True)
    # B got the ongoing transaction's identity (OngoingTxnProducerId/Epoch) and a newer one of
    # its own, which fenced A.
    assert b.state is State.PREPARED
    assert b.prepared_state == stored
    assert (b.producer_id, b.producer_epoch) == (stored.producer_id, stored.epoch + 1)
    decided = stored if matches else PreparedTxnState()  # what the outside coordinator kept
    b.complete_transaction(decided)
    assert b.state is State.READY
    assert (b.producer_id, b.producer_epoch) == (stored.producer_id, stored.epoch + 2)
    b.close()
    assert describe(broker.bootstrap, txn_id).state == ("CompleteCommit" if matches
                                                        else "CompleteAbort")
    commit_sentinel(broker.bootstrap, topic, f"sentinel-{matches}")
    got = read_all(broker.bootstrap, topic, at_least=21 if matches else 1)
    expected = {f"{txn_id}-{i}" for i in range(20)} if matches else set()
    assert sorted(got) == sorted(expected | {f"sentinel-{matches}"})


def test_complete_with_a_different_state_aborts(broker: EmbeddedBroker) -> None:
    topic, txn_id = "dual-write-other", "app-other"
    create_topic(broker.bootstrap, topic, partitions=1)
    a, stored = prepare_in_process_a(broker.bootstrap, txn_id, topic, 5)
    a.kill()
    a.wait()
    b = TransactionSession(two_pc(broker.bootstrap, txn_id))
    b.initialize(keep_prepared_txn=True)
    assert b.prepared_state == stored
    b.complete_transaction(PreparedTxnState(f"{stored.producer_id}:{stored.epoch + 5}"))
    b.close()
    commit_sentinel(broker.bootstrap, topic, "sentinel-other")
    assert read_all(broker.bootstrap, topic) == ["sentinel-other"]


def test_split_brain_older_instance_is_fenced_at_its_commit(broker: EmbeddedBroker) -> None:
    topic, txn_id = "split-brain", "app-split"
    create_topic(broker.bootstrap, topic, partitions=1)
    a, stored = prepare_in_process_a(broker.bootstrap, txn_id, topic, 10)
    a.kill()
    a.wait()
    first = TransactionSession(two_pc(broker.bootstrap, txn_id))
    first.initialize(keep_prepared_txn=True)
    second = TransactionSession(two_pc(broker.bootstrap, txn_id))
    second.initialize(keep_prepared_txn=True)
    assert first.prepared_state == second.prepared_state == stored
    with pytest.raises(ProducerFencedError):
        first.complete_transaction(stored)
    first.close()
    assert describe(broker.bootstrap, txn_id).state == "Ongoing"
    second.complete_transaction(stored)
    second.close()
    commit_sentinel(broker.bootstrap, topic, "sentinel-split")
    got = read_all(broker.bootstrap, topic, at_least=11)
    assert sorted(got) == sorted([f"{txn_id}-{i}" for i in range(10)] + ["sentinel-split"])


def test_prepared_2pc_outlives_max_timeout_until_force_terminated(broker: EmbeddedBroker) -> None:
    topic = "long-prepared"
    create_topic(broker.bootstrap, topic, partitions=1)
    held = TransactionSession(two_pc(broker.bootstrap, "app-long"))
    held.initialize()
    held.begin_transaction()
    with Producer({"bootstrap.servers": broker.bootstrap}, session=held) as producer:
        for i in range(3):
            producer.send(topic, f"held-{i}", partition=0)
        held.prepare_transaction()
    plain = TransactionSession({"bootstrap.servers": broker.bootstrap,
                                "transactional.id": "app-plain", "transaction.timeout.ms": 1000})
    plain.initialize()
    plain.begin_transaction()
    with Producer({"bootstrap.servers": broker.bootstrap}, session=plain) as producer:
        producer.send(topic, "plain", partition=0)
        plain.prepare_transaction()  # client-side only: the broker still times it out
    # The plain transaction is aborted on time; the 2PC one stays open, well past the maximum.
    assert wait_for_state(broker.bootstrap, "app-plain", "CompleteAbort").state == "CompleteAbort"
    time.sleep(3 * MAX_TIMEOUT_MS / 1000)
    found = describe(broker.bootstrap, "app-long")
    assert (found.state, found.timeout_ms) == ("Ongoing", -1)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        listed = admin.list_transactions(running_longer_than_ms=3 * MAX_TIMEOUT_MS)
        assert "app-long" in {t.transactional_id for t in listed}
        # The open 2PC transaction holds the LSO: a later commit is not readable yet.
        commit_sentinel(broker.bootstrap, topic, "after")
        assert read_all(broker.bootstrap, topic, at_least=0, idle=2.0) == []
        admin.force_terminate_transaction("app-long")
    # Aborted, then the id initialized for the admin's (discarded) identity, which fences the
    # session that held the transaction.
    after = describe(broker.bootstrap, "app-long")
    assert after.state == "Empty"
    assert (after.producer_id, after.producer_epoch) > (held.producer_id, held.producer_epoch)
    # The LSO moved on: the later commit is visible, the terminated transaction never.
    assert read_all(broker.bootstrap, topic) == ["after"]
    # The session that held it is fenced.
    with pytest.raises(ProducerFencedError):
        held.commit_transaction()
    held.close()
    plain.close()


def test_force_terminate_without_an_open_transaction(broker: EmbeddedBroker) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.force_terminate_transaction("never-used")  # nothing to abort: a new, idle id
        assert describe(broker.bootstrap, "never-used").state == "Empty"
        admin.force_terminate_transaction("never-used")  # and again
        assert describe(broker.bootstrap, "never-used").producer_epoch == 1
        with pytest.raises(ValueError):
            admin.force_terminate_transaction("")
