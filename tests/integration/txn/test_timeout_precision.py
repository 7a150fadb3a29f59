"""Transaction timeouts and KIP-1309 session timeouts fire at their deadline, not a cleanup
interval later (issue 17): the coordinator reports its next deadline (sans-IO, explicit time),
and over TCP, with transaction.abort.timed.out.transaction.cleanup.interval.ms left at its
10 s default, a 1 s transaction timeout and a 1 s session timeout abort within a fraction of a
second of their deadline (the bound asserted is loose: a loaded machine is slow, not wrong)."""

from __future__ import annotations

import contextlib
import datetime
import time

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from exactly.txn import TransactionCoordinator, TxnState
from tests.helpers.server.acl import wire
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN
from tests.helpers.txn.helpers import begin, state
from tests.rawclient import RawConnection


def test_next_deadline_is_the_earliest_timeout_or_session_end(coord: TransactionCoordinator
                                                              ) -> None:
    assert coord.next_deadline_ms() is None
    begin(coord, now=T0)
    assert coord.next_deadline_ms() == T0 + TIMEOUT + 1  # `tick` aborts strictly after
    r = coord.init_producer_id("with-session", TIMEOUT, now_ms=T0 + 10, session_timeout_ms=1000)
    coord.add_partitions("with-session", r.producer_id, r.producer_epoch, [("orders", 2)],
                         now_ms=T0 + 20)
    assert coord.next_deadline_ms() == T0 + 20 + 1000 + 1
    assert coord.tick(T0 + 1020) == []
    assert len(coord.tick(T0 + 1021)) == 1
    assert coord.next_deadline_ms() == T0 + TIMEOUT + 1
    assert len(coord.tick(T0 + TIMEOUT + 1)) == 1
    assert state(coord, TXN) is TxnState.PREPARE_ABORT
    assert coord.next_deadline_ms() is None


def _state(conn: RawConnection, txn_id: str) -> str:
    r = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(txn_id,))
    return str(r.transaction_states[0].transaction_state)


def test_abort_comes_at_the_deadline_not_at_the_cleanup_interval() -> None:
    second = datetime.timedelta(seconds=1)
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker, \
            contextlib.closing(RawConnection(broker.host, broker.port)) as conn:
        assert wire.create_topic(conn, "precise", validate_only=False) == ErrorCode.none
        begun = {}
        for txn_id, timeout, session_ms in (("by-timeout", second, -1),
                                            ("by-session", 60 * second, 1000)):
            r = conn.request(ApiKey.INIT_PRODUCER_ID, 7, transactional_id=txn_id,
                             transaction_timeout=timeout,
                             transaction_session_timeout_ms=session_ms)
            assert r.error_code == ErrorCode.none, r
            assert wire.add_partitions(conn, txn_id, r.producer_id, r.producer_epoch,
                                       "precise") == ErrorCode.none
            begun[txn_id] = time.monotonic()  # the deadline is at most 1 s after this
        aborted: dict[str, float] = {}
        while len(aborted) < 2 and time.monotonic() < min(begun.values()) + 9:
            for txn_id in begun.keys() - aborted.keys():
                if _state(conn, txn_id) != "Ongoing":
                    aborted[txn_id] = time.monotonic() - begun[txn_id]
            time.sleep(0.02)
        # The cleanup interval is 10 s: aborts at ~1 s mean the deadline fired them.
        assert set(aborted) == {"by-timeout", "by-session"}, aborted
        assert all(0.9 <= late < 3.0 for late in aborted.values()), aborted
