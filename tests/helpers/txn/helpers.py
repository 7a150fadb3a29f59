"""Small drivers for the coordinator tests."""

from __future__ import annotations

from exactly.protocol.errors import ErrorCode
from exactly.txn import TransactionCoordinator, TxnState
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN

P0 = ("orders", 0)
P1 = ("orders", 1)
P2 = ("payments", 0)


def init(coord: TransactionCoordinator, txn: str = TXN, *, now: int = T0,
         timeout: int = TIMEOUT) -> tuple[int, int]:
    r = coord.init_producer_id(txn, timeout, now_ms=now)
    assert r.error == ErrorCode.none, r
    return r.producer_id, r.producer_epoch


def begin(coord: TransactionCoordinator, txn: str = TXN, *, now: int = T0,
          partitions: tuple[tuple[str, int], ...] = (P0, P1)) -> tuple[int, int]:
    """InitProducerId, then a transaction with `partitions`: returns (producer id, epoch)."""
    pid, epoch = init(coord, txn, now=now)
    res = coord.add_partitions(txn, pid, epoch, list(partitions), now_ms=now)
    assert set(res.values()) == {ErrorCode.none}
    assert coord.describe(txn).state is TxnState.ONGOING  # type: ignore[union-attr]
    return pid, epoch


def state(coord: TransactionCoordinator, txn: str = TXN) -> TxnState:
    meta = coord.describe(txn)
    assert meta is not None
    return meta.state


def log_end(coord: TransactionCoordinator, txn: str = TXN) -> int:
    return coord.log_for(txn).log_end_offset
