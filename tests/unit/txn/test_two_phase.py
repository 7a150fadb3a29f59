"""KIP-939 in the coordinator: InitProducerId with Enable2Pc/KeepPreparedTxn, the second producer
id/epoch pair, no timeout for 2PC.

The seed's two worked examples ("Persisted Data Format Changes") are replayed step by step with
the seed's own producer ids (42, 73, 85): each step's record is decoded from what was actually
appended to `__transaction_state` and compared field for field, as is each answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from exactly.log import LogManager
from exactly.log.config import LogConfig
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import decode_records, iter_batches
from exactly.txn import ProducerIdManager, TransactionCoordinator, TxnState
from exactly.txn.codec import TxnLogValue, decode_key, decode_value
from exactly.txn.state import MAX_EPOCH
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN, Env
from tests.helpers.txn.helpers import P0, P1, P2, state

MAX = MAX_EPOCH


class ScriptedIds(ProducerIdManager):
    """Producer ids in the order the seed's examples allocate them."""

    def __init__(self, *ids: int) -> None:  # no file: nothing to keep across restarts here
        self.ids = list(ids)

    def generate(self) -> int:
        return self.ids.pop(0)


@dataclass
class Seed:
    env: Env
    coord: TransactionCoordinator
    ids: ScriptedIds
    read_offset: int = 0

    def records(self) -> list[TxnLogValue]:
        """The values appended for TXN since the last call, decoded from the log itself."""
        out = []
        plog = self.coord.log_for(TXN)
        if self.read_offset < plog.log_end_offset:
            for batch in iter_batches(plog.read(self.read_offset, 1 << 20)):
                for record in decode_records(batch):
                    assert record.key is not None and record.value is not None
                    if record.offset >= self.read_offset and decode_key(record.key) == TXN:
                        out.append(decode_value(record.value))
        self.read_offset = plog.log_end_offset
        return out

    def step(self) -> TxnLogValue:
        """The one record the last call wrote."""
        written = self.records()
        assert len(written) == 1, written
        return written[0]

    def restart(self, now_ms: int) -> TransactionCoordinator:
        self.env.logs.close()
        self.env.logs = LogManager(self.env.path / "logs", LogConfig(flush_policy="os"))
        self.env.opened.append(self.env.logs)
        self.coord = TransactionCoordinator(self.env.logs, self.ids, self.env.config,
                                            now_ms=now_ms)
        return self.coord


@pytest.fixture
def seed(env: Env) -> Iterator[Seed]:
    ids = ScriptedIds(42, 73, 85, 99)
    yield Seed(env, TransactionCoordinator(env.logs, ids, env.config, now_ms=T0), ids)


def fields(v: TxnLogValue) -> tuple[TxnState, int, int, int, int, int]:
    """TC STATE as the seed writes it: state, ProducerId, ProducerEpoch, PrevProducerId,
    NextProducerId, NextProducerEpoch."""
    return (TxnState(v.status), v.producer_id, v.producer_epoch, v.prev_producer_id,
            v.next_producer_id, v.next_producer_epoch)


def init_at_max_minus_1(s: Seed, **kw: bool) -> None:
    """Step 1 of both examples: InitProducerId(false) leaves id 42 at epoch MAX-1."""
    r = s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0, **kw)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, 42, 0)
    s.coord.state_manager._txns[TXN].producer_epoch = MAX - 2  # as if initialized MAX-2 more times
    s.records()
    r = s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, **kw)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id,
            r.ongoing_producer_epoch) == (ErrorCode.none, 42, MAX - 1, -1, -1)
    assert fields(s.step()) == (TxnState.EMPTY, 42, MAX - 1, -1, -1, -1)


# -- the seed's worked examples ---------------------------------------------------------------


