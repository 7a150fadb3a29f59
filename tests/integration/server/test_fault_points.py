"""The broker dies at a named fault point in the middle of a commit (DESIGN invariant 4): once
the PrepareCommit record is durable the outcome is fixed, and after a restart the coordinator
rolls the transaction forward; the client's own retried commit then succeeds."""

import os
import signal
import threading

import pytest
from confluent_kafka import Producer

from exactly import failpoints
from exactly.testing import EmbeddedBroker
from tests.support import create_topic
from tests.system.interop.test_transactions import read_all


@pytest.mark.parametrize("point", ["txn.after_prepare", "txn.after_markers"])
def test_commit_is_rolled_forward_after_a_crash_at(point):
    env = {**os.environ, failpoints.ENV: f"{point}=crash"}
    with EmbeddedBroker(env=env) as broker:  # default flush policy: fsync
        create_topic(broker.bootstrap, "crash-commit", partitions=3)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t-crash",
                             "transaction.timeout.ms": 60000})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(30):
            producer.produce("crash-commit", key=str(i), value=f"v{i}")
        producer.flush(30)

        outcome: list[BaseException | None] = []

        def commit():
            try:
                producer.commit_transaction(60)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - reported below
                outcome.append(exc)

        committer = threading.Thread(target=commit)
        committer.start()
        assert broker.process.wait(timeout=30) == -signal.SIGKILL, \
            "the broker did not stop at the fault point"
        broker.env = {k: v for k, v in env.items() if k != failpoints.ENV}
        broker.start()
        committer.join(60)
        assert outcome == [None], f"commit_transaction failed: {outcome}"
        assert sorted(read_all(broker.bootstrap, "crash-commit", at_least=30)) == \
            sorted(f"v{i}" for i in range(30))
