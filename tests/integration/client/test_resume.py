"""TransactionSession.resume (seed 004, §4.1/§4.5): a transaction begun and written by process A,
whose producer id and epoch are handed to process B, is committed — or aborted — by B after A
is killed with kill -9; read_committed sees exactly the outcome."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from exactly.client import TransactionSession
from tests.support import create_topic
from tests.system.interop.test_transactions import read_all

WRITER = textwrap.dedent("""
    import sys, time
    from exactly.client import Producer, TransactionSession
    bootstrap, txn_id, topic = sys.argv[1:4]
    config = {"bootstrap.servers": bootstrap, "transactional.id": txn_id}
    session = TransactionSession(config)
    session.initialize()
    session.begin_transaction()
    producer = Producer({"bootstrap.servers": bootstrap}, session=session)
    for i in range(20):
        producer.send(topic, f"{txn_id}-{i}".encode(), key=str(i).encode())
    producer.flush()
    print(session.producer_id, session.producer_epoch, flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_resume_in_another_process_after_kill_9(exactly_broker, outcome):
    topic = f"resume-{outcome}"
    txn_id = f"resumable-{outcome}"
    create_topic(exactly_broker.bootstrap, topic, partitions=3)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, exactly_broker.bootstrap, txn_id, topic],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = writer.stdout.readline()
        assert line, "the writer process died before handing over its identity"
        producer_id, epoch = (int(x) for x in line.split())
    finally:
        writer.kill()
        writer.wait()

    # Process A is gone; this process (B) finishes its transaction with the identity alone.
    config = {"bootstrap.servers": exactly_broker.bootstrap, "transactional.id": txn_id}
    session = TransactionSession.resume(txn_id, producer_id, epoch, config)
    assert session.state.name == "IN_TRANSACTION"
    if outcome == "commit":
        session.commit_transaction()
    else:
        session.abort_transaction()
    session.close()

    expected = sorted(f"{txn_id}-{i}" for i in range(20)) if outcome == "commit" else []
    got = read_all(exactly_broker.bootstrap, topic, at_least=len(expected) or 0, idle=2.0)
    assert sorted(got) == expected
