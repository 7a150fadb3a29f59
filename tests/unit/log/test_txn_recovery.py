"""Transactions across restarts: snapshots, crash recovery, the aborted-transaction index on disk."""
from __future__ import annotations

import random
import struct

from exactly.log import LogConfig
from exactly.log.txn_index import ENTRY_SIZE, AbortedTxn
from tests.helpers.log.log_helpers import batch
from tests.unit.log.test_transactions import NOW, Producer, index_entries


def txnindex(tmp_path, base: int):
    return tmp_path / "t-0" / f"{base:020d}.txnindex"


def crash(plog) -> None:
    """Drop the log like kill -9 would: no snapshot, no clean-shutdown marker."""
    plog.active_segment.write_indexes()
    plog.delete()


def state(plog) -> tuple:
    producers = sorted((e.producer_id, e.epoch, e.last_sequence, e.coordinator_epoch,
                        e.current_txn_first_offset) for e in plog.producers())
    return (plog.log_end_offset, plog.last_stable_offset, plog.ongoing_transactions(),
            index_entries(plog), producers)


def scenario(plog) -> None:
    """Two aborted and one open transaction, interleaved, over several segments."""
    a, b, c = Producer(plog, 1), Producer(plog, 2), Producer(plog, 3)
    a.send(2)  # 0-1
    b.send(1)  # 2
    plog.append(batch(1, ts=NOW))  # 3
    a.end(commit=False, coordinator_epoch=1)  # 4
    plog.roll()
    c.send(1)  # 5
    b.end(commit=True, coordinator_epoch=1)  # 6
    a.send(1)  # 7
    c.end(commit=False, coordinator_epoch=2)  # 8
    plog.roll()
    b.send(2)  # 9-10: stays open


EXPECTED_ENTRIES = [AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 5, 8, 7)]


def test_clean_reopen_keeps_transactions(open_log, tmp_path):
    plog = open_log()
    scenario(plog)
    before = state(plog)
    assert before[2] == {1: 7, 2: 9} and before[1] == 7 and before[3] == EXPECTED_ENTRIES
    plog.close()
    assert txnindex(tmp_path, 0).stat().st_size == ENTRY_SIZE
    plog = open_log()
    assert state(plog) == before
    assert plog.aborted_transactions(0, 11) == [(1, 0), (3, 5)]
    # the restored transactions go on as before
    plog.append_marker(1, 0, commit=False, coordinator_epoch=2)
    assert plog.ongoing_transactions() == {2: 9} and plog.last_stable_offset == 9
    assert index_entries(plog)[-1] == AbortedTxn(1, 7, 11, 9)


def test_unclean_reopen_rebuilds_transactions(open_log):
    plog = open_log()
    scenario(plog)
    before = state(plog)
    crash(plog)
    assert state(open_log()) == before


def test_unclean_reopen_without_any_snapshot_replays_everything(open_log, tmp_path):
    plog = open_log()
    scenario(plog)
    before = state(plog)
    crash(plog)
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    for f in (tmp_path / "t-0").glob("*.txnindex"):
        f.unlink()
    assert state(open_log()) == before


def test_torn_tail_after_marker_reopens_the_transaction(open_log, tmp_path):
    plog = open_log()
    p = Producer(plog, 1)
    p.send(2)  # 0-1
    plog.append(batch(1, ts=NOW))  # 2
    size_before_marker = plog.active_segment.size
    assert p.end(commit=False) == 3
    assert index_entries(plog) == [AbortedTxn(1, 0, 3, 4)]
    crash(plog)
    log_file = tmp_path / "t-0" / f"{0:020d}.log"
    with open(log_file, "r+b") as f:
        f.truncate(size_before_marker + 20)  # the marker is torn
    plog = open_log()
    assert plog.log_end_offset == 3
    assert index_entries(plog) == [] and txnindex(tmp_path, 0).stat().st_size == 0
    assert plog.ongoing_transactions() == {1: 0} and plog.last_stable_offset == 0
    assert plog.aborted_transactions(0, 3) == []
    # the coordinator writes the marker again
    assert plog.append_marker(1, 0, commit=False).base_offset == 3
    assert plog.aborted_transactions(0, 4) == [(1, 0)]


def test_torn_marker_after_a_clean_restart(open_log, tmp_path):
    """The newest snapshot was taken after the marker; the log is later cut below it."""
    plog = open_log()
    p = Producer(plog, 1)
    p.send(2)  # 0-1
    plog.close()  # snapshot at 2: the transaction is open
    plog = open_log()
    size_before_marker = plog.active_segment.size
    p.plog = plog
    p.end(commit=False)  # 2
    plog.close()  # snapshot at 3: no transaction open
    plog = open_log()
    crash(plog)
    with open(tmp_path / "t-0" / f"{0:020d}.log", "r+b") as f:
        f.truncate(size_before_marker + 30)
    plog = open_log()
    assert plog.log_end_offset == 2
    assert plog.ongoing_transactions() == {1: 0} and index_entries(plog) == []


