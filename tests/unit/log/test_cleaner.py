"""The log cleaner's rules one by one (issue 13), against real logs on disk: what is cleanable
(never the active segment, never an undecided transaction, min.compaction.lag.ms), when a log is
cleaned (min.cleanable.dirty.ratio, max.compaction.lag.ms, the filthiest first), how long
tombstones and markers stay (delete.retention.ms), a producer's last batch kept empty, a stopped
clean leaving nothing behind, retention waiting for a clean, the checkpoint file, the configs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exactly.log import LogConfig, PartitionLog
from exactly.log.checkpoints import CLEANER_CHECKPOINT, read_checkpoint
from exactly.log.cleaner import CleanAborted, LogCleaner, _Throttle, cleanable_range
from exactly.log.config import CleanerConfig
from exactly.log.topic_config import log_config_for
from exactly.protocol.records import Record, build_batch, decode_records, iter_batches
from exactly.server.config import BrokerConfig
from tests.helpers.log.log_helpers import FakeClock

COMPACT = LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                    delete_retention_ms=60_000)


def put(plog: PartitionLog, clock: FakeClock, key: str, value: str | None, **kw: int) -> int:
    data = build_batch([Record(key.encode(), None if value is None else value.encode())],
                       timestamp=clock.ms, **kw)
    return plog.append(data).base_offset


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        for h in iter_batches(data):
            out += [(r.offset, r.key, r.value) for r in decode_records(h)]
            offset = h.next_offset
    return out


@pytest.fixture
def setup(tmp_path: Path, clock: FakeClock):
    def make(config: LogConfig = COMPACT, name: str = "t-0") -> tuple[PartitionLog, LogCleaner]:
        plog = PartitionLog.open(tmp_path / name, config, clock=clock)
        made.append(plog)
        return plog, LogCleaner(tmp_path, lambda: [p for p in made if not p.closed], CleanerConfig(),
                                clock=clock)
    made: list[PartitionLog] = []
    yield make
    for plog in made:
        if not plog.closed:
            plog.close()


def test_the_active_segment_is_never_cleaned(setup, clock) -> None:
    plog, cleaner = setup()
    for i in range(5):
        put(plog, clock, "k", f"v{i}")
    assert len(plog.segments) == 1
    assert cleaner.clean_once(clock.ms) is None  # all of it is in the active segment
    assert [v for _, _, v in records(plog)] == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_an_open_transaction_holds_the_clean_back(setup, clock) -> None:
    plog, cleaner = setup()
    while len(plog.segments) < 2:
        put(plog, clock, "a", "x" * 50)
    first = plog.append(build_batch([Record(b"b", b"open")], timestamp=clock.ms, producer_id=7,
                                    producer_epoch=0, base_sequence=0, transactional=True))
    while len(plog.segments) < 5:
        put(plog, clock, "a", "more" * 20)
    assert plog.last_stable_offset == first.base_offset
    holding = next(s for s in plog.segments if s.next_offset > first.base_offset)
    assert cleanable_range(plog, None, clock.ms).end == holding.base_offset
    plog.append_marker(7, 0, commit=True, now_ms=clock.ms)
    assert cleanable_range(plog, None, clock.ms).end == plog.segments[-1].base_offset
    assert cleaner.clean_once(clock.ms) is not None


def test_min_compaction_lag_keeps_young_segments(setup, clock) -> None:
    plog, cleaner = setup(dataclasses.replace(COMPACT, min_compaction_lag_ms=10_000))
    while len(plog.segments) < 3:
        put(plog, clock, "k", "v" * 50)
    assert cleaner.clean_once(clock.ms) is None
    clock.advance_ms(10_001)
    put(plog, clock, "k", "v" * 300)  # a new segment, young: the end of what is cleanable
    assert cleaner.clean_once(clock.ms) is not None


def test_dirty_ratio_and_max_compaction_lag(setup, clock) -> None:
    lazy = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.99,
                               max_compaction_lag_ms=60_000)
    plog, cleaner = setup(lazy)
    while len(plog.segments) < 3:
        put(plog, clock, "k", "v" * 50)
    assert cleaner.clean_once(clock.ms) is not None  # all dirty: ratio 1.0
    put(plog, clock, "k", "v" * 300)
    put(plog, clock, "k", "w" * 300)
    assert cleaner.clean_once(clock.ms) is None  # a little dirty, below 0.99
    assert 0 < cleaner.metrics.dirty_ratios[("t", 0)] < 0.99
    clock.advance_ms(60_001)  # the dirty record is overdue
    assert cleaner.clean_once(clock.ms) is not None


def test_the_filthiest_log_goes_first(setup, clock) -> None:
    a, cleaner = setup(name="a-0")
    b, _ = setup(name="b-0")
    for i in range(40):
        put(a, clock, "same", f"{i:040d}")  # one key: nearly all of it goes
        put(b, clock, f"k{i}", f"{i:040d}")  # distinct keys: nothing goes
    b_task = cleaner.grab_filthiest(clock.ms)
    assert b_task is not None
    cleaner.done(b_task, None)
    assert cleaner.clean_once(clock.ms) is not None
    first = cleaner.checkpoints
    assert set(first) == {(b_task.plog.topic, 0)}
    assert cleaner.clean_once(clock.ms) is not None
    assert len(cleaner.checkpoints) == 2
    assert len(records(a)) < 10 and len(records(b)) == 40


def test_tombstones_and_markers_stay_for_delete_retention_ms(setup, clock) -> None:
    plog, cleaner = setup()
    put(plog, clock, "gone", "1")
    put(plog, clock, "gone", None)
    plog.append(build_batch([Record(b"t", b"aborted")], timestamp=clock.ms, producer_id=5,
                            producer_epoch=0, base_sequence=0, transactional=True))
    plog.append_marker(5, 0, commit=False, now_ms=clock.ms)
    put(plog, clock, "t", "later", producer_id=6, producer_epoch=0, base_sequence=0)
    put(plog, clock, "x", "x" * 300)  # rolls: all of the above becomes cleanable
    assert cleaner.clean_once(clock.ms) is not None
    kept = records(plog)
    assert (1, b"gone", None) in kept and b"aborted" not in [v for _, _, v in kept]
    assert any(h.is_control for h in _batches(plog))  # the marker stays for now
    clock.advance_ms(60_001)
    put(plog, clock, "y", "y" * 300)
    assert cleaner.clean_once(clock.ms) is not None
    kept = records(plog)
    assert b"gone" not in [k for _, k, _ in kept]  # the tombstone went after 60 s
    # Producer 5's last batch stays, emptied: its epoch and sequence survive in the log. While
    # it stays, so does the marker of its transaction (a producer state rebuilt from the log
    # would take the transaction for an open one without it).
    empty = [h for h in _batches(plog) if h.producer_id == 5]
    assert [(h.records_count, h.base_offset, h.last_sequence, h.is_control) for h in empty] == [
        (0, 2, 0, False), (1, 3, -1, True)]
    plog.append(build_batch([Record(b"t", b"second")], timestamp=clock.ms, producer_id=5,
                            producer_epoch=0, base_sequence=1, transactional=True))
    plog.append_marker(5, 0, commit=True, now_ms=clock.ms)
    put(plog, clock, "z", "z" * 300)
    clock.advance_ms(60_001)
    put(plog, clock, "z", "z" * 300)
    assert cleaner.clean_once(clock.ms) is not None
    left = [(h.base_offset, h.records_count, h.is_control) for h in _batches(plog)
            if h.producer_id == 5]
    assert left[0][0] > 3 and (2, 0, False) not in left and (3, 1, True) not in left


def _batches(plog: PartitionLog):
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20)
        if not data:
            return
        for h in iter_batches(data):
            yield h
            offset = h.next_offset


def test_a_stopped_clean_leaves_the_log_as_it_was(setup, clock, tmp_path) -> None:
    plog, cleaner = setup()
    for i in range(30):
        put(plog, clock, "k", f"{i:030d}")
    before = records(plog)
    task = cleaner.grab_filthiest(clock.ms)
    assert task is not None and plog.cleaning
    assert plog.apply_retention(clock.ms + 10**12) == 0  # retention waits for the clean
    task.stop.set()
    with pytest.raises(CleanAborted):
        cleaner.run(task, plog.replace_segments)
    cleaner.done(task, None)
    assert not plog.cleaning
    assert records(plog) == before
    assert not [p for p in (tmp_path / "t-0").iterdir() if ".cleaned" in p.name]
    assert not (tmp_path / CLEANER_CHECKPOINT).exists()


def test_checkpoint_file_forgets_deleted_partitions(setup, clock, tmp_path) -> None:
    plog, cleaner = setup()
    other, _ = setup(name="other-0")
    for p in (plog, other):
        for i in range(30):
            put(p, clock, "k", f"{i:030d}")
    cleaner.clean_once(clock.ms)
    cleaner.clean_once(clock.ms)
    assert set(read_checkpoint(tmp_path / CLEANER_CHECKPOINT)) == {("t", 0), ("other", 0)}
    text = (tmp_path / CLEANER_CHECKPOINT).read_text().splitlines()
    assert text[:2] == ["0", "2"] and "t 0 " in "\n".join(text)
    other.delete()
    put(plog, clock, "k", "x" * 300)
    cleaner.clean_once(clock.ms)
    assert set(read_checkpoint(tmp_path / CLEANER_CHECKPOINT)) == {("t", 0)}
    assert set(LogCleaner(tmp_path, lambda: [plog], CleanerConfig()).checkpoints) == {("t", 0)}


def test_cleaner_configs() -> None:
    c = BrokerConfig.from_sources(None, {"log.cleaner.enable": "false",
                                         "log.cleaner.backoff.ms": "250",
                                         "log.cleaner.io.max.bytes.per.second": "1048576",
                                         "log.cleaner.min.cleanable.ratio": "0.25",
                                         "log.cleaner.delete.retention.ms": "5"})
    assert c.cleaner_config() == CleanerConfig(enable=False, backoff_ms=250,
                                               io_max_bytes_per_second=1048576.0)
    assert c.log_config().min_cleanable_dirty_ratio == 0.25
    assert c.log_config().delete_retention_ms == 5
    topic = log_config_for(c.log_config(), {"min.cleanable.dirty.ratio": "0.75",
                                            "delete.retention.ms": "9", "min.compaction.lag.ms": "3",
                                            "max.compaction.lag.ms": "99"})
    assert (topic.min_cleanable_dirty_ratio, topic.delete_retention_ms, topic.min_compaction_lag_ms,
            topic.max_compaction_lag_ms) == (0.75, 9, 3, 99)
    with pytest.raises(Exception, match="log.cleaner.min.cleanable.ratio"):
        BrokerConfig.from_sources(None, {"log.cleaner.min.cleanable.ratio": "1.5"})


def test_the_throttle_keeps_to_its_rate() -> None:
    """log.cleaner.io.max.bytes.per.second: the cleaner sleeps as long as it ran ahead."""
    now = [0.0]
    slept: list[float] = []
    throttle = _Throttle(1000.0, clock=lambda: now[0], sleep=slept.append)
    throttle.account(500)  # 500 bytes at once: half a second ahead
    assert slept == [0.5]
    now[0] = 0.6
    throttle.account(50)  # 550 bytes in 0.6 s: below the rate
    assert slept == [0.5]
    throttle.account(1000)  # 1550 bytes in 0.6 s
    assert slept == [0.5, pytest.approx(0.95)]
