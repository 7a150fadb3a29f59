"""tick(): transaction timeouts (abort with an epoch bump) and transactional id expiration."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from exactly.log.cleaner import LogCleaner
from exactly.log.config import CleanerConfig
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch, decode_records, iter_batches
from exactly.txn import TXN_TOPIC, TransactionCoordinator, TxnState
from exactly.txn.codec import encode_key
from tests.helpers.txn.fixtures import T0, TIMEOUT, TXN, Env
from tests.helpers.txn.helpers import P0, P1, begin, init, log_end, state

DAY = 24 * 3600 * 1000


def test_timeout_aborts_with_bumped_epoch(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    assert coord.tick(T0 + TIMEOUT) == []  # not past the deadline yet
    assert state(coord) is TxnState.ONGOING
    markers = coord.tick(T0 + TIMEOUT + 1)
    assert len(markers) == 1
    m = markers[0]
    assert (m.transactional_id, m.producer_id, m.producer_epoch, m.commit, m.partitions) == (
        TXN, pid, epoch + 1, False, [P0, P1])
    assert state(coord) is TxnState.PREPARE_ABORT
    assert coord.tick(T0 + TIMEOUT + 2) == []  # not aborted twice
    # The zombie is fenced. A version-2 EndTxn one epoch below is taken for a retry of the abort
    # (Kafka's retryOnEpochBump): a commit is INVALID_TXN_STATE, as Kafka 4.4 answers.
    assert coord.end_txn(TXN, pid, epoch, True, bump_epoch=False,
                         now_ms=T0 + TIMEOUT + 3).error == ErrorCode.producer_fenced
    assert coord.end_txn(TXN, pid, epoch, True, bump_epoch=True,
                         now_ms=T0 + TIMEOUT + 3).error == ErrorCode.invalid_txn_state
    assert coord.add_partitions(TXN, pid, epoch, [P0], now_ms=T0 + TIMEOUT + 3) == {
        P0: ErrorCode.producer_fenced}
    assert coord.markers_written(TXN, T0 + TIMEOUT + 4) == (pid, epoch + 1)
    assert state(coord) is TxnState.COMPLETE_ABORT
    # A version-2 client's abort after the coordinator's is answered as its retry, with the
    # bumped epoch, as Kafka 4.4 answers (KIP-890: the producer goes on with it); a commit is not.
    r = coord.end_txn(TXN, pid, epoch, False, bump_epoch=True, now_ms=T0 + TIMEOUT + 5)
    assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert coord.end_txn(TXN, pid, epoch, True, bump_epoch=True,
                         now_ms=T0 + TIMEOUT + 5).error == ErrorCode.invalid_txn_state
    assert coord.end_txn(TXN, pid, epoch, False, bump_epoch=False,
                         now_ms=T0 + TIMEOUT + 5).error == ErrorCode.producer_fenced
    assert init(coord, now=T0 + TIMEOUT + 6) == (pid, epoch + 2)


def test_timeout_uses_each_transactions_own_timeout(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord, "short", timeout=1000)
    coord.add_partitions("short", pid, epoch, [P0], now_ms=T0)
    begin(coord)  # TIMEOUT = 60 s
    assert [m.transactional_id for m in coord.tick(T0 + 1001)] == ["short"]
    assert state(coord) is TxnState.ONGOING


def test_timeout_counts_from_transaction_start(coord: TransactionCoordinator) -> None:
    pid, epoch = init(coord)
    coord.add_partitions(TXN, pid, epoch, [P0], now_ms=T0 + 50_000)
    coord.add_partitions(TXN, pid, epoch, [P1], now_ms=T0 + 100_000)
    assert coord.tick(T0 + 110_000) == []
    assert len(coord.tick(T0 + 110_001)) == 1


def test_prepared_transactions_do_not_time_out(coord: TransactionCoordinator) -> None:
    pid, epoch = begin(coord)
    coord.end_txn(TXN, pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    assert coord.tick(T0 + 10 * TIMEOUT) == []
    assert state(coord) is TxnState.PREPARE_COMMIT


def test_idle_ids_expire(make_env: Callable[..., Env]) -> None:
    env = make_env(transactional_id_expiration_ms=DAY)
    coord = env.coordinator
    init(coord, "idle")
    pid, epoch = begin(coord, "done")
    coord.end_txn("done", pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
    coord.markers_written("done", T0 + 2)
    begin(coord, "open", partitions=(P0,))
    coord.state_manager._txns["open"].txn_timeout_ms = 10 * DAY  # stays open past the expiration
    end = log_end(coord, "idle")
    assert coord.tick(T0 + DAY) == []
    assert coord.describe("idle") is not None
    assert coord.tick(T0 + DAY + 1) == []
    assert coord.describe("idle") is None
    assert log_end(coord, "idle") == end + 1  # the tombstone
    assert coord.describe("done") is not None  # last updated at T0 + 2
    coord.tick(T0 + DAY + 3)
    assert coord.describe("done") is None
    assert coord.describe("open") is not None  # an open transaction never expires
    # After expiration the id starts over with a new producer id.
    r = coord.init_producer_id("done", TIMEOUT, now_ms=T0 + DAY + 4)
    assert r.error == ErrorCode.none and r.producer_epoch == 0 and r.producer_id != pid
    # The old producer is unknown now.
    assert coord.end_txn("idle", 0, 0, True, bump_epoch=False,
                         now_ms=T0 + DAY + 5).error == ErrorCode.invalid_producer_id_mapping
    # The expiration survives a restart (tombstones).
    coord = env.restart(T0 + DAY + 6)
    assert coord.describe("idle") is None
    assert coord.describe("open") is not None


def test_activity_postpones_expiration(make_env: Callable[..., Env]) -> None:
    env = make_env(transactional_id_expiration_ms=DAY)
    coord = env.coordinator
    init(coord)
    init(coord, now=T0 + DAY // 2)
    coord.tick(T0 + DAY + 1)
    assert coord.describe(TXN) is not None


def test_failed_write_changes_nothing(coord: TransactionCoordinator,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from exactly.log.errors import StorageError

    pid, epoch = begin(coord)
    before = coord.describe(TXN)

    def fail(*args: object, **kwargs: object) -> None:
        raise StorageError("disk full")

    monkeypatch.setattr(coord.state_manager.txn_log, "write", fail)
    assert coord.tick(T0 + TIMEOUT + 1) == []  # logged, retried on the next tick
    with pytest.raises(StorageError):
        coord.end_txn(TXN, pid, epoch, True, bump_epoch=True, now_ms=T0 + 2)
    assert coord.describe(TXN) == before
    monkeypatch.undo()
    (m,) = coord.tick(T0 + TIMEOUT + 2)
    assert m.producer_epoch == epoch + 1


def test_an_expired_id_is_compacted_away(make_env: Callable[..., Env]) -> None:
    """Expiry writes a tombstone (issue 13): the log cleaner then removes the id's records, and
    the tombstone itself once delete.retention.ms has passed; the other ids stay."""
    env = make_env(transactional_id_expiration_ms=DAY, num_partitions=1)
    coord = env.coordinator
    for _ in range(3):
        pid, epoch = begin(coord, "gone")
        coord.end_txn("gone", pid, epoch, True, bump_epoch=False, now_ms=T0 + 1)
        coord.markers_written("gone", T0 + 2)
    init(coord, "kept", now=T0 + DAY)
    coord.tick(T0 + DAY + 3)
    assert coord.describe("gone") is None and coord.describe("kept") is not None
    plog = coord.log_for("gone")
    plog.roll(T0 + DAY + 4)  # what is written so far becomes cleanable

    def keys() -> list[tuple[bytes | None, bool]]:
        found, offset = [], plog.log_start_offset
        while data := plog.read(offset, 1 << 20):
            for h in iter_batches(data):
                found += [(r.key, r.value is None) for r in decode_records(h)]
                offset = h.next_offset
        return found

    env.logs.alter_topic_configs(TXN_TOPIC, {"min.cleanable.dirty.ratio": "0"}, [])
    cleaner = LogCleaner(env.logs.log_dir, env.logs.logs, CleanerConfig())
    assert cleaner.clean_once(T0 + DAY + 5) is not None
    assert keys() == [(encode_key("kept"), False), (encode_key("gone"), True)]
    plog.append(build_batch([Record(encode_key("other"), None)], timestamp=T0 + 3 * DAY))
    plog.roll(T0 + 3 * DAY)
    assert cleaner.clean_once(T0 + 3 * DAY) is not None  # past delete.retention.ms (1 day)
    # The old tombstone went; the new one (written now, to make the log dirty) stays for a day.
    assert keys() == [(encode_key("kept"), False), (encode_key("other"), True)]
    coord = env.restart(T0 + 3 * DAY)
    assert coord.describe("gone") is None and coord.describe("kept") is not None
