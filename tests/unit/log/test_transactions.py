"""Transactions in the partition log: markers, open transactions, LSO, aborted-transaction index."""
from __future__ import annotations

import pytest

from exactly.log import LogConfig, LogManager
from exactly.log.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from exactly.log.markers import parse_marker
from exactly.log.txn_index import AbortedTxn
from exactly.protocol.records import Record, build_batch, iter_batches
from tests.helpers.log.log_helpers import batch, offsets_of

NOW = 1_700_000_000_000  # the FakeClock's start: markers carry the clock's time


class Producer:
    """A transactional producer writing to one log, keeping its own sequence numbers."""

    def __init__(self, plog, pid: int, epoch: int = 0) -> None:
        self.plog, self.pid, self.epoch, self.seq = plog, pid, epoch, 0

    def send(self, n: int = 1, *, transactional: bool = True, **kw) -> tuple[int, int]:
        kw.setdefault("ts", NOW)
        r = self.plog.append(batch(n, pid=self.pid, epoch=self.epoch, seq=self.seq,
                                   transactional=transactional, **kw))
        self.seq += n
        return r.base_offset, r.last_offset

    def end(self, commit: bool, *, bump: bool = False, coordinator_epoch: int = 0) -> int:
        if bump:
            self.epoch += 1
            self.seq = 0
        r = self.plog.append_marker(self.pid, self.epoch, commit=commit,
                                    coordinator_epoch=coordinator_epoch)
        assert r.base_offset == r.last_offset
        return r.base_offset


def read_all(plog, max_offset: int) -> bytes:
    """Every batch below `max_offset`, across segments (one read stops at a segment's end)."""
    out, offset = b"", plog.log_start_offset
    while True:
        data = plog.read(offset, 1 << 20, max_offset=max_offset)
        if not data:
            return out
        out += data
        offset = list(iter_batches(data))[-1].next_offset


def index_entries(plog) -> list[AbortedTxn]:
    return [e for seg in plog.segments for e in seg.txn_index.entries]


def test_first_offset_and_lso_follow_interleaved_transactions(open_log):
    plog = open_log()
    a, b = Producer(plog, 1), Producer(plog, 2)
    assert plog.last_stable_offset == 0 and plog.ongoing_transactions() == {}
    plog.append(batch(2))  # 0-1: plain data
    assert plog.last_stable_offset == 2
    assert a.send(2) == (2, 3)
    assert plog.ongoing_transactions() == {1: 2} and plog.last_stable_offset == 2
    assert b.send(1) == (4, 4)
    a.send(1)  # 5: continues a's transaction
    assert plog.ongoing_transactions() == {1: 2, 2: 4}
    assert plog.last_stable_offset == 2
    assert a.end(commit=True) == 6
    assert plog.ongoing_transactions() == {2: 4} and plog.last_stable_offset == 4
    assert a.send(1) == (7, 7)  # a's next transaction
    assert plog.ongoing_transactions() == {2: 4, 1: 7}
    assert b.end(commit=False) == 8
    assert plog.last_stable_offset == 7
    a.end(commit=True)
    assert plog.ongoing_transactions() == {} and plog.last_stable_offset == plog.high_watermark == 10
    entry = plog.producer_state.last_entry(1)
    assert entry is not None and entry.current_txn_first_offset is None


def test_read_committed_stops_at_the_lso(open_log):
    plog = open_log()
    p = Producer(plog, 5)
    plog.append(batch(1))
    p.send(2)
    plog.append(batch(1))
    assert offsets_of(read_all(plog, plog.last_stable_offset)) == [0]
    p.end(commit=True)
    data = read_all(plog, plog.last_stable_offset)
    assert [h.base_offset for h in iter_batches(data)] == [0, 1, 3, 4]
    control = list(iter_batches(data))[-1]
    assert control.is_control and control.is_transactional and control.base_sequence == -1
    marker = parse_marker(control)
    assert marker is not None and marker.commit and marker.coordinator_epoch == 0


def test_abort_adds_an_index_entry_commit_does_not(open_log):
    plog = open_log()
    a, b = Producer(plog, 1), Producer(plog, 2)
    a.send(2)  # 0-1
    b.send(1)  # 2
    assert a.end(commit=True) == 3
    assert index_entries(plog) == []
    a.send(1)  # 4
    assert b.end(commit=False) == 5
    # LSO after the marker: a's open transaction, which started at 4
    assert index_entries(plog) == [AbortedTxn(2, 2, 5, 4)]
    assert a.end(commit=False) == 6
    assert index_entries(plog) == [AbortedTxn(2, 2, 5, 4), AbortedTxn(1, 4, 6, 7)]