def test_vanilla_kip_890_overflow_example(seed: Seed) -> None:
    s = seed
    s.ids.ids.remove(73)  # the seed's ids: 42, then 85
    # 1. InitProducerId(false)
    init_at_max_minus_1(s)
    # 2. AddPartitionsToTxn with 42/MAX-1
    assert s.coord.add_partitions(TXN, 42, MAX - 1, [P0], now_ms=T0 + 2) == {P0: ErrorCode.none}
    assert fields(s.step()) == (TxnState.ONGOING, 42, MAX - 1, -1, -1, -1)
    # 3. Commit with 42/MAX-1: markers with 42/MAX, the client gets 85/0.
    end = s.coord.end_txn(TXN, 42, MAX - 1, True, bump_epoch=True, now_ms=T0 + 3)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, 85, 0)
    assert end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch) == (42, MAX)
    assert fields(s.step()) == (TxnState.PREPARE_COMMIT, 42, MAX, -1, 85, 0)
    # 4. CompleteCommit
    assert s.coord.markers_written(TXN, T0 + 4) == (85, 0)
    assert fields(s.step()) == (TxnState.COMPLETE_COMMIT, 85, 0, 42, -1, -1)
    # The stored extras are there for a retried commit: it gets success and the new id.
    end = s.coord.end_txn(TXN, 42, MAX - 1, True, bump_epoch=True, now_ms=T0 + 5)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, 85, 0)
    assert s.records() == []


def test_two_phase_commit_example_with_two_epoch_overflows(seed: Seed) -> None:
    s = seed
    # 1. InitProducerId(false), a 2PC client: no timeout.
    init_at_max_minus_1(s, enable_2pc=True)
    # 2. AddPartitionsToTxn
    assert s.coord.add_partitions(TXN, 42, MAX - 1, [P0, P1], now_ms=T0 + 2) == {
        P0: ErrorCode.none, P1: ErrorCode.none}
    v = s.step()
    assert fields(v) == (TxnState.ONGOING, 42, MAX - 1, -1, -1, -1)
    assert v.txn_timeout_ms == -1
    # 3. (prepared on the client, which crashes)
    # 4. InitProducerId(true): the ongoing pair stays, the client gets a new id (MAX is the
    #    markers' epoch for 42).
    r = s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 4, enable_2pc=True,
                                 keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id,
            r.ongoing_producer_epoch, r.markers) == (ErrorCode.none, 73, 0, 42, MAX - 1, None)
    assert fields(s.step()) == (TxnState.ONGOING, 42, MAX - 1, -1, 73, 0)
    # 5.-6. crash, InitProducerId(true) again: only NextProducerEpoch moves.
    r = s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 6, enable_2pc=True,
                                 keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id,
            r.ongoing_producer_epoch) == (ErrorCode.none, 73, 1, 42, MAX - 1)
    assert fields(s.step()) == (TxnState.ONGOING, 42, MAX - 1, -1, 73, 1)
    # 7. a crash loop drives NextProducerEpoch to MAX-1
    for epoch in range(2, 5):
        r = s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 7, enable_2pc=True,
                                     keep_prepared_txn=True)
        assert (r.producer_id, r.producer_epoch, r.ongoing_producer_epoch) == (73, epoch, MAX - 1)
    # as if it crashed MAX-6 more times
    s.coord.state_manager._txns[TXN].next_producer_epoch = MAX - 2
    r = s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 7, enable_2pc=True,
                                 keep_prepared_txn=True)
    assert (r.producer_id, r.producer_epoch) == (73, MAX - 1)
    assert fields(s.records()[-1]) == (TxnState.ONGOING, 42, MAX - 1, -1, 73, MAX - 1)
    # 8. InitProducerId(true): the client's epoch reaches MAX.
    r = s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 8, enable_2pc=True,
                                 keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id,
            r.ongoing_producer_epoch) == (ErrorCode.none, 73, MAX, 42, MAX - 1)
    assert fields(s.step()) == (TxnState.ONGOING, 42, MAX - 1, -1, 73, MAX)
    # 9. Commit with the latest identity, 73/MAX: markers with 42/MAX (the ongoing epoch + 1),
    #    the next transaction gets a third id, 85/0; PrevProducerId 73 for a retry.
    end = s.coord.end_txn(TXN, 73, MAX, True, bump_epoch=True, now_ms=T0 + 9)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, 85, 0)
    assert end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch, end.markers.commit,
            end.markers.partitions) == (42, MAX, True, [P0, P1])
    assert fields(s.step()) == (TxnState.PREPARE_COMMIT, 42, MAX, 73, 85, 0)
    # 10. CompleteCommit
    assert s.coord.markers_written(TXN, T0 + 10) == (85, 0)
    v = s.step()
    assert fields(v) == (TxnState.COMPLETE_COMMIT, 85, 0, 73, -1, -1)
    assert v.txn_timeout_ms == -1
    # A retried commit (its answer lost) gets success and the new identity, writes nothing.
    end = s.coord.end_txn(TXN, 73, MAX, True, bump_epoch=True, now_ms=T0 + 11)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, 85, 0)
    assert s.records() == []
    # The next transaction runs under 85/0.
    assert s.coord.add_partitions(TXN, 85, 0, [P2], now_ms=T0 + 12) == {P2: ErrorCode.none}


