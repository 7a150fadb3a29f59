"""Loading `__transaction_state` on start, recovery of prepared transactions, admin views."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exactly.log import LogManager
from exactly.log.config import LogConfig
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from exactly.txn import TXN_TOPIC, ProducerIdManager, TransactionCoordinator, TxnState
from exactly.txn.codec import encode_key, encode_value
from exactly.txn.store import to_value
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN, Env, make_config
from tests.helpers.txn.helpers import P0, P1, P2, begin, init, state


def test_topic_is_created_internal_and_compacted(env: Env) -> None:
    info = env.logs.topic(TXN_TOPIC)
    assert info is not None
    assert (info.num_partitions, info.internal) == (5, True)
    assert info.configs["cleanup.policy"] == "compact"
    assert info.configs["retention.ms"] == "-1"


def test_existing_topic_keeps_its_partition_count(env: Env) -> None:
    env.logs.close()
    logs = LogManager(env.path / "logs", LogConfig(flush_policy="os"))
    env.opened.append(logs)
    coord = TransactionCoordinator(logs, ProducerIdManager(env.path / "producer_ids"),
                                   make_config(num_partitions=50), now_ms=T0)
    assert coord.num_partitions == 5


def test_records_go_to_the_ids_partition(coord: TransactionCoordinator) -> None:
    from exactly.protocol.partitioning import partition_for

    init(coord)
    assert coord.partition_for(TXN) == partition_for(TXN, 5)
    assert coord.log_for(TXN).log_end_offset == 1


def test_restart_restores_every_state(env: Env) -> None:
    coord = env.coordinator
    init(coord, "empty")
    begin(coord, "ongoing", partitions=(P0, P2))
    pid, epoch = begin(coord, "committed")
    coord.end_txn("committed", pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    coord.markers_written("committed", T0 + 2)
    pid, epoch = begin(coord, "aborted")
    coord.end_txn("aborted", pid, epoch, False, bump_epoch=True, now_ms=T0 + 1)
    coord.markers_written("aborted", T0 + 2)
    before = {t: coord.describe(t) for t in coord.transactional_ids()}
    coord = env.restart(T0 + 10)
    after = {t: coord.describe(t) for t in coord.transactional_ids()}
    assert set(after) == set(before)
    for txn_id, meta in before.items():
        got = after[txn_id]
        assert got is not None and meta is not None
        # lastProducerEpoch is not in the log (as in Kafka), except as derived for version 2.
        meta.last_producer_epoch = got.last_producer_epoch
        meta.last_producer_id = got.last_producer_id
        assert got == meta, txn_id
    assert state(coord, "aborted") is TxnState.COMPLETE_ABORT
    # Producer ids are never handed out twice across the restart.
    assert init(coord, "fresh")[0] not in {m.producer_id for m in before.values() if m}


def test_prepared_transaction_rolls_forward_after_restart(env: Env) -> None:
    coord = env.coordinator
    pid, epoch = begin(coord)
    r = coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    assert r.markers is not None
    coord = env.restart(T0 + 100)
    assert coord.pending_markers() == [r.markers]
    assert coord.ongoing_partitions(pid) == {P0, P1}
    assert coord.markers_written(TXN, T0 + 101) == (pid, epoch)
    assert coord.pending_markers() == []
    assert coord.ongoing_partitions(pid) is None
    coord = env.restart(T0 + 200)
    assert state(coord) is TxnState.COMPLETE_COMMIT
    r2 = coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 201)
    assert r2.error == ErrorCode.none


def test_prepared_overflow_transaction_after_restart(env: Env) -> None:
    coord = env.coordinator
    pid, _ = init(coord)
    coord.state_manager._txns[TXN].producer_epoch = 32766
    coord.add_partitions(TXN, pid, 32766, [P0], now_ms=T0)
    r = coord.end_txn(TXN, pid, 32766, False, bump_epoch=True, now_ms=T0 + 1)
    coord = env.restart(T0 + 2)
    (m,) = coord.pending_markers()
    assert (m.producer_id, m.producer_epoch, m.commit, m.partitions) == (pid, 32767, False, [P0])
    assert coord.markers_written(TXN, T0 + 3) == (r.producer_id, 0)
    coord = env.restart(T0 + 4)
    retry = coord.end_txn(TXN, pid, 32766, False, bump_epoch=True, now_ms=T0 + 5)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (
        ErrorCode.none, r.producer_id, 0)


def test_ongoing_transaction_times_out_after_restart(env: Env) -> None:
    pid, epoch = begin(env.coordinator)
    coord = env.restart(T0 + 5)
    assert coord.ongoing_partitions(pid) == {P0, P1}
    (m,) = coord.tick(T0 + TIMEOUT + 1)
    assert (m.producer_id, m.producer_epoch, m.commit) == (pid, epoch + 1, False)


def _append_raw(env: Env, txn_id: str, values: list[bytes | None]) -> None:
    plog = env.coordinator.log_for(txn_id)
    records = [Record(encode_key(txn_id), v) for v in values]
    plog.append(build_batch(records, timestamp=T0), now_ms=T0)


def test_lower_epoch_in_log_is_reported_and_ignored(env: Env,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    coord = env.coordinator
    _, epoch = init(coord)
    init(coord, now=T0 + 1)
    init(coord, now=T0 + 2)
    stale = coord.describe(TXN)
    assert stale is not None
    stale.producer_epoch = epoch  # a record going back to the first epoch
    _append_raw(env, TXN, [encode_value(to_value(stale))])
    with caplog.at_level(logging.ERROR, logger="exactly.txn"):
        coord = env.restart(T0 + 3)
    assert "txn_log_epoch_regression" in caplog.text
    meta = coord.describe(TXN)
    assert meta is not None and meta.producer_epoch == epoch + 2


def test_bad_records_are_skipped(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    init(env.coordinator)
    _append_raw(env, TXN, [b"\x00\x09garbage"])
    plog = env.coordinator.log_for("other")
    plog.append(build_batch([Record(b"\x00", b"x"), Record(None, b"y")], timestamp=T0),
                now_ms=T0)
    with caplog.at_level(logging.ERROR, logger="exactly.txn"):
        coord = env.restart(T0 + 1)
    assert "txn_log_bad_value" in caplog.text
    assert state(coord) is TxnState.EMPTY


def test_tombstone_forgets_the_id(env: Env) -> None:
    init(env.coordinator)
    _append_raw(env, TXN, [None])
    coord = env.restart(T0 + 1)
    assert coord.describe(TXN) is None


def test_reads_version_0_values(env: Env) -> None:
    init(env.coordinator)
    meta = env.coordinator.describe(TXN)
    assert meta is not None
    meta.state, meta.partitions, meta.txn_start_ms = TxnState.ONGOING, {P0}, T0
    _append_raw(env, TXN, [encode_value(to_value(meta), version=0)])
    coord = env.restart(T0 + 1)
    assert coord.describe(TXN) == meta


# -- admin views -------------------------------------------------------------------------------


def test_describe_returns_a_copy(coord: TransactionCoordinator) -> None:
    begin(coord)
    meta = coord.describe(TXN)
    assert meta is not None
    meta.partitions.add(P2)
    again = coord.describe(TXN)
    assert again is not None and P2 not in again.partitions
    assert coord.describe("nope") is None


def test_list_transactions_filters(coord: TransactionCoordinator) -> None:
    pid_a, _ = init(coord, "a")
    pid_b, _ = begin(coord, "b", now=T0 + 1000)
    begin(coord, "c", now=T0 + 5000)

    def ids(**kw: object) -> list[str]:
        return [m.transactional_id for m in coord.list_transactions(**kw)]  # type: ignore[arg-type]

    assert ids() == ["a", "b", "c"]
    assert ids(states={"Ongoing"}) == ["b", "c"]
    assert ids(states={"Empty", "Bogus"}) == ["a"]
    assert ids(states={"Bogus"}) == []
    assert ids(producer_ids={pid_a, pid_b}) == ["a", "b"]
    assert ids(states={"Ongoing"}, duration_filter_ms=3000, now_ms=T0 + 6000) == ["b"]
    assert ids(states=set(), producer_ids=set()) == ["a", "b", "c"]


def test_ongoing_partitions(coord: TransactionCoordinator) -> None:
    pid, _ = init(coord, "a")
    assert coord.ongoing_partitions(pid) is None
    pid_b, _ = begin(coord, "b")
    assert coord.ongoing_partitions(pid_b) == {P0, P1}
    assert coord.ongoing_partitions(12345) is None


def test_second_coordinator_on_fresh_dir(tmp_path: Path) -> None:
    logs = LogManager(tmp_path / "logs", LogConfig(flush_policy="os"))
    try:
        coord = TransactionCoordinator(logs, ProducerIdManager(tmp_path / "pids"),
                                       make_config(), now_ms=T0)
        assert coord.transactional_ids() == []
        assert coord.pending_markers() == []
    finally:
        logs.close()


def test_the_quick_load_and_the_record_by_record_load_agree(env: Env) -> None:
    """`_load` decodes only each id's newest record; `_load_slowly`, every record: on a log with
    many records per id (begins, ends, open transactions) they give the same state."""
    coord = env.coordinator
    for n in range(45):
        txn_id = f"t{n % 7}"
        pid, epoch = begin(coord, txn_id, partitions=(P0, P1) if n % 2 else (P2,))
        if n < 42:  # the last three stay open
            coord.end_txn(txn_id, pid, epoch, n % 3 != 0, bump_epoch=n % 2 == 0, now_ms=T0 + 1)
            coord.markers_written(txn_id, T0 + 2)
    manager = env.restart(T0 + 10).state_manager
    quick = dict(manager._txns)
    manager._load_slowly()
    assert manager._txns == quick and len(quick) == 7