def test_aborted_transactions_range_queries(open_log):
    plog = open_log(LogConfig(segment_bytes=400))
    a, b, c = Producer(plog, 1), Producer(plog, 2), Producer(plog, 3)
    b.send(1)  # 0: b's transaction opens first ...
    a.send(1)  # 1
    a.end(commit=False)  # 2: ... but a's aborts first
    plog.append(batch(1))  # 3
    b.end(commit=False)  # 4
    c.send(2)  # 5-6
    c.end(commit=True)  # 7
    c.send(1)  # 8
    plog.append(batch(3))  # 9-11
    c.end(commit=False)  # 12
    assert len(plog.segments) > 1  # entries spread over segments
    assert index_entries(plog) == [AbortedTxn(1, 1, 2, 0), AbortedTxn(2, 0, 4, 5), AbortedTxn(3, 8, 12, 13)]
    assert plog.aborted_transactions(0, 13) == [(2, 0), (1, 1), (3, 8)]
    assert plog.aborted_transactions(0, 1) == [(2, 0)]
    assert plog.aborted_transactions(2, 3) == [(2, 0), (1, 1)]  # a's marker at 2 is in range
    assert plog.aborted_transactions(3, 5) == [(2, 0)]
    assert plog.aborted_transactions(5, 8) == []  # only c's committed transaction
    assert plog.aborted_transactions(5, 9) == [(3, 8)]
    assert plog.aborted_transactions(12, 13) == [(3, 8)]
    assert plog.aborted_transactions(13, 20) == []


def test_non_transactional_batch_during_open_transaction_is_refused(open_log):
    plog = open_log()
    p = Producer(plog, 1)
    p.send(1)
    with pytest.raises(InvalidTxnStateError) as err:
        p.send(1, transactional=False)
    assert err.value.error_code.name == "invalid_txn_state"
    assert plog.log_end_offset == 1
    Producer(plog, 2).send(1, transactional=False)  # other producers are unaffected
    p.end(commit=True)
    assert p.send(1, transactional=False) == (3, 3)  # after the end: fine, sequences continue
    assert plog.ongoing_transactions() == {}


def test_marker_with_stale_epoch_is_refused(open_log):
    plog = open_log()
    p = Producer(plog, 1, epoch=3)
    p.send(1)
    with pytest.raises(InvalidProducerEpochError):
        plog.append_marker(1, 2, commit=True)
    assert plog.log_end_offset == 1 and plog.ongoing_transactions() == {1: 0}


def test_marker_with_bumped_epoch_fences_the_old_epoch(open_log):
    plog = open_log()
    p = Producer(plog, 1, epoch=0)
    p.send(3)  # 0-2, sequences 0-2
    p.end(commit=False, bump=True)  # 3: KIP-890 marker with epoch 1
    assert plog.producer_state.last_entry(1).epoch == 1
    with pytest.raises(InvalidProducerEpochError):  # a zombie of epoch 0
        plog.append(batch(1, pid=1, epoch=0, seq=3, transactional=True))
    with pytest.raises(OutOfOrderSequenceError):  # the new epoch starts at sequence 0
        plog.append(batch(1, pid=1, epoch=1, seq=3, transactional=True))
    assert plog.log_end_offset == 4
    assert p.send(1) == (4, 4)
    assert plog.ongoing_transactions() == {1: 4}


def test_marker_with_same_epoch_keeps_sequences(open_log):
    plog = open_log()
    p = Producer(plog, 1)
    p.send(2)
    p.end(commit=True)
    entry = plog.producer_state.last_entry(1)
    assert entry.last_sequence == 1 and entry.epoch == 0
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(batch(1, pid=1, epoch=0, seq=0, transactional=True))
    assert p.send(1) == (3, 3)


def test_coordinator_epoch_fencing(open_log):
    plog = open_log()
    p = Producer(plog, 1)
    p.send(1)
    p.end(commit=True, coordinator_epoch=5)
    p.send(1)
    with pytest.raises(TransactionCoordinatorFencedError) as err:
        p.end(commit=False, coordinator_epoch=4)
    assert err.value.error_code.name == "transaction_coordinator_fenced"
    assert plog.ongoing_transactions() == {1: 2} and plog.log_end_offset == 3
    p.end(commit=False, coordinator_epoch=5)
    assert plog.producer_state.last_entry(1).coordinator_epoch == 5
    p.end(commit=False, coordinator_epoch=6)  # a retry from a newer coordinator: written, no effect
    assert plog.producer_state.last_entry(1).coordinator_epoch == 6
    assert index_entries(plog) == [AbortedTxn(1, 2, 3, 4)]


