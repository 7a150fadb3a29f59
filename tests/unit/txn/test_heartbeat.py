"""KIP-1309 in the coordinator, time as a number: a session timeout announced with InitProducerId
v7, TxnHeartbeat keeping an Ongoing transaction alive, the tick aborting one whose producer went
silent long before transaction.timeout.ms, never a 2PC (prepared) transaction."""

from __future__ import annotations

from exactly.protocol.errors import ErrorCode
from exactly.txn import TransactionCoordinator, TxnState
from exactly.txn.codec import TxnLogValue, decode_value, encode_value
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN, Env
from tests.helpers.txn.helpers import P0, P1, state

INTERVAL = 100
SESSION = 3 * INTERVAL


def begin_session(coord: TransactionCoordinator, *, session: int = SESSION, now: int = T0,
                  enable_2pc: bool = False) -> tuple[int, int]:
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=now, session_timeout_ms=session,
                               enable_2pc=enable_2pc)
    assert r.error == ErrorCode.none, r
    added = coord.add_partitions(TXN, r.producer_id, r.producer_epoch, [P0, P1], now_ms=now)
    assert set(added.values()) == {ErrorCode.none}
    return r.producer_id, r.producer_epoch


def test_silent_producer_is_aborted_after_the_session_timeout(coord: TransactionCoordinator,
                                                              ) -> None:
    pid, epoch = begin_session(coord)
    assert coord.tick(T0 + SESSION) == []  # at the deadline, not past it
    markers = coord.tick(T0 + SESSION + 1)
    assert [(m.producer_id, m.producer_epoch, m.commit, m.partitions) for m in markers] == [
        (pid, epoch + 1, False, [P0, P1])]
    assert state(coord) is TxnState.PREPARE_ABORT
    assert coord.expired_aborts == {"timeout": 0, "session": 1}
    assert SESSION + 1 < TIMEOUT  # long before the transaction timeout
    # The silent producer is fenced: its heartbeat and its commit say so.
    coord.markers_written(TXN, T0 + SESSION + 2)
    assert coord.heartbeat(TXN, pid, epoch, now_ms=T0 + SESSION + 3) == ErrorCode.producer_fenced
    assert coord.end_txn(TXN, pid, epoch, True, bump_epoch=False,
                         now_ms=T0 + SESSION + 3).error == ErrorCode.producer_fenced


def test_heartbeats_keep_the_transaction_past_three_intervals(coord: TransactionCoordinator,
                                                              ) -> None:
    pid, epoch = begin_session(coord)
    now = T0
    for _ in range(10):  # 10 intervals: more than three times over the session timeout
        now += INTERVAL
        assert coord.heartbeat(TXN, pid, epoch, now_ms=now) == ErrorCode.none
        assert coord.tick(now) == []
    assert state(coord) is TxnState.ONGOING
    assert coord.tick(now + SESSION) == []
    assert len(coord.tick(now + SESSION + 1)) == 1  # silence again: aborted


def test_adding_partitions_counts_as_a_sign_of_life(coord: TransactionCoordinator) -> None:
    pid, epoch = begin_session(coord)
    later = T0 + SESSION - 1
    assert coord.add_partitions(TXN, pid, epoch, [P0], now_ms=later) == {P0: ErrorCode.none}
    assert coord.tick(T0 + SESSION + 1) == []
    assert len(coord.tick(later + SESSION + 1)) == 1


def test_no_session_only_the_transaction_timeout(coord: TransactionCoordinator) -> None:
    begin_session(coord, session=-1)
    assert coord.tick(T0 + TIMEOUT) == []
    assert len(coord.tick(T0 + TIMEOUT + 1)) == 1
    assert coord.expired_aborts == {"timeout": 1, "session": 0}