def test_two_phase_example_survives_coordinator_restarts(seed: Seed) -> None:
    s = seed
    init_at_max_minus_1(s, enable_2pc=True)
    s.coord.add_partitions(TXN, 42, MAX - 1, [P0], now_ms=T0 + 2)
    s.coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 4, enable_2pc=True,
                             keep_prepared_txn=True)
    coord = s.restart(T0 + 5)  # the kept pair is loaded back from the log
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.next_producer_id,
            meta.next_producer_epoch, meta.txn_timeout_ms) == (
                TxnState.ONGOING, 42, MAX - 1, 73, 0, -1)
    assert meta.is_kept and meta.client_identity == (73, 0)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 6, enable_2pc=True,
                               keep_prepared_txn=True)
    assert (r.producer_id, r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (
        73, 1, 42, MAX - 1)
    end = coord.end_txn(TXN, 73, 1, True, bump_epoch=True, now_ms=T0 + 7)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, 73, 2)
    s.records()
    coord = s.restart(T0 + 8)  # decided, markers not yet written: rolled forward
    (m,) = coord.pending_markers()
    assert (m.producer_id, m.producer_epoch, m.commit, m.partitions) == (42, MAX, True, [P0])
    # The client's retry is still recognised from the record (73 continues with epoch 1 + 1).
    assert coord.end_txn(TXN, 73, 1, True, bump_epoch=True,
                         now_ms=T0 + 9).error == ErrorCode.concurrent_transactions
    assert coord.markers_written(TXN, T0 + 10) == (73, 2)
    assert fields(s.step()) == (TxnState.COMPLETE_COMMIT, 73, 2, -1, -1, -1)
    end = coord.end_txn(TXN, 73, 1, True, bump_epoch=True, now_ms=T0 + 11)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, 73, 2)


# -- the kept transaction -------------------------------------------------------------------


def begin_2pc(coord: TransactionCoordinator, *, partitions: tuple[tuple[str, int], ...] = (P0,),
              enable_2pc: bool = True, now: int = T0) -> tuple[int, int]:
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=now, enable_2pc=enable_2pc)
    assert r.error == ErrorCode.none
    res = coord.add_partitions(TXN, r.producer_id, r.producer_epoch, list(partitions), now_ms=now)
    assert set(res.values()) == {ErrorCode.none}
    return r.producer_id, r.producer_epoch


def keep(coord: TransactionCoordinator, *, now: int = T0 + 1,
         enable_2pc: bool = True) -> tuple[int, int]:
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=now, enable_2pc=enable_2pc,
                               keep_prepared_txn=True)
    assert r.error == ErrorCode.none, r
    return r.producer_id, r.producer_epoch


def test_keep_without_overflow_bumps_the_same_id(coord: TransactionCoordinator) -> None:
    pid, epoch = begin_2pc(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 1, enable_2pc=True,
                               keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id,
            r.ongoing_producer_epoch) == (ErrorCode.none, pid, epoch + 1, pid, epoch)
    assert keep(coord, now=T0 + 2) == (pid, epoch + 2)
    meta = coord.describe(TXN)
    assert meta is not None
    assert (meta.state, meta.producer_id, meta.producer_epoch, meta.next_producer_id,
            meta.next_producer_epoch, sorted(meta.partitions)) == (
        TxnState.ONGOING, pid, epoch, pid, epoch + 2, [P0])
    # Commit with the newest identity: markers with the transaction's epoch + 1, the client
    # goes on one above its own.
    end = coord.end_txn(TXN, pid, epoch + 2, True, bump_epoch=True, now_ms=T0 + 3)
    assert (end.error, end.producer_id, end.producer_epoch) == (ErrorCode.none, pid, epoch + 3)
    assert end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch) == (pid, epoch + 1)
    assert coord.markers_written(TXN, T0 + 4) == (pid, epoch + 3)
    assert state(coord) is TxnState.COMPLETE_COMMIT