def test_missing_txnindex_of_an_old_segment_is_rebuilt(open_log, tmp_path):
    plog = open_log()
    scenario(plog)
    before = state(plog)
    plog.close()  # clean: only the index check can trigger the rebuild
    txnindex(tmp_path, 0).unlink()
    plog = open_log()
    assert state(plog) == before
    assert len(txnindex(tmp_path, 0).read_bytes()) == ENTRY_SIZE


def test_corrupt_txnindex_is_rebuilt(open_log, tmp_path):
    bases = None
    corruptions = [
        lambda data: data + b"\x00" * 5,  # torn entry
        lambda data: b"\x00\x07" + data[2:],  # unknown version
        lambda data: data[:18] + struct.pack(">q", 10_000) + data[26:],  # marker past the segment
        lambda data: data + data,  # offsets go backwards
    ]
    for i, corrupt in enumerate(corruptions):
        plog = open_log(name="t-0")
        if bases is None:
            scenario(plog)
            bases = [s.base_offset for s in plog.segments]
        before = state(plog)
        plog.close()
        path = txnindex(tmp_path, bases[1])
        good = path.read_bytes()
        assert len(good) == ENTRY_SIZE, i
        path.write_bytes(corrupt(good))
        plog = open_log(name="t-0")
        assert state(plog) == before, i
        assert path.read_bytes() == good, i
        plog.close()


def test_retention_deletes_txnindex_files(open_log, tmp_path, clock):
    plog = open_log(LogConfig(retention_ms=60_000))
    scenario(plog)
    bases = [s.base_offset for s in plog.segments]
    assert all(txnindex(tmp_path, b).exists() for b in bases)
    assert plog.apply_retention(clock.ms + 10**13) == 2
    assert not txnindex(tmp_path, bases[0]).exists() and not txnindex(tmp_path, bases[1]).exists()
    assert txnindex(tmp_path, bases[2]).exists()
    assert index_entries(plog) == [] and plog.aborted_transactions(0, 11) == []
    plog.close()
    plog = open_log(LogConfig(retention_ms=60_000))
    # a's transaction from offset 7 is still open; the LSO never falls below the log start
    assert plog.ongoing_transactions() == {1: 7, 2: 9} and plog.last_stable_offset == 9


def test_stray_txnindex_without_segment_is_removed(open_log, tmp_path):
    plog = open_log()
    scenario(plog)
    plog.close()
    stray = txnindex(tmp_path, 12345)
    stray.write_bytes(b"")
    open_log()
    assert not stray.exists()


def test_random_histories_recover_to_the_same_state(open_log, tmp_path):
    rng = random.Random(7)
    for round_ in range(12):
        name = f"r-{round_}"
        plog = open_log(LogConfig(segment_bytes=rng.choice([300, 600, 1 << 20])), name=name)
        producers = [Producer(plog, pid) for pid in range(1, 5)]
        for _ in range(60):
            p = rng.choice(producers)
            roll = rng.random()
            if roll < 0.45:
                p.send(rng.randint(1, 3), transactional=p.pid != 4)
            elif roll < 0.7:
                p.end(commit=rng.random() < 0.5, bump=rng.random() < 0.3)
            elif roll < 0.8:
                plog.append(batch(1, ts=NOW))
            elif roll < 0.85:
                plog.roll()
            elif roll < 0.9:  # clean restart
                plog.close()
                plog = open_log(plog.config, name=name)
                for q in producers:
                    q.plog = plog
        before = state(plog)
        ranges = [(s, e) for s in range(0, plog.log_end_offset, 7) for e in (s + 1, s + 13, 10**6)]
        answers = [plog.aborted_transactions(s, e) for s, e in ranges]
        crash(plog)
        directory = tmp_path / name
        if round_ % 3 == 1:
            for f in directory.glob("*.txnindex"):
                f.unlink()
        if round_ % 3 == 2:
            for f in directory.glob("*.snapshot"):
                f.unlink()
        plog = open_log(plog.config, name=name)
        assert state(plog) == before, round_
        assert [plog.aborted_transactions(s, e) for s, e in ranges] == answers, round_
        # brute force: every aborted transaction with records in range, by first offset
        for (s, e), got in zip(ranges, answers, strict=True):
            want = sorted((t.first_offset, t.producer_id) for t in before[3]
                          if t.last_offset >= s and t.first_offset < e)
            assert got == [(pid, first) for first, pid in want], (round_, s, e)