def test_two_phase_transaction_is_never_aborted_by_a_missing_heartbeat(
        coord: TransactionCoordinator) -> None:
    """Invariant 5: a 2PC transaction (prepared or about to be) waits for its decision; the
    session the client asked for is not kept, and days of silence abort nothing."""
    pid, epoch = begin_session(coord, enable_2pc=True)
    meta = coord.describe(TXN)
    assert meta is not None and meta.session_timeout_ms == -1
    assert coord.tick(T0 + 10 * 24 * 3600 * 1000) == []
    assert state(coord) is TxnState.ONGOING
    assert coord.end_txn(TXN, pid, epoch, True, bump_epoch=False,
                         now_ms=T0 + 1).error == ErrorCode.none


def test_kept_two_phase_transaction_has_no_session(coord: TransactionCoordinator) -> None:
    """KIP-939 recovery (KeepPreparedTxn) of a prepared transaction: still no session."""
    begin_session(coord, enable_2pc=True)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, enable_2pc=True,
                               keep_prepared_txn=True, session_timeout_ms=SESSION)
    assert r.error == ErrorCode.none
    assert coord.tick(T0 + 100 * SESSION) == []
    assert state(coord) is TxnState.ONGOING


def test_heartbeat_checks_the_identity_as_end_txn_does(coord: TransactionCoordinator) -> None:
    pid, epoch = begin_session(coord)
    assert coord.heartbeat(TXN, pid, epoch - 1, now_ms=T0) == ErrorCode.producer_fenced
    assert coord.heartbeat(TXN, pid + 1, epoch, now_ms=T0) == \
        ErrorCode.invalid_producer_id_mapping
    assert coord.heartbeat("unknown", pid, epoch, now_ms=T0) == \
        ErrorCode.invalid_producer_id_mapping
    assert coord.heartbeat("", pid, epoch, now_ms=T0) == ErrorCode.invalid_request
    # A newer session of the id fences this one (its transaction is aborted on the way).
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, session_timeout_ms=SESSION)
    assert r.error == ErrorCode.concurrent_transactions and r.markers is not None
    assert coord.heartbeat(TXN, pid, epoch, now_ms=T0 + 2) == ErrorCode.producer_fenced
    coord.markers_written(TXN, T0 + 2)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 3, session_timeout_ms=SESSION)
    assert r.error == ErrorCode.none
    assert coord.heartbeat(TXN, pid, epoch, now_ms=T0 + 4) == ErrorCode.producer_fenced
    # The new session, idle (no transaction yet), may heartbeat.
    assert coord.heartbeat(TXN, r.producer_id, r.producer_epoch, now_ms=T0 + 4) == ErrorCode.none


def test_bad_session_timeout_is_refused(coord: TransactionCoordinator) -> None:
    for bad in (0, -2, 900_001):
        assert coord.init_producer_id(TXN, TIMEOUT, now_ms=T0, session_timeout_ms=bad).error \
            == ErrorCode.invalid_transaction_timeout


def test_restart_gives_an_open_transaction_a_fresh_deadline(env: Env) -> None:
    """The session timeout is in the log; the time last heard is not: a restarted coordinator
    counts the deadline from its load, neither aborting at once nor forgetting the session."""
    begin_session(env.coordinator)
    restarted = T0 + 10 * SESSION  # long past the old deadline
    coord = env.restart(restarted)
    assert coord.tick(restarted + SESSION) == []
    assert state(coord) is TxnState.ONGOING
    assert len(coord.tick(restarted + SESSION + 1)) == 1
    assert coord.expired_aborts["session"] == 1


def test_session_timeout_round_trips_in_the_log_value() -> None:
    value = TxnLogValue(7, 1, TIMEOUT, int(TxnState.ONGOING), (("orders", (0, 1)),), T0, T0,
                        session_timeout_ms=SESSION)
    assert decode_value(encode_value(value)) == value
    plain = TxnLogValue(7, 1, TIMEOUT, int(TxnState.EMPTY), None, T0, T0)
    assert decode_value(encode_value(plain)).session_timeout_ms == -1
