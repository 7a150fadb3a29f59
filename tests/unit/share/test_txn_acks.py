"""Transactional acknowledgements (KIP-1289) without a network: staging holds records
TX_PENDING, the transaction's marker in __share_group_state applies (COMMIT) or releases (ABORT)
them, a replay after a crash folds committed stagings, drops aborted ones and holds open ones
again; the member and the producer are checked (time as a number, real logs on disk)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.log import LogManager
from exactly.log.config import LogConfig
from exactly.protocol.errors import ErrorCode
from exactly.share.config import ShareConfig
from exactly.share.coordinator import ShareCoordinator
from exactly.share.partition import AckBatch, AckType, LogBatch, RecordState, SharePartition
from exactly.share.state_store import SHARE_STATE_TOPIC
from exactly.txn import ProducerIdManager, TransactionCoordinator, TxnConfig

T0 = 1_000_000
CONFIG = ShareConfig(state_topic_num_partitions=3, updates_per_snapshot=3,
                     session_timeout_ms=1000, min_session_timeout_ms=1000,
                     record_lock_duration_ms=500, min_record_lock_duration_ms=100,
                     delivery_count_limit=2, min_delivery_count_limit=2)
ACCEPT, REJECT, RELEASE = int(AckType.ACCEPT), int(AckType.REJECT), int(AckType.RELEASE)


class Env:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.logs = LogManager(path, LogConfig(flush_policy="os"))
        self.logs.create_topic("q", 1)
        self.coordinator = ShareCoordinator(self.logs, CONFIG, now_ms=T0)
        info = self.logs.topic("q")
        assert info is not None
        self.tid: uuid.UUID = info.topic_id

    def restart(self) -> ShareCoordinator:
        self.logs.close()
        self.logs = LogManager(self.path, LogConfig(flush_policy="os"))
        self.coordinator = ShareCoordinator(self.logs, CONFIG, now_ms=T0)
        return self.coordinator

    def join(self, member: str = "m") -> int:
        result, _ = self.coordinator.heartbeat(
            group_id="g", member_id=member, member_epoch=0, subscribed=("q",), rack_id=None,
            client_id="c", client_host="h", now_ms=T0)
        assert result.error is ErrorCode.none
        return result.member_epoch

    def loaded(self) -> SharePartition:
        sp, init = self.coordinator.share_partition("g", self.tid, 0, self.logs.get_log("q", 0),
                                                    T0)
        assert init is None  # initialized before
        return sp

    def acquire(self, member: str, count: int, now: int = T0) -> SharePartition:
        sp, _ = self.coordinator.fetchable("g", self.tid, 0, self.logs.get_log("q", 0), now)
        # One batch per record: whole-batch acquisition then takes exactly `count`.
        sp.acquire(member, [LogBatch(i, i) for i in range(100)], max_records=count, now_ms=now)
        return sp

    def stage(self, producer_id: int, *batches: AckBatch, member: str = "m",
              epoch: int = 0) -> ErrorCode:
        code, _ = self.coordinator.stage_txn("g", member, self.tid, 0, list(batches),
                                             producer_id, epoch, T0)
        return code

    def marker(self, producer_id: int, commit: bool, *, apply: bool = True,
               epoch: int = 0) -> None:
        """What the transaction driver does for a marker; `apply=False`: a crash right after
        the marker, before the share coordinator saw it."""
        partition = self.coordinator.state_partition("g", self.tid, 0)
        assert partition is not None
        self.logs.get_log(SHARE_STATE_TOPIC, partition).append_marker(
            producer_id, epoch, commit=commit, now_ms=T0)
        if apply:
            self.coordinator.complete_txn(partition, producer_id, commit, T0)

    def states(self, sp: SharePartition) -> list[tuple[int, RecordState, int]]:
        return [(o, sp.records[o].state, sp.records[o].delivery_count) for o in sorted(sp.records)]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data")
    yield e
    e.logs.close()


def test_commit_applies_staged_acknowledgements(env: Env) -> None:
    env.join()
    sp = env.acquire("m", 10)
    assert env.stage(7, AckBatch(0, 3, (ACCEPT,)), AckBatch(4, 4, (REJECT,))) is ErrorCode.none
    assert [sp.records[o].state for o in range(5)] == [RecordState.TX_PENDING] * 5
    assert sp.start_offset == 0  # TX_PENDING is not done
    env.marker(7, commit=True)
    assert sp.start_offset == 5  # 0-3 acknowledged, 4 archived
    assert env.states(sp)[0] == (5, RecordState.ACQUIRED, 1)
    # and durably: after a restart the committed states stand
    env.restart()
    assert env.loaded().start_offset == 5


def test_abort_releases_with_the_delivery_count(env: Env) -> None:
    env.join()
    sp = env.acquire("m", 3)
    assert env.stage(7, AckBatch(0, 2, (ACCEPT,))) is ErrorCode.none
    env.marker(7, commit=False)
    assert env.states(sp) == [(o, RecordState.AVAILABLE, 1) for o in range(3)]
    got = sp.acquire("m", [LogBatch(0, 2)], max_records=3, now_ms=T0)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(0, 2, 2)]
    # aborted again at the delivery count limit (2): archived, as a release would
    assert env.stage(8, AckBatch(0, 2, (ACCEPT,))) is ErrorCode.none
    env.marker(8, commit=False)
    assert sp.start_offset == 3 and sp.records == {}


def test_tx_pending_is_not_acquired_expired_or_released_with_its_member(env: Env) -> None:
    env.join()
    env.join("n")
    sp = env.acquire("m", 4)
    assert env.stage(7, AckBatch(0, 1, (ACCEPT,))) is ErrorCode.none
    # the lock runs out, the member leaves (timeout): 2-3 are released, 0-1 stay held
    env.coordinator.tick(T0 + 10_000)
    assert not env.coordinator.is_member("g", "m")
    assert [sp.records[o].state for o in range(4)] == [
        RecordState.TX_PENDING, RecordState.TX_PENDING, RecordState.AVAILABLE,
        RecordState.AVAILABLE]
    got = sp.acquire("n", [LogBatch(0, 3)], max_records=10, now_ms=T0 + 10_000)
    assert [(a.first_offset, a.last_offset) for a in got] == [(2, 3)]
    # nor can another acknowledgement touch them
    assert env.coordinator.acknowledge("g", "n", env.tid, 0, [AckBatch(0, 1, (ACCEPT,))],
                                       T0)[0] is ErrorCode.invalid_record_state
    # however long it takes (a prepared 2PC transaction): then the marker decides
    env.coordinator.tick(T0 + 10_000_000)
    assert sp.records[0].state is RecordState.TX_PENDING
    env.marker(7, commit=True)
    # 0-1 committed; 2-3 were released with n's session at their delivery limit: archived
    assert sp.start_offset == 4


def test_refused_acknowledgements_change_nothing(env: Env) -> None:
    env.join()
    env.join("n")
    sp = env.acquire("m", 3)
    before = env.states(sp)
    assert env.stage(7, AckBatch(0, 0, (RELEASE,))) is ErrorCode.invalid_request
    assert env.stage(7, AckBatch(0, 0, (9,))) is ErrorCode.invalid_request
    assert env.stage(7, AckBatch(0, 5, (ACCEPT,))) is ErrorCode.invalid_record_state  # 3-5
    assert env.stage(7, AckBatch(0, 0, (ACCEPT,)), member="n") is ErrorCode.invalid_record_state
    assert env.states(sp) == before
    code, written = env.coordinator.stage_txn("g", "m", uuid.uuid4(), 0,
                                              [AckBatch(0, 0, (ACCEPT,))], 7, 0, T0)
    assert (code, written) == (ErrorCode.invalid_record_state, None)  # never fetched from


def test_a_fenced_producer_epoch_is_refused_by_the_log(env: Env) -> None:
    env.join()
    sp = env.acquire("m", 2)
    assert env.stage(7, AckBatch(0, 0, (ACCEPT,)), epoch=3) is ErrorCode.none
    env.marker(7, commit=True, epoch=4)  # the coordinator bumped the epoch (KIP-890)
    assert env.stage(7, AckBatch(1, 1, (ACCEPT,)), epoch=3) is ErrorCode.invalid_producer_epoch
    assert sp.records[1].state is RecordState.ACQUIRED


def test_replay_folds_committed_drops_aborted_and_holds_open_stagings(env: Env) -> None:
    env.join()
    env.acquire("m", 6)
    assert env.stage(7, AckBatch(0, 1, (ACCEPT,))) is ErrorCode.none
    assert env.stage(8, AckBatch(2, 3, (REJECT,))) is ErrorCode.none
    assert env.stage(9, AckBatch(4, 4, (ACCEPT,))) is ErrorCode.none
    # crash right after the markers of 7 (commit) and 8 (abort); 9's transaction still open
    env.marker(7, commit=True, apply=False)
    env.marker(8, commit=False, apply=False)
    c = env.restart()
    sp = c.partitions[("g", env.tid, 0)]  # loaded at start: it holds an open transaction
    assert sp.start_offset == 2
    # 0-1 committed, 2-3 aborted (acquired only, as far as the log knows: AVAILABLE, count 0),
    # 4 held again for the open transaction; 5 was only acquired: past the end, untracked
    assert env.states(sp) == [(2, RecordState.AVAILABLE, 0), (3, RecordState.AVAILABLE, 0),
                              (4, RecordState.TX_PENDING, 1)]
    assert sp.pending_producers() == {9}
    # the coordinator's roll-forward after the restart writes 9's COMMIT marker
    env.marker(9, commit=True)
    assert sp.records[4].state is RecordState.ACKNOWLEDGED
    env.restart()
    sp = env.loaded()
    assert env.states(sp)[2] == (4, RecordState.ACKNOWLEDGED, 1)
    assert sp.pending_producers() == set()


def test_member_checks(env: Env) -> None:
    epoch = env.join()
    c = env.coordinator
    assert c.check_member("g", "m", epoch) is None
    assert c.check_member("g", "x", epoch)[0] is ErrorCode.unknown_member_id  # type: ignore[index]
    assert c.check_member("h", "m", epoch)[0] is ErrorCode.unknown_member_id  # type: ignore[index]
    assert c.check_member("g", "m", epoch + 1)[0] is ErrorCode.fenced_member_epoch  # type: ignore[index]
    env.join("n")
    c.heartbeat(group_id="g", member_id="m", member_epoch=epoch, subscribed=None, rack_id=None,
                client_id="c", client_host="h", now_ms=T0)  # m moves to the new group epoch
    assert c.check_member("g", "m", epoch)[0] is ErrorCode.stale_member_epoch  # type: ignore[index]


def test_the_state_partition_joins_only_an_ongoing_transaction(tmp_path: Path) -> None:
    logs = LogManager(tmp_path / "logs", LogConfig(flush_policy="os"))
    try:
        txn = TransactionCoordinator(logs, ProducerIdManager(tmp_path / "pids"),
                                     TxnConfig(num_partitions=1), now_ms=T0)
        tp = (SHARE_STATE_TOPIC, 1)
        r = txn.init_producer_id("t", 60_000, now_ms=T0)
        pid, epoch = r.producer_id, r.producer_epoch
        assert txn.add_to_ongoing("t", pid, epoch, [tp], now_ms=T0) is ErrorCode.invalid_txn_state
        assert txn.add_to_ongoing("u", pid, epoch, [tp],
                                  now_ms=T0) is ErrorCode.invalid_producer_id_mapping
        assert txn.add_partitions("t", pid, epoch, [("out", 0)], now_ms=T0,
                                  client_transaction_version=2)[("out", 0)] is ErrorCode.none
        assert txn.add_to_ongoing("t", pid, epoch - 1 if epoch else epoch + 1, [tp],
                                  now_ms=T0) is ErrorCode.producer_fenced
        assert txn.add_to_ongoing("t", pid, epoch, [tp], now_ms=T0) is ErrorCode.none
        meta = txn.describe("t")
        assert meta is not None and tp in meta.partitions
        assert meta.client_transaction_version == 2  # kept: EndTxn still bumps the epoch
    finally:
        logs.close()


def test_tx_pending_stays_held_when_the_sessions_connection_closes(env: Env) -> None:
    """The connection of the member's share session closes (KAFKA-19015): what it holds is
    released, what its transaction holds stays held until the marker."""
    env.join()
    env.coordinator.sessions.open("g", "m", [(env.tid, 0)], connection_id=1)
    sp = env.acquire("m", 3)
    assert env.stage(7, AckBatch(0, 1, (ACCEPT,))) is ErrorCode.none
    assert len(env.coordinator.connection_closed(1, T0)) == 1
    assert env.states(sp) == [(0, RecordState.TX_PENDING, 1), (1, RecordState.TX_PENDING, 1),
                              (2, RecordState.AVAILABLE, 1)]
    env.marker(7, commit=True)
    assert sp.start_offset == 2
