"""InitProducerId with a transactional id: new ids, epoch bumps, overflow, fencing, KIP-360."""

from __future__ import annotations

from exactly.protocol.errors import ErrorCode
from exactly.txn import TransactionCoordinator, TxnState
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN, Env
from tests.helpers.txn.helpers import P0, P1, begin, init, log_end, state


def test_new_id_gets_new_producer_id_epoch_0(coord: TransactionCoordinator) -> None:
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0)
    assert (r.error, r.producer_epoch, r.markers) == (ErrorCode.none, 0, None)
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (r.producer_id, 0,
                                                                   TxnState.EMPTY)
    assert (meta.txn_timeout_ms, meta.txn_last_update_ms) == (TIMEOUT, T0)
    assert log_end(coord) == 1
    other = coord.init_producer_id("txn-b", TIMEOUT, now_ms=T0)
    assert other.producer_id != r.producer_id


def test_empty_transactional_id_is_invalid_request(coord: TransactionCoordinator) -> None:
    assert coord.init_producer_id("", TIMEOUT, now_ms=T0).error == ErrorCode.invalid_request


def test_timeout_bounds(coord: TransactionCoordinator) -> None:
    for bad in (0, -1, 900_001):
        assert (coord.init_producer_id(TXN, bad, now_ms=T0).error
                == ErrorCode.invalid_transaction_timeout)
    assert coord.describe(TXN) is None
    assert coord.init_producer_id(TXN, 900_000, now_ms=T0).error == ErrorCode.none


def test_half_given_producer_identity_is_invalid(coord: TransactionCoordinator) -> None:
    assert coord.init_producer_id(TXN, TIMEOUT, 5, -1, now_ms=T0).error == ErrorCode.invalid_request


