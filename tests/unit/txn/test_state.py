"""Kafka's transaction state machine: byte values, names and valid transitions."""

from __future__ import annotations

import itertools

import pytest

from exactly.txn.state import IllegalTransitionError, TxnMetadata, TxnState

VALID = {
    (TxnState.EMPTY, TxnState.EMPTY), (TxnState.COMPLETE_COMMIT, TxnState.EMPTY),
    (TxnState.COMPLETE_ABORT, TxnState.EMPTY),
    (TxnState.ONGOING, TxnState.ONGOING), (TxnState.EMPTY, TxnState.ONGOING),
    (TxnState.COMPLETE_COMMIT, TxnState.ONGOING), (TxnState.COMPLETE_ABORT, TxnState.ONGOING),
    (TxnState.ONGOING, TxnState.PREPARE_COMMIT),
    (TxnState.ONGOING, TxnState.PREPARE_ABORT),
    (TxnState.PREPARE_EPOCH_FENCE, TxnState.PREPARE_ABORT),
    # Kafka 4: a transaction-version-2 client may abort a transaction that added nothing.
    (TxnState.EMPTY, TxnState.PREPARE_ABORT), (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_ABORT),
    (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT),
    (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT),
    (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT),
    (TxnState.EMPTY, TxnState.DEAD), (TxnState.COMPLETE_COMMIT, TxnState.DEAD),
    (TxnState.COMPLETE_ABORT, TxnState.DEAD),
    (TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE),
}


def test_byte_values_and_names() -> None:
    assert [(int(s), s.display_name) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    for s in TxnState:
        assert TxnState.from_display_name(s.display_name) is s
    assert TxnState.from_display_name("Bogus") is None


@pytest.mark.parametrize(("old", "new"), list(itertools.product(TxnState, TxnState)))
def test_transition(old: TxnState, new: TxnState) -> None:
    meta = TxnMetadata("t", 1, 0, 1000, old, 0)
    if (old, new) in VALID:
        meta.transition(new)
        assert meta.state is new
    else:
        with pytest.raises(IllegalTransitionError):
            meta.transition(new)
        assert meta.state is old