def test_split_brain_older_instance_is_fenced_at_its_first_commit(
        coord: TransactionCoordinator) -> None:
    """The seed's "Skip Epoch Bump" example: two instances both InitProducerId(true)."""
    orig = begin_2pc(coord, partitions=(P0, P1))
    first = keep(coord, now=T0 + 1)   # instance 1
    second = keep(coord, now=T0 + 2)  # instance 2
    assert first != second
    # Instance 1 commits first: fenced, nothing decided.
    for bump in (True, False):
        assert coord.end_txn(TXN, *first, True, bump_epoch=bump,
                             now_ms=T0 + 3).error == ErrorCode.producer_fenced
        assert coord.end_txn(TXN, *first, False, bump_epoch=bump,
                             now_ms=T0 + 3).error == ErrorCode.producer_fenced
    assert state(coord) is TxnState.ONGOING
    # Nobody writes into the kept transaction: not the fenced instance, not the original one,
    # not its new owner (only commit/abort may follow KeepPreparedTxn).
    for identity in (first, orig):
        assert coord.add_partitions(TXN, *identity, [P2], now_ms=T0 + 3) == {
            P2: ErrorCode.producer_fenced}
        assert coord.verify_partitions(TXN, *identity, [P0]) == {P0: ErrorCode.producer_fenced}
        assert coord.add_offsets(TXN, *identity, "g", ("__consumer_offsets", 0),
                                 now_ms=T0 + 3) == ErrorCode.producer_fenced
    assert coord.add_partitions(TXN, *second, [P2], now_ms=T0 + 3) == {
        P2: ErrorCode.invalid_txn_state}
    assert coord.verify_partitions(TXN, *second, [P0]) == {P0: ErrorCode.invalid_txn_state}
    meta = coord.describe(TXN)
    assert meta is not None and meta.partitions == {P0, P1}
    # Instance 2 commits the transaction as it was.
    end = coord.end_txn(TXN, *second, True, bump_epoch=True, now_ms=T0 + 4)
    assert end.error == ErrorCode.none and end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch, end.markers.partitions) == (
        orig[0], orig[1] + 1, [P0, P1])
    coord.markers_written(TXN, T0 + 5)
    nxt = (end.producer_id, end.producer_epoch)
    # Instance 1's commit, arriving late, is no retry: fenced, and it never gets instance 2's
    # identity.
    assert coord.end_txn(TXN, *first, True, bump_epoch=True, now_ms=T0 + 6).error in (
        ErrorCode.producer_fenced, ErrorCode.invalid_producer_id_mapping)
    assert coord.add_partitions(TXN, *first, [P2], now_ms=T0 + 6) == {P2: ErrorCode.producer_fenced}
    # Instance 2 goes on with the next transaction.
    assert coord.add_partitions(TXN, *nxt, [P2], now_ms=T0 + 7) == {P2: ErrorCode.none}


def test_keep_prepared_txn_abort_and_version_1_end(coord: TransactionCoordinator) -> None:
    pid, epoch = begin_2pc(coord)
    client = keep(coord)
    # A version-1 client (no bump): markers with the kept epoch + 1, it goes on as it is.
    end = coord.end_txn(TXN, *client, False, bump_epoch=False, now_ms=T0 + 2)
    assert end.error == ErrorCode.none and end.markers is not None
    assert (end.markers.producer_id, end.markers.producer_epoch, end.markers.commit) == (
        pid, epoch + 1, False)
    assert coord.markers_written(TXN, T0 + 3) == client
    assert coord.add_partitions(TXN, *client, [P1], now_ms=T0 + 4) == {P1: ErrorCode.none}


def test_keep_with_nothing_ongoing_is_a_plain_init(coord: TransactionCoordinator) -> None:
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0, keep_prepared_txn=True)
    assert (r.error, r.producer_epoch, r.ongoing_producer_id, r.ongoing_producer_epoch) == (
        ErrorCode.none, 0, -1, -1)
    pid = r.producer_id
    coord.add_partitions(TXN, pid, 0, [P0], now_ms=T0)
    coord.end_txn(TXN, pid, 0, True, bump_epoch=True, now_ms=T0 + 1)
    # PrepareCommit: wait for the markers, as without KeepPreparedTxn.
    assert coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 2,
                                  keep_prepared_txn=True).error == ErrorCode.concurrent_transactions
    coord.markers_written(TXN, T0 + 3)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 4, keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id) == (
        ErrorCode.none, pid, 2, -1)