def test_existing_id_bumps_epoch_and_takes_new_timeout(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    r = coord.init_producer_id(TXN, 5000, now_ms=T0 + 1)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    meta = coord.describe(TXN)
    assert meta is not None and meta.txn_timeout_ms == 5000
    assert log_end(coord) == 2


def test_bump_from_complete_states(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    coord.markers_written(TXN, T0 + 2)
    assert state(coord) is TxnState.COMPLETE_COMMIT
    assert init(coord, now=T0 + 3) == (pid, epoch + 1)
    assert state(coord) is TxnState.EMPTY
    meta = coord.describe(TXN)
    assert meta is not None and meta.partitions == set()


def test_epoch_overflow_gives_new_producer_id(env: Env) -> None:
    coord = env.coordinator
    pid, _ = init(coord)
    coord.state_manager._txns[TXN].producer_epoch = 32765  # as if bumped 32765 times
    assert init(coord, now=T0 + 1) == (pid, 32766)  # the last epoch a client gets
    new_pid, epoch = init(coord, now=T0 + 2)
    assert new_pid != pid and epoch == 0
    meta = coord.describe(TXN)
    assert meta is not None and meta.prev_producer_id == pid
    assert init(coord, now=T0 + 3) == (new_pid, 1)


def test_ongoing_is_fenced_then_retry_succeeds(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 10)
    assert r.error == ErrorCode.concurrent_transactions
    assert r.markers is not None
    m = r.markers
    assert (m.transactional_id, m.producer_id, m.producer_epoch, m.commit) == (
        TXN, pid, epoch + 1, False)
    assert (m.partitions, m.coordinator_epoch) == ([P0, P1], 3)
    assert state(coord) is TxnState.PREPARE_ABORT
    # The fenced producer can no longer do anything with its epoch.
    assert coord.end_txn(TXN, pid, epoch, True, bump_epoch=False,
                         now_ms=T0 + 11).error == ErrorCode.producer_fenced
    # Until the markers are written, the new instance must retry.
    again = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 12)
    assert (again.error, again.markers) == (ErrorCode.concurrent_transactions, None)
    assert coord.markers_written(TXN, T0 + 13) == (pid, epoch + 1)
    assert state(coord) is TxnState.COMPLETE_ABORT
    assert init(coord, now=T0 + 14) == (pid, epoch + 2)


def test_prepare_states_answer_concurrent_transactions(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    before = log_end(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 2)
    assert (r.error, r.markers) == (ErrorCode.concurrent_transactions, None)
    assert log_end(coord) == before
    assert state(coord) is TxnState.PREPARE_COMMIT


# -- KIP-360: InitProducerId with the producer's current id and epoch ---------------------------


def test_kip360_bump_with_current_identity(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, pid, epoch, now_ms=T0 + 1)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    # The answer was lost; the retry with the same identity gets the same answer, no new epoch
    # (as Kafka's prepareIncrementProducerEpoch, Empty is written again with the new timeout).
    r2 = coord.init_producer_id(TXN, TIMEOUT * 2, pid, epoch, now_ms=T0 + 2)
    assert (r2.error, r2.producer_id, r2.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    meta = coord.describe(TXN)
    assert meta is not None and (meta.state, meta.txn_timeout_ms) == (TxnState.EMPTY,
                                                                      TIMEOUT * 2)


def test_kip360_recovery_of_an_ongoing_transaction(coord: TransactionCoordinator) -> None:
    """InitProducerId with the current identity while a transaction is open: the coordinator
    aborts it with epoch + 1 and the producer goes on with that epoch (Kafka 4.4's answer; the
    conformance case txn.init_producer_id_recover_ongoing)."""
    pid, epoch = begin(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, pid, epoch, now_ms=T0 + 1)
    assert r.error == ErrorCode.concurrent_transactions and r.markers is not None
    coord.markers_written(TXN, T0 + 2)
    r2 = coord.init_producer_id(TXN, TIMEOUT, pid, epoch, now_ms=T0 + 3)
    assert (r2.error, r2.producer_id, r2.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert state(coord) is TxnState.EMPTY
    # The old epoch is fenced now.
    assert coord.end_txn(TXN, pid, epoch, False, bump_epoch=True,
                         now_ms=T0 + 4).error == ErrorCode.producer_fenced


def test_kip360_stale_epoch_is_fenced(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    init(coord, now=T0 + 1)  # another instance: epoch + 1, last epoch forgotten
    init(coord, now=T0 + 2)
    r = coord.init_producer_id(TXN, TIMEOUT, pid, epoch, now_ms=T0 + 3)
    assert r.error == ErrorCode.producer_fenced


def test_kip360_wrong_producer_id_is_fenced(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, pid + 100, epoch, now_ms=T0 + 1)
    assert r.error == ErrorCode.producer_fenced


def test_kip360_unknown_id_gets_a_new_producer(coord: TransactionCoordinator) -> None:
    r = coord.init_producer_id(TXN, TIMEOUT, 777, 3, now_ms=T0)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 0)


def test_kip360_overflow_rotation_and_retry(coord: TransactionCoordinator) -> None:
    pid, _ = init(coord)
    coord.state_manager._txns[TXN].producer_epoch = 32766
    r = coord.init_producer_id(TXN, TIMEOUT, pid, 32766, now_ms=T0 + 1)
    assert r.error == ErrorCode.none and r.producer_id != pid and r.producer_epoch == 0
    # A retry naming the old id and its exhausted epoch gets the same new identity.
    r2 = coord.init_producer_id(TXN, TIMEOUT, pid, 32766, now_ms=T0 + 2)
    assert (r2.error, r2.producer_id, r2.producer_epoch) == (ErrorCode.none, r.producer_id, 0)


def test_kip360_stale_epoch_does_not_abort_ongoing(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    pid, epoch2 = begin(coord, now=T0 + 1)  # a new instance (epoch + 1) began a transaction
    r = coord.init_producer_id(TXN, TIMEOUT, pid, epoch, now_ms=T0 + 2)
    assert (r.error, r.markers) == (ErrorCode.producer_fenced, None)
    assert state(coord) is TxnState.ONGOING
    # With the current identity the producer recovers: its transaction is aborted first.
    r = coord.init_producer_id(TXN, TIMEOUT, pid, epoch2, now_ms=T0 + 3)
    assert r.error == ErrorCode.concurrent_transactions and r.markers is not None
