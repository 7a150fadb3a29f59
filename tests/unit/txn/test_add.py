"""AddPartitionsToTxn, its verifyOnly form (KIP-890 part 1) and AddOffsetsToTxn."""

from __future__ import annotations

import pytest

from exactly.protocol.errors import ErrorCode
from exactly.txn import TransactionCoordinator, TxnState
from tests.helpers.txn.fixtures import T0, TXN
from tests.helpers.txn.helpers import P0, P1, P2, begin, init, log_end, state


def test_first_add_starts_transaction(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    res = coord.add_partitions(TXN, pid, epoch, [P0, P1], now_ms=T0 + 5)
    assert res == {P0: ErrorCode.none, P1: ErrorCode.none}
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.partitions, meta.txn_start_ms, meta.txn_last_update_ms) == (
        TxnState.ONGOING, {P0, P1}, T0 + 5, T0 + 5)
    assert log_end(coord) == 2


def test_adding_more_partitions_keeps_start_time(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    assert coord.add_partitions(TXN, pid, epoch, [P1, P2], now_ms=T0 + 9) == {
        P1: ErrorCode.none, P2: ErrorCode.none}
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.partitions, meta.txn_start_ms, meta.txn_last_update_ms) == (
        {P0, P1, P2}, T0, T0 + 9)


def test_partitions_already_present_write_nothing(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    end = log_end(coord)
    assert coord.add_partitions(TXN, pid, epoch, [P1], now_ms=T0 + 1) == {P1: ErrorCode.none}
    assert log_end(coord) == end


def test_unknown_id_is_invalid_mapping(coord: TransactionCoordinator) -> None:
    assert coord.add_partitions("nope", 1, 0, [P0], now_ms=T0) == {
        P0: ErrorCode.invalid_producer_id_mapping}


def test_other_producer_id_is_invalid_mapping(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    assert coord.add_partitions(TXN, pid + 1, epoch, [P0, P1], now_ms=T0) == {
        P0: ErrorCode.invalid_producer_id_mapping, P1: ErrorCode.invalid_producer_id_mapping}


def test_stale_epoch_is_fenced(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    init(coord, now=T0 + 1)
    assert coord.add_partitions(TXN, pid, epoch, [P0], now_ms=T0 + 2) == {
        P0: ErrorCode.producer_fenced}
    assert state(coord) is TxnState.EMPTY


def test_empty_transactional_id_is_invalid_request(coord: TransactionCoordinator) -> None:
    assert coord.add_partitions("", 1, 0, [P0], now_ms=T0) == {P0: ErrorCode.invalid_request}


@pytest.mark.parametrize("commit", [True, False])
def test_prepare_states_are_concurrent(coord: TransactionCoordinator, commit: bool) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, commit, bump_epoch=False, now_ms=T0 + 1)
    assert coord.add_partitions(TXN, pid, epoch, [P2], now_ms=T0 + 2) == {
        P2: ErrorCode.concurrent_transactions}


def test_after_complete_a_new_transaction_begins(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    coord.markers_written(TXN, T0 + 2)
    assert coord.add_partitions(TXN, pid, epoch, [P2], now_ms=T0 + 3) == {P2: ErrorCode.none}
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.partitions, meta.txn_start_ms) == (TxnState.ONGOING, {P2}, T0 + 3)


def test_client_transaction_version_is_recorded(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    coord.add_partitions(TXN, pid, epoch, [P0], now_ms=T0, client_transaction_version=2)
    meta = coord.describe(TXN)
    assert meta is not None and meta.client_transaction_version == 2


# -- verifyOnly -------------------------------------------------------------------------------


def test_verify_partitions(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord, partitions=(P0,))
    end = log_end(coord)
    # Kafka 4.4: a partition the transaction does not hold makes it abortable.
    assert coord.verify_partitions(TXN, pid, epoch, [P0, P1]) == {
        P0: ErrorCode.none, P1: ErrorCode.transaction_abortable}
    assert log_end(coord) == end
    assert state(coord) is TxnState.ONGOING
    meta = coord.describe(TXN)
    assert meta is not None and meta.partitions == {P0}


def test_verify_errors(coord: TransactionCoordinator) -> None:
    assert coord.verify_partitions("nope", 1, 0, [P0]) == {
        P0: ErrorCode.invalid_producer_id_mapping}
    assert coord.verify_partitions("", 1, 0, [P0]) == {P0: ErrorCode.invalid_request}
    pid, epoch = init(coord)
    assert coord.verify_partitions(TXN, pid, epoch, [P0]) == {  # Empty
        P0: ErrorCode.transaction_abortable}
    assert coord.verify_partitions(TXN, pid + 1, epoch, [P0]) == {
        P0: ErrorCode.invalid_producer_id_mapping}
    assert coord.verify_partitions(TXN, pid, epoch + 1, [P0]) == {P0: ErrorCode.producer_fenced}


def test_verify_after_the_transaction_ended(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord, partitions=(P0,))
    coord.end_txn(TXN, pid, epoch, False, bump_epoch=False, now_ms=T0 + 1)
    # As Kafka: markers being written is a retriable wait, then the partition is not in any
    # open transaction.
    assert coord.verify_partitions(TXN, pid, epoch, [P0]) == {
        P0: ErrorCode.concurrent_transactions}
    coord.markers_written(TXN, T0 + 2)
    assert coord.verify_partitions(TXN, pid, epoch, [P0]) == {
        P0: ErrorCode.transaction_abortable}


# -- AddOffsetsToTxn ----------------------------------------------------------------------------


OFFSETS = ("__consumer_offsets", 7)


def test_add_offsets_adds_the_group_partition(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    assert coord.add_offsets(TXN, pid, epoch, "group-1", OFFSETS, now_ms=T0 + 1) == ErrorCode.none
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.partitions, meta.txn_start_ms) == (
        TxnState.ONGOING, {OFFSETS}, T0 + 1)
    end = log_end(coord)
    assert coord.add_offsets(TXN, pid, epoch, "group-1", OFFSETS, now_ms=T0 + 2) == ErrorCode.none
    assert log_end(coord) == end


def test_add_offsets_errors(coord: TransactionCoordinator) -> None:
    assert coord.add_offsets("nope", 1, 0, "g", OFFSETS, now_ms=T0) == (
        ErrorCode.invalid_producer_id_mapping)
    pid, epoch = begin(coord)
    # An empty group id is a group as any other, as Kafka 4.4 answers.
    assert coord.add_offsets(TXN, pid, epoch, "", OFFSETS, now_ms=T0) == ErrorCode.none
    assert coord.add_offsets(TXN, pid + 1, epoch, "g", OFFSETS, now_ms=T0) == (
        ErrorCode.invalid_producer_id_mapping)
    assert (coord.add_offsets(TXN, pid, epoch - 1, "g", OFFSETS, now_ms=T0)
            == ErrorCode.producer_fenced)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    assert coord.add_offsets(TXN, pid, epoch, "g", OFFSETS, now_ms=T0 + 2) == (
        ErrorCode.concurrent_transactions)
