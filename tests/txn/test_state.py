"""Kafka's transaction state machine: byte values, names and valid transitions."""

from __future__ import annotations

import itertools

import pytest

from exactly.txn.state import IllegalTransitionError, TxnMetadata, TxnState

S = TxnState
VALID = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    # Kafka 4: a transaction-version-2 client may abort a transaction that added nothing.
    (S.EMPTY, S.PREPARE_ABORT), (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
    (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD), (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


def test_byte_values_and_names() -> None:
    assert [(int(s), s.display_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    for s in S:
        assert S.from_display_name(s.display_name) is s
    assert S.from_display_name("Bogus") is None


@pytest.mark.parametrize(("old", "new"), list(itertools.product(S, S)))
def test_transition(old: TxnState, new: TxnState) -> None:
    meta = TxnMetadata("t", 1, 0, 1000, old, 0)
    if (old, new) in VALID:
        meta.transition(new)
        assert meta.state is new
    else:
        with pytest.raises(IllegalTransitionError):
            meta.transition(new)
        assert meta.state is old
