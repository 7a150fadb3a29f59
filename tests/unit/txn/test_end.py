"""EndTxn: the KIP-98 steps, retries, and the epoch bump of KIP-890 part 2."""

from __future__ import annotations

import pytest

from exactly.protocol.errors import ErrorCode
from exactly.txn import TransactionCoordinator, TxnState
from tests.helpers.txn.fixtures import T0, TXN, Env
from tests.helpers.txn.helpers import P0, P1, P2, begin, init, log_end, state


@pytest.mark.parametrize("commit", [True, False])
def test_end_writes_prepare_and_returns_markers(coord: TransactionCoordinator,
                                                commit: bool) -> None:
    pid, epoch = begin(coord)
    end = log_end(coord)
    r = coord.end_txn(TXN, pid, epoch, commit, bump_epoch=False, now_ms=T0 + 5)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch)
    assert r.markers is not None
    m = r.markers
    assert (m.transactional_id, m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch,
            m.partitions) == (TXN, pid, epoch, commit, 3, [P0, P1])
    assert log_end(coord) == end + 1
    assert state(coord) is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    assert coord.pending_markers() == [m]
    assert coord.markers_written(TXN, T0 + 6) == (pid, epoch)
    meta = coord.describe(TXN)
    assert meta is not None
    assert meta.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert (meta.partitions, meta.txn_last_update_ms, meta.txn_start_ms) == (set(), T0 + 6, T0)
    assert coord.pending_markers() == []
    assert log_end(coord) == end + 2
    # Calling it again is harmless.
    assert coord.markers_written(TXN, T0 + 7) == (pid, epoch)
    assert log_end(coord) == end + 2


def test_a_failed_complete_write_leaves_the_prepared_state(
        coord: TransactionCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """markers_written builds CompleteX apart from the current PrepareX (no copy of its own, issue
    19): a failed write of it leaves PrepareX as it was, and the markers still pending."""
    from exactly.log.errors import StorageError

    pid, epoch = begin(coord)
    markers = coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 5).markers
    before = coord.describe(TXN)

    def fail(*args: object, **kwargs: object) -> None:
        raise StorageError("disk full")

    monkeypatch.setattr(coord.state_manager.txn_log, "write", fail)
    with pytest.raises(StorageError):
        coord.markers_written(TXN, T0 + 6)
    assert coord.describe(TXN) == before and coord.pending_markers() == [markers]
    monkeypatch.undo()
    assert coord.markers_written(TXN, T0 + 7) == (pid, epoch + 1)
    assert state(coord) is TxnState.COMPLETE_COMMIT


@pytest.mark.parametrize("commit", [True, False])
def test_retry_after_complete_succeeds(coord: TransactionCoordinator, commit: bool) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, commit, bump_epoch=False, now_ms=T0 + 1)
    # While the markers are being written: retriable.
    r = coord.end_txn(TXN, pid, epoch, commit, bump_epoch=False, now_ms=T0 + 2)
    assert (r.error, r.markers) == (ErrorCode.concurrent_transactions, None)
    coord.markers_written(TXN, T0 + 3)
    end = log_end(coord)
    r = coord.end_txn(TXN, pid, epoch, commit, bump_epoch=False, now_ms=T0 + 4)
    assert (r.error, r.producer_id, r.producer_epoch, r.markers) == (
        ErrorCode.none, pid, epoch, None)
    assert log_end(coord) == end


@pytest.mark.parametrize("commit", [True, False])
def test_opposite_command_is_invalid_txn_state(coord: TransactionCoordinator,
                                               commit: bool) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, commit, bump_epoch=False, now_ms=T0 + 1)
    r = coord.end_txn(TXN, pid, epoch, not commit, bump_epoch=False, now_ms=T0 + 2)
    assert r.error == ErrorCode.invalid_txn_state  # against PrepareX
    coord.markers_written(TXN, T0 + 3)
    r = coord.end_txn(TXN, pid, epoch, not commit, bump_epoch=False, now_ms=T0 + 4)
    assert r.error == ErrorCode.invalid_txn_state  # against CompleteX


