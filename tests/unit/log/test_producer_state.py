from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from exactly.log import LogConfig
from exactly.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from exactly.log.producer_state import ProducerStateManager
from tests.helpers.log.log_helpers import batch, offsets_of

PID = 4242


def test_sequences_in_order_accepted(open_log):
    plog = open_log()
    assert plog.append(batch(3, pid=PID, epoch=0, seq=0)).base_offset == 0
    assert plog.append(batch(2, pid=PID, epoch=0, seq=3)).base_offset == 3
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None
    assert (entry.epoch, entry.last_sequence, entry.last_offset) == (0, 4, 4)


def test_duplicate_retry_returns_original_offsets(open_log):
    plog = open_log()
    first = batch(3, pid=PID, epoch=0, seq=0)
    plog.append(first)
    plog.append(batch(1))  # someone else's write in between
    plog.append(batch(2, pid=PID, epoch=0, seq=3))
    size_before = plog.active_segment.size
    retry = plog.append(first)
    assert retry.duplicate is True
    assert (retry.base_offset, retry.last_offset) == (0, 2)
    assert plog.log_end_offset == 6
    assert plog.active_segment.size == size_before
    retry2 = plog.append(batch(2, pid=PID, epoch=0, seq=3))
    assert (retry2.base_offset, retry2.last_offset, retry2.duplicate) == (4, 5, True)


