"""kill -9 of the application at every step of the dual-write recipe (seed 000's eight, by
fault point) and during recovery, on SQLite and PostgreSQL: after a restart and recovery, the
orders in the database and the order events read with read_committed are the same set, each
event exactly once."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from exactly.testing import EmbeddedBroker
from tests.helpers.dualwrite.helpers import RECOVERY_STEPS, STEPS, Database, crash, event_ids
from tests.integration.dualwrite.conftest import run_worker
from tests.support import create_topic

KILLED = -signal.SIGKILL
CRASH_AT = 3  # the 3rd time the step is reached: two orders went through before the crash

# What recovery must do with the log transaction left by a crash after each step.
OUTCOME = {
    "1-begin-database-transaction": {"none"},           # nothing reached the broker
    "2-begin-transaction": {"none"},
    "3-send": {"none", "abort"},                       # the record may not have left the client
    "4-prepare-transaction": {"abort"},                 # prepared, its state never stored
    "5-update-data": {"none", "abort"},
    "6-update-transaction-state": {"abort"},            # stored, but not committed
    "7-commit-database-transaction": {"commit"},        # committed in the database: the decision
    "8-commit-transaction": {"none"},                   # both committed already
}


def orders_in(db: Database) -> list[int]:
    return sorted(row[0] for row in db.query("SELECT id FROM orders"))


def assert_consistent(db: Database, bootstrap: str, topic: str) -> list[int]:
    orders = orders_in(db)
    events = event_ids(bootstrap, topic)
    duplicated = [i for i, n in Counter(events).items() if n > 1]
    assert not duplicated, f"events written more than once: {duplicated}"
    assert sorted(events) == orders, (f"database orders {orders} != read_committed events "
                                      f"{sorted(events)}")
    return orders


def worker(db: Database, bootstrap: str, txn_id: str, topic: str, orders: str,
           fault: str | None = None):
    return run_worker("worker", *db.args, "--bootstrap", bootstrap, "--transactional-id", txn_id,
                      "--topic", topic, "--orders", orders, fault=fault)


def outcome_of(proc) -> str:
    lines = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("recovered")]
    assert lines, f"the worker did not recover:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return lines[0]


def crash_then_recover(db: Database, broker: EmbeddedBroker, name: str, fault: str) -> str:
    """Orders 0..4 with the worker killed at `fault`; then a clean run (orders 10, 11) that
    recovers first. Returns the recovery outcome."""
    topic, txn_id = f"orders-{name}", f"order-service-{name}"
    create_topic(broker.bootstrap, topic, partitions=2)
    crashed = worker(db, broker.bootstrap, txn_id, topic, "0:5", fault=fault)
    assert crashed.returncode == KILLED, (f"the worker did not die at {fault} "
                                          f"(exit {crashed.returncode}):\n{crashed.stderr[-3000:]}")
    again = worker(db, broker.bootstrap, txn_id, topic, "10:2")
    assert again.returncode == 0, again.stderr[-3000:]
    return outcome_of(again)


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_at_every_step(db: Database, dw_broker: EmbeddedBroker, step: str) -> None:
    name = f"{db.kind}-step{step[0]}"
    outcome = crash_then_recover(db, dw_broker, name, crash(step, CRASH_AT))
    assert outcome in OUTCOME[step]
    orders = assert_consistent(db, dw_broker.bootstrap, f"orders-{name}")
    crashed_order = CRASH_AT - 1
    committed = step in ("7-commit-database-transaction", "8-commit-transaction")
    assert orders == sorted({0, 1, 10, 11} | ({crashed_order} if committed else set()))


@pytest.mark.parametrize("point", RECOVERY_STEPS)
@pytest.mark.parametrize("first", ["7-commit-database-transaction", "6-update-transaction-state"])
def test_kill_9_during_recovery(db: Database, dw_broker: EmbeddedBroker, first: str,
                                point: str) -> None:
    """A crash leaves a prepared log transaction (to commit after step 7, to abort after step
    6); the next run dies in the middle of recovering it; the one after that finishes."""
    name = f"{db.kind}-rec{first[0]}-{RECOVERY_STEPS.index(point)}"
    topic, txn_id = f"orders-{name}", f"order-service-{name}"
    create_topic(dw_broker.bootstrap, topic, partitions=2)
    assert worker(db, dw_broker.bootstrap, txn_id, topic, "0:5",
                  fault=crash(first, CRASH_AT)).returncode == KILLED
    in_recovery = worker(db, dw_broker.bootstrap, txn_id, topic, "20:2", fault=crash(point))
    assert in_recovery.returncode == KILLED, in_recovery.stderr[-3000:]
    again = worker(db, dw_broker.bootstrap, txn_id, topic, "10:2")
    assert again.returncode == 0, again.stderr[-3000:]
    orders = assert_consistent(db, dw_broker.bootstrap, topic)
    committed = first.startswith("7")
    assert orders == sorted({0, 1, 10, 11} | ({2} if committed else set()))
    # Dying after complete_transaction leaves nothing for the next run; before it, the same
    # decision is taken again.
    expected = {"none"} if point == "recovery-2-complete-transaction" else (
        {"commit"} if committed else {"abort"})
    assert outcome_of(again) in expected