def test_keep_with_expected_identity(coord: TransactionCoordinator) -> None:
    pid, epoch = begin_2pc(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, pid, epoch, now_ms=T0 + 1, enable_2pc=True,
                               keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    # The old identity no longer names the client.
    assert coord.init_producer_id(TXN, TIMEOUT, pid, epoch, now_ms=T0 + 2, enable_2pc=True,
                                  keep_prepared_txn=True).error == ErrorCode.producer_fenced
    r = coord.init_producer_id(TXN, TIMEOUT, pid, epoch + 1, now_ms=T0 + 3, enable_2pc=True,
                               keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 2)


def test_init_without_keep_aborts_the_kept_transaction(coord: TransactionCoordinator) -> None:
    """forceTerminateTransaction: InitProducerId with keepPreparedTxn=false."""
    pid, epoch = begin_2pc(coord, partitions=(P0, P1))
    client = keep(coord)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 2)
    assert r.error == ErrorCode.concurrent_transactions and r.markers is not None
    assert (r.markers.producer_id, r.markers.producer_epoch, r.markers.commit,
            r.markers.partitions) == (pid, epoch + 1, False, [P0, P1])
    assert coord.markers_written(TXN, T0 + 3) == client  # no identity goes back
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 4)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, client[0], client[1] + 1)
    # The holder of the kept identity is fenced now.
    assert coord.end_txn(TXN, *client, True, bump_epoch=True,
                         now_ms=T0 + 5).error == ErrorCode.producer_fenced


# -- no timeout for 2PC ---------------------------------------------------------------------


def test_two_phase_transaction_never_times_out(make_env: Callable[..., Env]) -> None:
    env = make_env(max_timeout_ms=2_000)
    coord = env.coordinator
    # The request's timeout is ignored with Enable2Pc, even one over the maximum.
    r = coord.init_producer_id(TXN, 10**9, now_ms=T0, enable_2pc=True)
    assert r.error == ErrorCode.none
    coord.add_partitions(TXN, r.producer_id, r.producer_epoch, [P0], now_ms=T0)
    meta = coord.describe(TXN)
    assert meta is not None and meta.txn_timeout_ms == -1 and meta.is_two_phase
    # A plain transaction beside it.
    plain = coord.init_producer_id("plain", 1_000, now_ms=T0)
    coord.add_partitions("plain", plain.producer_id, plain.producer_epoch, [P1], now_ms=T0)
    markers = coord.tick(T0 + 1_001)
    assert [m.transactional_id for m in markers] == ["plain"]
    year = 365 * 24 * 3600 * 1000
    assert coord.tick(T0 + year) == []
    assert state(coord) is TxnState.ONGOING
    # Kept by a new instance, still no timeout; and none after a restart either.
    keep(coord, now=T0 + year)
    coord = env.restart(T0 + year + 1)
    assert coord.tick(T0 + 2 * year) == []
    assert state(coord) is TxnState.ONGOING
    # Without Enable2Pc the timeout is checked as always.
    assert coord.init_producer_id("other", 10**9,
                                  now_ms=T0).error == ErrorCode.invalid_transaction_timeout


def test_keep_prepared_txn_without_2pc_is_allowed_and_times_out(coord: TransactionCoordinator,
                                                                ) -> None:
    """The seed's rejected alternative: KeepPreparedTxn without 2PC works (Flink), but the
    transaction is subject to its timeout."""
    pid, epoch = begin_2pc(coord, enable_2pc=False)
    r = coord.init_producer_id(TXN, TIMEOUT, now_ms=T0 + 10, keep_prepared_txn=True)
    assert (r.error, r.producer_id, r.producer_epoch, r.ongoing_producer_id,
            r.ongoing_producer_epoch) == (ErrorCode.none, pid, epoch + 1, pid, epoch)
    meta = coord.describe(TXN)
    assert meta is not None and meta.txn_timeout_ms == TIMEOUT
    (m,) = coord.tick(T0 + TIMEOUT + 1)
    assert (m.producer_id, m.producer_epoch, m.commit) == (pid, epoch + 1, False)
    assert coord.markers_written(TXN, T0 + TIMEOUT + 2) == (pid, epoch + 1)
    # The kept identity cannot commit what was aborted.
    assert coord.end_txn(TXN, pid, epoch + 1, True, bump_epoch=True,
                         now_ms=T0 + TIMEOUT + 3).error == ErrorCode.invalid_txn_state
