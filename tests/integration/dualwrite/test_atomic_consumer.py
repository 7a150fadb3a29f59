"""Atomic consumption (the seed's first recipe): what was consumed and the consumed offsets go
into the database in one transaction, and the consumer resumes from the offsets in the
database. kill -9 at each step of the recipe, then a restart: every committed record is in the
database exactly once, no aborted one is."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import pytest

from exactly.client import Producer, TransactionSession
from exactly.dualwrite import AtomicConsumer
from exactly.testing import EmbeddedBroker
from tests.helpers.dualwrite.consumer_worker import CONSUMED_DDL
from tests.helpers.dualwrite.helpers import CONSUME_STEPS, Database, crash
from tests.integration.dualwrite.conftest import run_worker


def produce(bootstrap: str, topic: str) -> list[str]:
    """30 committed records, 10 aborted ones between them, 20 more committed; over 3
    partitions. Returns the committed values."""
    from tests.support import create_topic

    create_topic(bootstrap, topic, partitions=3)
    session = TransactionSession({"bootstrap.servers": bootstrap,
                                  "transactional.id": f"producer-{topic}"})
    session.initialize()
    committed = []
    with Producer({"bootstrap.servers": bootstrap}, session=session) as producer:
        for batch, (count, commit) in enumerate([(30, True), (10, False), (20, True)]):
            session.begin_transaction()
            values = [f"v{batch}-{i}" for i in range(count)]
            for i, value in enumerate(values):
                producer.send(topic, value, key=str(i))
            if commit:
                session.commit_transaction()
                committed += values
            else:
                producer.flush()
                session.abort_transaction()
    session.close()
    return committed


def consumed(db: Database) -> list[tuple[Any, ...]]:
    return db.query("SELECT partition_id, record_offset, value FROM consumed")


def assert_exactly_once(db: Database, committed: list[str]) -> None:
    rows = consumed(db)
    doubled = [k for k, n in Counter((p, o) for p, o, _ in rows).items() if n > 1]
    assert not doubled, f"records applied twice: {doubled}"
    assert sorted(v for _, _, v in rows) == sorted(committed)


@pytest.mark.parametrize("point", CONSUME_STEPS)
def test_kill_9_at_every_step_of_atomic_consumption(db: Database, dw_broker: EmbeddedBroker,
                                                    point: str) -> None:
    topic = f"consume-{db.kind}-{point[8]}"
    committed = produce(dw_broker.bootstrap, topic)
    args = [*db.args, "--bootstrap", dw_broker.bootstrap, "--topic", topic, "--group", "copier"]
    crashed = run_worker("consumer_worker", *args, fault=crash(point, 3))
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    before = len(consumed(db))
    assert 0 < before < len(committed)  # two batches went in before the crash, not all
    again = run_worker("consumer_worker", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exactly_once(db, committed)


def test_a_failed_batch_is_rewound_and_applied_once(db: Database, dw_broker: EmbeddedBroker
                                                    ) -> None:
    topic = f"consume-fail-{db.kind}"
    committed = produce(dw_broker.bootstrap, topic)
    conn = db.connect()
    conn.cursor().execute(CONSUMED_DDL)
    insert = db.sql("INSERT INTO consumed (topic, partition_id, record_offset, value) "
                    "VALUES (?, ?, ?, ?)")
    calls = []

    def handle(cursor: Any, records: list[Any]) -> None:
        calls.append(len(records))
        cursor.executemany(insert, [(r.topic, r.partition, r.offset, r.value.decode())
                                    for r in records])
        if len(calls) == 2:
            raise RuntimeError("the application failed half-way")

    with AtomicConsumer(conn, {"bootstrap.servers": dw_broker.bootstrap, "group.id": "g"},
                        topics=[topic]) as consumer:
        consumer.poll(handle, max_records=5)
        with pytest.raises(RuntimeError, match="half-way"):
            consumer.poll(handle, max_records=5)
        empty = 0
        while empty < 3:
            empty = 0 if consumer.poll(handle, timeout_ms=300, max_records=5) else empty + 1
    # A new consumer resumes where the database says: nothing more to do.
    with AtomicConsumer(conn, {"bootstrap.servers": dw_broker.bootstrap, "group.id": "g"},
                        topics=[topic]) as again:
        assert again.poll(handle, timeout_ms=500) == 0
    conn.close()
    assert_exactly_once(db, committed)
