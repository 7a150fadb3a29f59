"""Every path on which the coordinator bumps an epoch, started at the last epochs a producer id
has (KIP-890 "Bump Epoch on Each Transaction", KIP-939's two producer id/epoch pairs, KAFKA-20090).

A producer id has epochs 0..32767 (Short.MaxValue). A client never holds 32767 for data: it is
kept for the markers of a transaction begun at 32766, so that they still fence that transaction's
late writes. A transaction at 32766 must therefore end with its producer id rotated: its markers
go out with 32767 and the client goes on with a new producer id at epoch 0. KAFKA-20090 is the
case where the coordinator's own abort (transaction timeout, the fence of InitProducerId) bumped
to 32767 without rotating, and a late EndTxn of the fenced producer, taken for a retry, was
answered with epoch 32767: that producer began a transaction no bump could ever end.

Each test asserts, from epoch 32766 or 32765 with a transaction open:
- the transaction completes (nothing is left Ongoing or PrepareX);
- its markers carry an epoch a partition accepts (not below the data's, a valid int16) and, where
  the coordinator bumps, one above the data's, so a late write of the transaction is fenced;
- the identity the client gets next is usable: below 32767, a new producer id at epoch 0 when the
  old one is spent;
- the old identity is remembered (PrevProducerId) so a retried EndTxn gets the new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exactly.log.errors import InvalidProducerEpochError
from exactly.log.producer_state import ProducerStateManager
from exactly.protocol.errors import ErrorCode
from exactly.txn import TransactionCoordinator, TxnMarkers, TxnState
from exactly.txn.state import MAX_EPOCH
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN, Env
from tests.helpers.txn.helpers import P0, P1, P2, state

LAST = MAX_EPOCH - 1  # 32766: the last epoch a client may hold for data
SESSION = 300  # KIP-1309 session timeout of the session-abort variant


class Partition:
    """The producer state of one data partition, as the log checks each batch and marker."""

    def __init__(self, path: Path) -> None:
        self.state = ProducerStateManager(path)
        self.offset = 0
        self.sequence: dict[tuple[int, int], int] = {}

    def write(self, producer_id: int, epoch: int) -> None:
        seq = self.sequence.get((producer_id, epoch), 0)
        append = self.state.begin()
        append.add(producer_id, epoch, seq, seq, self.offset, self.offset, T0,
                   is_transactional=True)
        append.commit()
        self.sequence[(producer_id, epoch)] = seq + 1
        self.offset += 1

    def marker(self, m: TxnMarkers) -> None:
        assert 0 <= m.producer_epoch <= MAX_EPOCH  # an int16 the wire and the log can carry
        append = self.state.begin()
        append.add_marker(m.producer_id, m.producer_epoch, self.offset, T0, commit=m.commit,
                          coordinator_epoch=m.coordinator_epoch)
        append.commit()
        self.offset += 1

    def is_open(self, producer_id: int) -> bool:
        return producer_id in self.state.ongoing


@pytest.fixture
def partition(tmp_path: Path) -> Partition:
    path = tmp_path / "partition"
    path.mkdir()
    return Partition(path)


def at_epoch(coord: TransactionCoordinator, epoch: int, *, now: int = T0,
             **init_args: Any) -> tuple[int, int]:
    """InitProducerId leaves the id at `epoch`, written to the log (as if bumped that often)."""
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=now, **init_args)
    assert r.error == ErrorCode.none, r
    coord.state_manager._txns[TXN].producer_epoch = epoch - 1
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=now, **init_args)
    assert (r.error, r.producer_epoch) == (ErrorCode.none, epoch), r
    return r.producer_id, r.producer_epoch


def begin_at(coord: TransactionCoordinator, partition: Partition, epoch: int, *,
             now: int = T0, **init_args: Any) -> int:
    """A transaction open at `epoch` with data in `partition` (P0) and P1: its producer id."""
    pid, _ = at_epoch(coord, epoch, now=now, **init_args)
    assert coord.add_partitions(TXN, pid, epoch, [P0, P1], now_ms=now) == {
        P0: ErrorCode.none, P1: ErrorCode.none}
    partition.write(pid, epoch)
    assert partition.is_open(pid)
    return pid


def usable(coord: TransactionCoordinator, identity: tuple[int, int], *, now: int,
           bump_epoch: bool = True) -> None:
    """The identity begins and commits a transaction."""
    pid, epoch = identity
    assert epoch < MAX_EPOCH
    assert coord.add_partitions(TXN, pid, epoch, [P2], now_ms=now) == {P2: ErrorCode.none}
    end = coord.end_txn(TXN, pid, epoch, True, bump_epoch=bump_epoch, now_ms=now + 1)
    assert end.error == ErrorCode.none and end.markers is not None
    assert end.markers.producer_epoch >= epoch
    coord.markers_written(TXN, now + 2)
    assert state(coord) is TxnState.COMPLETE_COMMIT


def meta_of(coord: TransactionCoordinator) -> tuple[TxnState, int, int, int, int]:
    meta = coord.describe(TXN)
    assert meta is not None
    return (meta.state, meta.producer_id, meta.producer_epoch, meta.prev_producer_id,
            meta.next_producer_id)


# -- EndTxn, transaction version 2 (KIP-890): the client's own bump ---------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_v2_end_at_last_epoch_rotates_the_producer_id(coord: TransactionCoordinator,
                                                      partition: Partition, commit: bool) -> None:
    pid = begin_at(coord, partition, LAST)
    end = coord.end_txn(TXN, pid, LAST, commit, bump_epoch=True, now_ms=T0 + 1)
    assert end.error == ErrorCode.none and end.markers is not None
    new_pid = end.producer_id
    assert (end.markers.producer_id, end.markers.producer_epoch) == (pid, MAX_EPOCH)
    assert new_pid != pid and end.producer_epoch == 0
    partition.marker(end.markers)
    assert not partition.is_open(pid)
    with pytest.raises(InvalidProducerEpochError):
        partition.write(pid, LAST)  # a late write of the ended transaction is fenced
    assert coord.markers_written(TXN, T0 + 2) == (new_pid, 0)
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    assert meta_of(coord) == (done, new_pid, 0, pid, -1)
    retry = coord.end_txn(TXN, pid, LAST, commit, bump_epoch=True, now_ms=T0 + 3)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, new_pid, 0)
    usable(coord, (new_pid, 0), now=T0 + 4)


def test_v2_end_one_below_the_last_epoch(coord: TransactionCoordinator,
                                         partition: Partition) -> None:
    pid = begin_at(coord, partition, LAST - 1)
    end = coord.end_txn(TXN, pid, LAST - 1, True, bump_epoch=True, now_ms=T0 + 1)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, pid, LAST)
    assert end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch) == (pid, LAST)
    partition.marker(end.markers)
    assert coord.markers_written(TXN, T0 + 2) == (pid, LAST)
    # The next transaction is the id's last: it ends with the rotation.
    assert coord.add_partitions(TXN, pid, LAST, [P0], now_ms=T0 + 3) == {P0: ErrorCode.none}
    end = coord.end_txn(TXN, pid, LAST, False, bump_epoch=True, now_ms=T0 + 4)
    assert end.error == ErrorCode.none and end.producer_id != pid and end.producer_epoch == 0
    assert end.markers is not None and end.markers.producer_epoch == MAX_EPOCH
    partition.marker(end.markers)


# -- EndTxn, transaction version 1: no bump with the end ----------------------------------------


def test_v1_end_at_last_epoch_then_init_rotates(coord: TransactionCoordinator,
                                                partition: Partition) -> None:
    pid = begin_at(coord, partition, LAST)
    end = coord.end_txn(TXN, pid, LAST, True, bump_epoch=False, now_ms=T0 + 1)
    assert end.error == ErrorCode.none and end.markers is not None
    # Version 1: the markers carry the transaction's epoch, the client keeps its identity.
    assert (end.markers.producer_id, end.markers.producer_epoch) == (pid, LAST)
    partition.marker(end.markers)
    assert not partition.is_open(pid)
    assert coord.markers_written(TXN, T0 + 2) == (pid, LAST)
    # A retried version-1 commit is answered as before.
    assert coord.end_txn(TXN, pid, LAST, True, bump_epoch=False,
                         now_ms=T0 + 3).error == ErrorCode.none
    # The producer's next InitProducerId (KIP-360, with its identity) rotates the spent id.
    r = coord.init_producer_id(TXN, TIMEOUT, pid, LAST, now_ms=T0 + 4)
    new_pid = r.producer_id
    assert (r.error, r.producer_epoch) == (ErrorCode.none, 0) and new_pid != pid
    assert meta_of(coord) == (TxnState.EMPTY, new_pid, 0, pid, -1)
    # Its retry (the answer lost) gets the same new identity.
    r = coord.init_producer_id(TXN, TIMEOUT, pid, LAST, now_ms=T0 + 5)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, new_pid, 0)
    usable(coord, (new_pid, 0), now=T0 + 6, bump_epoch=False)


# -- the coordinator's own abort: transaction timeout, KIP-1309 session timeout --------------


def _expire(coord: TransactionCoordinator, reason: str) -> list[TxnMarkers]:
    return coord.tick(T0 + (TIMEOUT if reason == "timeout" else SESSION) + 1)


def _init_args(reason: str) -> dict[str, Any]:
    return {} if reason == "timeout" else {"session_timeout_ms": SESSION}


@pytest.mark.parametrize("reason", ["timeout", "session"])
def test_coordinator_abort_at_last_epoch_rotates_the_producer_id(
        coord: TransactionCoordinator, partition: Partition, reason: str) -> None:
    """KAFKA-20090: the abort bumps to 32767, which no client may hold; the id rotates."""
    pid = begin_at(coord, partition, LAST, **_init_args(reason))
    (m,) = _expire(coord, reason)
    assert (m.producer_id, m.producer_epoch, m.commit) == (pid, MAX_EPOCH, False)
    partition.marker(m)
    assert not partition.is_open(pid)
    with pytest.raises(InvalidProducerEpochError):
        partition.write(pid, LAST)  # the timed-out producer is fenced at the partition
    # The producer's abort arrives while the markers are being written: retry later.
    assert coord.end_txn(TXN, pid, LAST, False, bump_epoch=True,
                         now_ms=T0 + TIMEOUT + 2).error == ErrorCode.concurrent_transactions
    new_pid, epoch = coord.markers_written(TXN, T0 + TIMEOUT + 3)
    assert new_pid != pid and epoch == 0
    assert meta_of(coord) == (TxnState.COMPLETE_ABORT, new_pid, 0, pid, -1)
    # Its retry: the transaction is aborted as it asked, and it goes on with the new id, never
    # with 32767.
    late = coord.end_txn(TXN, pid, LAST, False, bump_epoch=True, now_ms=T0 + TIMEOUT + 4)
    assert (late.error, late.producer_id, late.producer_epoch, late.markers) == (
        ErrorCode.none, new_pid, 0, None)
    # A commit of what was aborted is refused.
    assert coord.end_txn(TXN, pid, LAST, True, bump_epoch=True,
                         now_ms=T0 + TIMEOUT + 4).error == ErrorCode.invalid_txn_state
    usable(coord, (new_pid, 0), now=T0 + TIMEOUT + 5)


def test_coordinator_abort_one_below_the_last_epoch(coord: TransactionCoordinator,
                                                    partition: Partition) -> None:
    pid = begin_at(coord, partition, LAST - 1)
    (m,) = coord.tick(T0 + TIMEOUT + 1)
    assert (m.producer_id, m.producer_epoch) == (pid, LAST)
    partition.marker(m)
    assert coord.markers_written(TXN, T0 + TIMEOUT + 2) == (pid, LAST)
    late = coord.end_txn(TXN, pid, LAST - 1, False, bump_epoch=True, now_ms=T0 + TIMEOUT + 3)
    assert (late.error, late.producer_id, late.producer_epoch) == (ErrorCode.none, pid, LAST)
    # 32766 is usable: its transaction ends with the rotation.
    assert coord.add_partitions(TXN, pid, LAST, [P0], now_ms=T0 + TIMEOUT + 4) == {
        P0: ErrorCode.none}
    end = coord.end_txn(TXN, pid, LAST, True, bump_epoch=True, now_ms=T0 + TIMEOUT + 5)
    assert end.error == ErrorCode.none and end.producer_id != pid and end.producer_epoch == 0


def test_coordinator_abort_at_last_epoch_kip360_recovery(coord: TransactionCoordinator,
                                                         partition: Partition) -> None:
    """A version-1 producer whose transaction timed out at 32766 recovers with InitProducerId
    naming its identity (KIP-360): it gets the new id, not epoch 32767."""
    pid = begin_at(coord, partition, LAST)
    (m,) = coord.tick(T0 + TIMEOUT + 1)
    partition.marker(m)
    new_pid, _ = coord.markers_written(TXN, T0 + TIMEOUT + 2)
    assert coord.end_txn(TXN, pid, LAST, True, bump_epoch=False,
                         now_ms=T0 + TIMEOUT + 3).error != ErrorCode.none
    r = coord.init_producer_id(TXN, TIMEOUT, pid, LAST, now_ms=T0 + TIMEOUT + 4)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, new_pid, 0)
    usable(coord, (new_pid, 0), now=T0 + TIMEOUT + 5, bump_epoch=False)


def test_coordinator_abort_at_last_epoch_survives_a_restart(env: Env,
                                                            partition: Partition) -> None:
    """Decided (PrepareAbort in the log), the markers not yet written: a restarted coordinator
    rolls the abort forward to the new id and still knows the old one."""
    coord = env.coordinator
    pid = begin_at(coord, partition, LAST)
    (m,) = coord.tick(T0 + TIMEOUT + 1)
    coord = env.restart(T0 + TIMEOUT + 2)
    (again,) = coord.pending_markers()
    assert again == m and (m.producer_id, m.producer_epoch) == (pid, MAX_EPOCH)
    partition.marker(again)
    new_pid, epoch = coord.markers_written(TXN, T0 + TIMEOUT + 3)
    assert new_pid != pid and epoch == 0
    assert meta_of(coord) == (TxnState.COMPLETE_ABORT, new_pid, 0, pid, -1)
    coord = env.restart(T0 + TIMEOUT + 4)
    late = coord.end_txn(TXN, pid, LAST, False, bump_epoch=True, now_ms=T0 + TIMEOUT + 5)
    assert (late.error, late.producer_id, late.producer_epoch) == (ErrorCode.none, new_pid, 0)


# -- InitProducerId on an ongoing transaction: the fence ------------------------------------


def test_init_fence_at_last_epoch(coord: TransactionCoordinator, partition: Partition) -> None:
    pid = begin_at(coord, partition, LAST)
    # A new instance fences the old one: its transaction is aborted with 32767.
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1)
    assert r.error == ErrorCode.concurrent_transactions and r.markers is not None
    assert (r.markers.producer_id, r.markers.producer_epoch, r.markers.commit) == (
        pid, MAX_EPOCH, False)
    partition.marker(r.markers)
    with pytest.raises(InvalidProducerEpochError):
        partition.write(pid, LAST)
    new_pid, epoch = coord.markers_written(TXN, T0 + 2)
    assert new_pid != pid and epoch == 0
    # The old instance's abort, before the new instance retries: never epoch 32767.
    late = coord.end_txn(TXN, pid, LAST, False, bump_epoch=True, now_ms=T0 + 3)
    assert (late.error, late.producer_id, late.producer_epoch) == (ErrorCode.none, new_pid, 0)
    # The new instance's retry bumps past whatever the old one got, fencing it.
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 4)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, new_pid, 1)
    assert coord.add_partitions(TXN, new_pid, 0, [P0], now_ms=T0 + 5) == {
        P0: ErrorCode.producer_fenced}
    assert coord.end_txn(TXN, pid, LAST, False, bump_epoch=True,
                         now_ms=T0 + 5).error == ErrorCode.invalid_producer_id_mapping
    usable(coord, (new_pid, 1), now=T0 + 6)


# -- KIP-939: KeepPreparedTxn, and forceTerminateTransaction (InitProducerId without it) ------


def test_keep_at_last_epoch_then_commit(coord: TransactionCoordinator,
                                        partition: Partition) -> None:
    pid = begin_at(coord, partition, LAST, enable_2pc=True)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, enable_2pc=True,
                               keep_prepared_txn=True)
    client = (r.producer_id, r.producer_epoch)
    assert r.error == ErrorCode.none and client[0] != pid and client[1] == 0
    assert (r.ongoing_producer_id, r.ongoing_producer_epoch) == (pid, LAST)
    end = coord.end_txn(TXN, *client, True, bump_epoch=True, now_ms=T0 + 2)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, client[0], 1)
    assert end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch) == (pid, MAX_EPOCH)
    partition.marker(end.markers)
    assert not partition.is_open(pid)
    assert coord.markers_written(TXN, T0 + 3) == (client[0], 1)
    retry = coord.end_txn(TXN, *client, True, bump_epoch=True, now_ms=T0 + 4)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (
        ErrorCode.none, client[0], 1)
    usable(coord, (client[0], 1), now=T0 + 5)


def test_force_terminate_a_kept_transaction_at_last_epoch(coord: TransactionCoordinator,
                                                          partition: Partition) -> None:
    pid = begin_at(coord, partition, LAST, enable_2pc=True)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, enable_2pc=True,
                               keep_prepared_txn=True)
    client = (r.producer_id, r.producer_epoch)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 2)  # forceTerminateTransaction
    assert r.error == ErrorCode.concurrent_transactions and r.markers is not None
    assert (r.markers.producer_id, r.markers.producer_epoch, r.markers.commit) == (
        pid, MAX_EPOCH, False)
    partition.marker(r.markers)
    assert not partition.is_open(pid)
    assert coord.markers_written(TXN, T0 + 3) == client  # no identity goes back
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 4)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, client[0], 1)
    assert coord.end_txn(TXN, *client, True, bump_epoch=True,
                         now_ms=T0 + 5).error == ErrorCode.producer_fenced
    usable(coord, (client[0], 1), now=T0 + 6)


def test_force_terminate_when_the_kept_client_holds_max(coord: TransactionCoordinator,
                                                        partition: Partition) -> None:
    """The seed's 2PC example drives the kept client's epoch to Short.MaxValue (it only ever
    commits or aborts with it). A forceTerminate then must not leave that epoch as the id's:
    no transaction could begin with it and still be fenced; the client's id rotates too."""
    pid = begin_at(coord, partition, LAST, enable_2pc=True)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, enable_2pc=True,
                               keep_prepared_txn=True)
    coord.state_manager._txns[TXN].next_producer_epoch = MAX_EPOCH - 1
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 2, enable_2pc=True,
                               keep_prepared_txn=True)
    kept = (r.producer_id, r.producer_epoch)
    assert r.error == ErrorCode.none and kept[1] == MAX_EPOCH
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 3)  # forceTerminateTransaction
    assert r.error == ErrorCode.concurrent_transactions and r.markers is not None
    assert (r.markers.producer_id, r.markers.producer_epoch) == (pid, MAX_EPOCH)
    partition.marker(r.markers)
    new_pid, epoch = coord.markers_written(TXN, T0 + 4)
    assert (new_pid, epoch) != kept and epoch < MAX_EPOCH
    assert new_pid not in (pid, kept[0]) and epoch == 0
    assert meta_of(coord) == (TxnState.COMPLETE_ABORT, new_pid, 0, kept[0], -1)
    # The kept client's abort (its transaction is aborted) goes on with the new id; its commit
    # is refused; it can begin nothing with Short.MaxValue.
    late = coord.end_txn(TXN, *kept, False, bump_epoch=True, now_ms=T0 + 5)
    assert (late.error, late.producer_id, late.producer_epoch) == (ErrorCode.none, new_pid, 0)
    assert coord.end_txn(TXN, *kept, True, bump_epoch=True,
                         now_ms=T0 + 5).error == ErrorCode.invalid_txn_state
    assert coord.add_partitions(TXN, *kept, [P2], now_ms=T0 + 5) == {
        P2: ErrorCode.invalid_producer_id_mapping}
    # The operator's retry fences whoever holds the new id at epoch 0.
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 6)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, new_pid, 1)
    usable(coord, (new_pid, 1), now=T0 + 7)