def test_end_errors(coord: TransactionCoordinator) -> None:
    assert (coord.end_txn("", 1, 0, True, bump_epoch=False, now_ms=T0).error
            == ErrorCode.invalid_request)
    assert coord.end_txn("nope", 1, 0, True, bump_epoch=False,
                         now_ms=T0).error == ErrorCode.invalid_producer_id_mapping
    pid, epoch = begin(coord)
    assert coord.end_txn(TXN, pid + 1, epoch, True, bump_epoch=False,
                         now_ms=T0).error == ErrorCode.invalid_producer_id_mapping
    assert coord.end_txn(TXN, pid, epoch + 1, True, bump_epoch=False,
                         now_ms=T0).error == ErrorCode.producer_fenced
    assert coord.end_txn(TXN, pid, epoch - 1, True, bump_epoch=False,
                         now_ms=T0).error == ErrorCode.producer_fenced
    assert state(coord) is TxnState.ONGOING


@pytest.mark.parametrize("commit", [True, False])
def test_end_on_empty_is_invalid_txn_state(coord: TransactionCoordinator, commit: bool) -> None:
    pid, epoch = init(coord)
    r = coord.end_txn(TXN, pid, epoch, commit, bump_epoch=False, now_ms=T0 + 1)
    assert r.error == ErrorCode.invalid_txn_state


def test_stale_epoch_after_fence(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    coord.init_producer_id(TXN, 60_000, now_ms=T0 + 1)  # fence: PrepareAbort with epoch + 1
    assert coord.end_txn(TXN, pid, epoch, True, bump_epoch=False,
                         now_ms=T0 + 2).error == ErrorCode.producer_fenced
    assert coord.end_txn(TXN, pid, epoch + 1, False, bump_epoch=False,
                         now_ms=T0 + 2).error == ErrorCode.concurrent_transactions


def test_commit_offsets_partition_in_markers(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord, partitions=(P2,))
    coord.add_offsets(TXN, pid, epoch, "g", ("__consumer_offsets", 3), now_ms=T0)
    r = coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    assert r.markers is not None
    assert r.markers.partitions == [("__consumer_offsets", 3), P2]


# -- KIP-890 part 2: bump on every EndTxn ------------------------------------------------------


def test_bump_epoch_commit(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    r = coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 1)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert r.markers is not None
    assert (r.markers.producer_id, r.markers.producer_epoch) == (pid, epoch + 1)
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.producer_epoch, meta.prev_producer_id, meta.next_producer_id,
            meta.client_transaction_version) == (TxnState.PREPARE_COMMIT, epoch + 1, -1, -1, 2)
    # KIP-939's layout: PrevProducerId only where the client's id differs from ProducerId.
    assert coord.markers_written(TXN, T0 + 2) == (pid, epoch + 1)
    # The next transaction uses the bumped epoch.
    assert coord.add_partitions(TXN, pid, epoch + 1, [P2], now_ms=T0 + 3) == {P2: ErrorCode.none}


def test_bump_epoch_retry_while_prepared_and_after_complete(coord: TransactionCoordinator,
                                                            ) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 1)
    r = coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 2)
    assert r.error == ErrorCode.concurrent_transactions
    coord.markers_written(TXN, T0 + 3)
    end = log_end(coord)
    r = coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 4)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert log_end(coord) == end
    # A retry with the other command is not a retry.
    r = coord.end_txn(TXN, pid, epoch, False, bump_epoch=True, now_ms=T0 + 5)
    assert r.error == ErrorCode.invalid_txn_state
    # Committing again with the bumped epoch: that transaction never began.
    r = coord.end_txn(TXN, pid, epoch + 1, True, bump_epoch=True, now_ms=T0 + 6)
    assert r.error == ErrorCode.invalid_txn_state