def test_marker_without_open_transaction_changes_nothing_else(open_log):
    plog = open_log()
    p = Producer(plog, 1)
    p.send(2)
    p.end(commit=True)
    before = plog.producer_state.last_entry(1).copy()
    r = plog.append_marker(1, 0, commit=True)
    assert (r.base_offset, r.last_offset) == (3, 3) and plog.log_end_offset == 4
    after = plog.producer_state.last_entry(1)
    assert after.batches == before.batches and after.current_txn_first_offset is None
    r = plog.append_marker(77, 0, commit=False)  # a producer never seen here
    assert r.base_offset == 4 and index_entries(plog) == [] and plog.last_stable_offset == 5


def test_producers_and_describe_fields(open_log):
    plog = open_log()
    p = Producer(plog, 9, epoch=2)
    p.send(3, ts=5000)
    p.end(commit=True, coordinator_epoch=7)
    p.send(1, ts=6000)
    (entry,) = plog.producers()
    assert (entry.producer_id, entry.epoch, entry.last_sequence) == (9, 2, 3)
    assert entry.coordinator_epoch == 7 and entry.current_txn_first_offset == 4
    assert entry.last_timestamp == 6000
    entry.current_txn_first_offset = None  # a copy: the log's state is untouched
    assert plog.ongoing_transactions() == {9: 4}


def test_invalid_control_and_transactional_batches_are_refused(open_log):
    plog = open_log()
    unknown = build_batch([Record(b"\x00\x00\x00\x05", b"\x00\x00\x00\x00\x00\x00")], timestamp=1,
                          producer_id=7, producer_epoch=0, control=True, transactional=True)
    with pytest.raises(InvalidRecordError, match="marker"):
        plog.append(unknown, allow_control=True)
    with pytest.raises(InvalidRecordError, match="producer id"):
        plog.append(batch(1, transactional=True))
    with pytest.raises(InvalidRecordError):
        plog.append_marker(-1, 0, commit=True)
    assert plog.log_end_offset == 0


def test_marker_via_append_allow_control(open_log):
    from exactly.log.markers import build_marker

    plog = open_log()
    p = Producer(plog, 1)
    p.send(1)
    data = build_marker(1, 0, commit=False, coordinator_epoch=2, timestamp=1)
    assert plog.append(data, allow_control=True).base_offset == 1
    assert index_entries(plog) == [AbortedTxn(1, 0, 1, 2)]


def test_marker_bytes_are_the_general_encoders():
    """build_marker's one-pass batch is what build_batch makes of the marker's record."""
    import struct

    from exactly.log.markers import build_marker, parse_marker
    from exactly.protocol.records import Record, RecordBatchHeader, build_batch

    for commit in (False, True):
        for pid, epoch, coordinator_epoch, ts in [(0, 0, 0, 0), (1, 2, 3, 1_700_000_000_000),
                                                  (2**62, 32767, 2**31 - 1, 2**62)]:
            record = Record(struct.pack(">hh", 0, int(commit)),
                            struct.pack(">hi", 0, coordinator_epoch))
            expected = build_batch([record], timestamp=ts, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=-1, transactional=True,
                                   control=True)
            data = build_marker(pid, epoch, commit=commit, coordinator_epoch=coordinator_epoch,
                                timestamp=ts)
            assert data == expected
            marker = parse_marker(RecordBatchHeader(data))
            assert marker is not None
            assert (marker.commit, marker.coordinator_epoch) == (commit, coordinator_epoch)


def test_expire_producers_keeps_open_transactions(open_log, clock, tmp_path):
    plog = open_log()
    Producer(plog, 1).send(1, transactional=False, ts=1000)
    Producer(plog, 2).send(1, ts=1000)  # open transaction
    Producer(plog, 3).send(1, transactional=False, ts=9000)
    assert plog.expire_producers(now_ms=10_000, expiration_ms=5000) == 1
    assert sorted(e.producer_id for e in plog.producers()) == [2, 3]
    plog.append_marker(2, 0, commit=True, now_ms=10_000)
    assert plog.expire_producers(now_ms=14_000, expiration_ms=5000) == 1  # 3 (9000); 2 wrote at 10000
    assert [e.producer_id for e in plog.producers()] == [2]
    # an expired producer starts over: any sequence is accepted
    assert plog.append(batch(1, pid=1, epoch=0, seq=40)).base_offset == 4


def test_log_manager_expires_over_all_logs(tmp_path, clock):
    mgr = LogManager(tmp_path / "logs", LogConfig(), clock=clock)
    mgr.create_topic("a", 2)
    for part in range(2):
        mgr.get_log("a", part).append(batch(1, pid=part + 1, epoch=0, seq=0, ts=1000))
    mgr.get_log("a", 0).append(batch(1, pid=9, epoch=0, seq=0, ts=1000, transactional=True))
    assert mgr.expire_producers(now_ms=100_000, expiration_ms=1000) == 2
    assert mgr.get_log("a", 0).ongoing_transactions() == {9: 1}
    mgr.close()