def test_only_last_five_batches_are_cached(open_log):
    plog = open_log()
    for i in range(6):
        plog.append(batch(1, pid=PID, epoch=0, seq=i))
    assert plog.append(batch(1, pid=PID, epoch=0, seq=1)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(batch(1, pid=PID, epoch=0, seq=0))


def test_gap_in_sequence_rejected(open_log):
    plog = open_log()
    plog.append(batch(2, pid=PID, epoch=0, seq=0))
    with pytest.raises(OutOfOrderSequenceError) as exc:
        plog.append(batch(1, pid=PID, epoch=0, seq=5))
    assert exc.value.error_code == ErrorCode.out_of_order_sequence_number
    assert "sequence 5" in str(exc.value)
    assert plog.log_end_offset == 2


def test_stale_epoch_rejected(open_log):
    plog = open_log()
    plog.append(batch(1, pid=PID, epoch=3, seq=0))
    with pytest.raises(InvalidProducerEpochError) as exc:
        plog.append(batch(1, pid=PID, epoch=2, seq=1))
    assert exc.value.error_code == ErrorCode.invalid_producer_epoch
    assert plog.log_end_offset == 1


def test_new_epoch_must_start_at_zero(open_log):
    plog = open_log()
    plog.append(batch(1, pid=PID, epoch=0, seq=0))
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(batch(1, pid=PID, epoch=1, seq=1))
    plog.append(batch(1, pid=PID, epoch=1, seq=0))
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.epoch == 1 and len(entry.batches) == 1


def test_unknown_producer_accepts_any_sequence(open_log):
    plog = open_log()
    plog.append(batch(1, pid=PID, epoch=5, seq=77))
    plog.append(batch(1, pid=PID, epoch=5, seq=78))
    assert plog.log_end_offset == 2


def test_sequence_wraps_at_int_max(open_log):
    plog = open_log()
    top = 2**31 - 1
    plog.append(batch(1, pid=PID, epoch=0, seq=top - 1))
    plog.append(batch(2, pid=PID, epoch=0, seq=top))  # covers top and 0
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.last_sequence == 0
    plog.append(batch(1, pid=PID, epoch=0, seq=1))
    assert plog.log_end_offset == 4


def test_several_batches_of_one_producer_in_one_request(open_log):
    plog = open_log()
    r = plog.append(batch(2, pid=PID, epoch=0, seq=0) + batch(2, pid=PID, epoch=0, seq=2))
    assert (r.base_offset, r.last_offset) == (0, 3)
    with pytest.raises(OutOfOrderSequenceError):  # second one checked against the first
        plog.append(batch(1, pid=PID, epoch=0, seq=4) + batch(1, pid=PID, epoch=0, seq=9))
    assert plog.log_end_offset == 4
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.last_sequence == 3  # the failed request changed nothing


def test_non_idempotent_batches_skip_checks(open_log):
    plog = open_log()
    plog.append(batch(1))
    plog.append(batch(1))
    assert plog.producer_state.entries == {}


def test_snapshot_and_restart_keeps_state(open_log, tmp_path):
    config = LogConfig(segment_bytes=400)
    plog = open_log(config)
    for seq in range(10):
        plog.append(batch(1, pid=PID, epoch=2, seq=seq, value_size=60))
    assert len(plog.segments) > 2
    assert plog.producer_state.snapshot_offsets()  # written at roll
    plog.close()
    assert (tmp_path / "t-0" / ".clean_shutdown").exists()
    assert 10 in ProducerStateManager(tmp_path / "t-0").snapshot_offsets()

    plog = open_log(config)
    assert not (tmp_path / "t-0" / ".clean_shutdown").exists()
    assert plog.log_end_offset == 10
    retry = plog.append(batch(1, pid=PID, epoch=2, seq=9, value_size=60))
    assert retry.duplicate and retry.base_offset == 9
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(batch(1, pid=PID, epoch=2, seq=11, value_size=60))
    with pytest.raises(InvalidProducerEpochError):
        plog.append(batch(1, pid=PID, epoch=1, seq=0, value_size=60))
    assert plog.append(batch(1, pid=PID, epoch=2, seq=10, value_size=60)).base_offset == 10


def test_restart_without_snapshot_replays_the_log(open_log, tmp_path):
    plog = open_log()
    plog.append(batch(3, pid=PID, epoch=0, seq=0))
    plog.append(batch(3, pid=PID + 1, epoch=7, seq=0))
    plog.flush()
    # kill -9: no close(), so no snapshot and no clean-shutdown marker
    plog.delete()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    plog = open_log()
    e1, e2 = plog.producer_state.last_entry(PID), plog.producer_state.last_entry(PID + 1)
    assert e1 is not None and (e1.epoch, e1.last_sequence, e1.last_offset) == (0, 2, 2)
    assert e2 is not None and (e2.epoch, e2.last_sequence, e2.last_offset) == (7, 2, 5)
    assert plog.append(batch(3, pid=PID, epoch=0, seq=0)).duplicate


def test_replay_after_snapshot_combines_both(open_log, tmp_path):
    config = LogConfig(segment_bytes=300)
    plog = open_log(config)
    for seq in range(6):
        plog.append(batch(1, pid=PID, epoch=0, seq=seq, value_size=60))
    snaps = plog.producer_state.snapshot_offsets()
    assert snaps and snaps[-1] < 6
    plog.delete()  # crash: the active segment is replayed on top of the last roll snapshot
    plog = open_log(config)
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.last_sequence == 5 and entry.last_offset == 5
    assert offsets_of(plog.read(5, 1 << 20)) == [5]


def test_corrupt_snapshot_is_ignored(open_log, tmp_path):
    plog = open_log()
    plog.append(batch(2, pid=PID, epoch=0, seq=0))
    plog.close()
    snap = tmp_path / "t-0" / "00000000000000000002.snapshot"
    snap.write_bytes(b"\x00\x01garbage")
    plog = open_log()
    entry = plog.producer_state.last_entry(PID)
    assert entry is not None and entry.last_sequence == 1
    assert not snap.exists()


def test_an_unreadable_snapshot_is_dropped_with_a_warning(open_log, tmp_path, caplog):
    plog = open_log()
    plog.append(batch(3, pid=PID, epoch=0, seq=0))
    plog.close()
    snapshot = tmp_path / "t-0" / "00000000000000000003.snapshot"
    data = bytearray(snapshot.read_bytes())
    data[10] ^= 0xFF  # a flipped byte: the CRC no longer matches
    snapshot.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="exactly.log.producer_state"):
        plog = open_log()
    assert f"event=producer_snapshot_dropped path={snapshot}" in caplog.text
    assert not snapshot.exists()
    entry = plog.producer_state.last_entry(PID)  # rebuilt from the log instead
    assert entry is not None and entry.last_sequence == 2