def test_bump_epoch_overflow_rotates_producer_id(coord: TransactionCoordinator) -> None:
    pid, _ = init(coord)
    coord.state_manager._txns[TXN].producer_epoch = 32766  # the last epoch a client may hold
    coord.add_partitions(TXN, pid, 32766, [P0], now_ms=T0)
    r = coord.end_txn(TXN, pid, 32766, True, bump_epoch=True, now_ms=T0 + 1)
    assert r.error == ErrorCode.none
    new_pid = r.producer_id
    assert new_pid != pid and r.producer_epoch == 0
    assert r.markers is not None
    assert (r.markers.producer_id, r.markers.producer_epoch) == (pid, 32767)
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.prev_producer_id,
            meta.next_producer_id) == (TxnState.PREPARE_COMMIT, pid, 32767, -1, new_pid)
    # The client already has the new id: it retries while the markers are written.
    assert coord.add_partitions(TXN, new_pid, 0, [P1], now_ms=T0 + 2) == {
        P1: ErrorCode.concurrent_transactions}
    assert coord.end_txn(TXN, pid, 32766, True, bump_epoch=True,
                         now_ms=T0 + 2).error == ErrorCode.concurrent_transactions
    assert coord.end_txn(TXN, new_pid, 0, True, bump_epoch=True,
                         now_ms=T0 + 2).error == ErrorCode.concurrent_transactions
    assert coord.init_producer_id(TXN, 60_000, new_pid, 0,
                                  now_ms=T0 + 2).error == ErrorCode.concurrent_transactions
    assert coord.markers_written(TXN, T0 + 3) == (new_pid, 0)
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.prev_producer_id,
            meta.next_producer_id) == (TxnState.COMPLETE_COMMIT, new_pid, 0, pid, -1)
    # A retried EndTxn with the old identity succeeds with the new one.
    r = coord.end_txn(TXN, pid, 32766, True, bump_epoch=True, now_ms=T0 + 4)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, new_pid, 0)
    assert coord.add_partitions(TXN, new_pid, 0, [P1], now_ms=T0 + 5) == {P1: ErrorCode.none}


def test_delayed_end_with_old_epoch_cannot_touch_new_transaction(
        coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, False, bump_epoch=True, now_ms=T0 + 1)
    coord.markers_written(TXN, T0 + 2)
    coord.add_partitions(TXN, pid, epoch + 1, [P2], now_ms=T0 + 3)  # the next transaction
    before = coord.describe(TXN)
    end = log_end(coord)
    for commit in (True, False):
        r = coord.end_txn(TXN, pid, epoch, commit, bump_epoch=True, now_ms=T0 + 4)
        assert (r.error, r.markers) == (ErrorCode.producer_fenced, None)
    assert coord.describe(TXN) == before
    assert log_end(coord) == end
    assert state(coord) is TxnState.ONGOING


def test_bump_epoch_abort_of_empty_transaction(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    r = coord.end_txn(TXN, pid, epoch, False, bump_epoch=True, now_ms=T0 + 1)
    assert (r.error, r.producer_id, r.producer_epoch, r.markers) == (
        ErrorCode.none, pid, epoch + 1, None)
    assert state(coord) is TxnState.COMPLETE_ABORT
    assert coord.pending_markers() == []
    # Empty commit is still not allowed; empty abort again (a new, empty transaction) is.
    assert coord.end_txn(TXN, pid, epoch + 1, True, bump_epoch=True,
                         now_ms=T0 + 2).error == ErrorCode.invalid_txn_state
    r = coord.end_txn(TXN, pid, epoch + 1, False, bump_epoch=True, now_ms=T0 + 3)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, epoch + 2)
    # The retry of that abort is recognised as a retry.
    r = coord.end_txn(TXN, pid, epoch + 1, False, bump_epoch=True, now_ms=T0 + 4)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, epoch + 2)
    assert state(coord) is TxnState.COMPLETE_ABORT


def test_bump_epoch_retry_after_restart(env: Env) -> None:
    coord = env.coordinator
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 1)
    coord.markers_written(TXN, T0 + 2)
    coord = env.restart(T0 + 3)
    r = coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 4)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)


def test_old_client_end_does_not_bump(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 1)
    coord.markers_written(TXN, T0 + 2)
    coord.add_partitions(TXN, pid, epoch + 1, [P0], now_ms=T0 + 3)
    r = coord.end_txn(TXN, pid, epoch + 1, True, bump_epoch=False, now_ms=T0 + 4)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, epoch + 1)
    meta = coord.describe(TXN)
    assert meta is not None and meta.client_transaction_version == 0