def test_version_1_kept_client_at_max_cannot_overflow_its_next_transaction(
        coord: TransactionCoordinator, partition: Partition) -> None:
    """A transaction-version-1 2PC client commits with the kept Short.MaxValue and keeps it
    (version 1 never bumps, and its EndTxn answer carries no identity); its next transaction is
    begun at Short.MaxValue. When that one is kept by a new instance and committed, its markers
    cannot go above Short.MaxValue: they carry it, and the transaction completes."""
    begin_at(coord, partition, LAST, enable_2pc=True)
    coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, enable_2pc=True, keep_prepared_txn=True)
    coord.state_manager._txns[TXN].next_producer_epoch = MAX_EPOCH - 1
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 2, enable_2pc=True,
                               keep_prepared_txn=True)
    kept = (r.producer_id, r.producer_epoch)
    end = coord.end_txn(TXN, *kept, True, bump_epoch=False, now_ms=T0 + 3)
    assert end.error == ErrorCode.none and end.markers is not None
    partition.marker(end.markers)
    assert coord.markers_written(TXN, T0 + 4) == kept
    # The next transaction, at Short.MaxValue.
    assert coord.add_partitions(TXN, *kept, [P0], now_ms=T0 + 5) == {P0: ErrorCode.none}
    partition.write(kept[0], MAX_EPOCH)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 6, enable_2pc=True,
                               keep_prepared_txn=True)
    client = (r.producer_id, r.producer_epoch)
    assert r.error == ErrorCode.none and client[0] != kept[0] and client[1] == 0
    end = coord.end_txn(TXN, *client, True, bump_epoch=False, now_ms=T0 + 7)
    assert end.error == ErrorCode.none and end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch) == (kept[0], MAX_EPOCH)
    partition.marker(end.markers)
    assert not partition.is_open(kept[0])
    assert coord.markers_written(TXN, T0 + 8) == client
    assert state(coord) is TxnState.COMPLETE_COMMIT
