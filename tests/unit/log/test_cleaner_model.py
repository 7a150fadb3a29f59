"""Model-based test of the log cleaner against the real log code (issue 13).

Each case is a random history, generated from its seed: keyed writes and tombstones from plain,
idempotent and transactional producers (transactions committed and aborted, interleaved), rolls,
time passing, cleans at random moments, and closes and reopens of the log (the cleaner's
checkpoint file read again; sometimes the producer-state snapshots are lost). A model keeps what
was written at each offset and which transactions committed. After every clean, and at the end,
the log must agree with the model:

- a read_committed read (the consumer's algorithm over the aborted-transaction list) gives, per
  key, the model's newest committed value (a key whose newest record is a tombstone may be absent);
- every record still in the log is the one written at its offset (offsets never change);
- no record of an aborted transaction is left in the cleaned part, even for read_uncommitted;
- the cleaned part holds each key at most once, no record without a key, and each producer's last
  batch is still there;
- the last stable offset is the first offset of the oldest open transaction (or the end);
- idempotent producers keep producing with their next sequence numbers, also after a reopen,
  also when the producer-state snapshots were lost and the state was rebuilt from the log.

At the end of each case every transaction is ended, the log rolled, the clock moved past
`delete.retention.ms` and the log cleaned until nothing is left to clean: then no tombstone is
left in the cleaned part, every marker left there still has a batch of its transaction, and an
empty batch is there only as a producer's last.
A failure names its seed. The cases run in a RAM file system when there is one: they test what
the log and the cleaner decide, and fsync would take 90% of their time
(tests/integration/server/test_cleaner_crash.py kills the broker with its data on disk).
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exactly.log import LogConfig, PartitionLog
from exactly.log.cleaner import LogCleaner
from exactly.log.config import CleanerConfig
from exactly.log.markers import parse_marker
from exactly.protocol.records import (
    Record,
    RecordBatchHeader,
    build_batch,
    decode_records,
    iter_batches,
)
from tests.helpers.log.log_helpers import FakeClock

CASES = 4000
CHUNK = 100  # cases per test item
KEYS = [f"k{i}".encode() for i in range(6)]
IDEMPOTENT = (1, 2)
TRANSACTIONAL = (10, 11, 12)


@dataclass
class Producer:
    pid: int
    epoch: int = 0
    seq: int = 0
    txn: list[int] = field(default_factory=list)  # offsets written in the open transaction


@dataclass
class Model:
    written: dict[int, tuple[bytes | None, bytes | None]] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)  # offsets of visible (committed) records
    aborted: set[int] = field(default_factory=set)

    def newest(self, below: int) -> dict[bytes, bytes | None]:
        """Newest committed value per key below `below` (the last stable offset)."""
        out: dict[bytes, bytes | None] = {}
        for offset in sorted(o for o in self.committed if o < below):
            key, value = self.written[offset]
            assert key is not None
            out[key] = value
        return out


def batches(plog: PartitionLog, end: int | None = None) -> Iterator[RecordBatchHeader]:
    offset = plog.log_start_offset
    limit = plog.log_end_offset if end is None else end
    while offset < limit:
        data = plog.read(offset, 1 << 20, max_offset=limit)
        if not data:
            return
        for h in iter_batches(data):
            h.validate(dense=False)
            yield h
            offset = h.next_offset


def read_committed(plog: PartitionLog) -> dict[bytes, bytes | None]:
    """What a read_committed consumer sees, newest value per key, as Kafka's consumers filter."""
    lso = plog.last_stable_offset
    aborted = sorted(plog.aborted_transactions(plog.log_start_offset, lso), key=lambda t: t[1])
    aborting: set[int] = set()
    out: dict[bytes, bytes | None] = {}
    for h in batches(plog, lso):
        while aborted and aborted[0][1] <= h.last_offset:
            aborting.add(aborted.pop(0)[0])
        if h.is_control:
            marker = parse_marker(h)
            if marker is not None and not marker.commit:
                aborting.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborting:
            continue
        for rec in decode_records(h):
            assert rec.key is not None
            out[rec.key] = rec.value
    return out


class Case:
    def __init__(self, seed: int, root: Path) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.root = root
        self.clock = FakeClock()
        rng = self.rng
        self.config = LogConfig(
            segment_bytes=rng.choice([300, 600, 1500]),
            cleanup_policy=rng.choice(["compact", "compact,delete"]),
            retention_ms=-1,
            min_cleanable_dirty_ratio=rng.choice([0.0, 0.3, 0.5, 0.9]),
            min_compaction_lag_ms=rng.choice([0, 0, 5_000]),
            delete_retention_ms=rng.choice([0, 10_000, 10**9]),
            index_interval_bytes=rng.choice([0, 100, 4096]),
        )
        self.plog = PartitionLog.open(root / "t-0", self.config, clock=self.clock)
        self.cleaner = self._cleaner()
        self.model = Model()
        self.producers = {pid: Producer(pid) for pid in IDEMPOTENT + TRANSACTIONAL}
        self.cleans = 0

    def _cleaner(self) -> LogCleaner:
        return LogCleaner(self.root, lambda: [self.plog], CleanerConfig())

    def records(self) -> list[Record]:
        out = []
        for _ in range(self.rng.randint(1, 3)):
            key = self.rng.choice(KEYS)
            value = None if self.rng.random() < 0.2 else f"{self.seed}-{len(self.model.written)}".encode()
            out.append(Record(key, value))
        return out

    def write(self, pid: int | None, transactional: bool = False) -> None:
        recs = self.records()
        producer = self.producers[pid] if pid is not None else None
        data = build_batch(recs, timestamp=self.clock.ms, producer_id=pid if pid is not None else -1,
                           producer_epoch=producer.epoch if producer else -1,
                           base_sequence=producer.seq if producer else -1, transactional=transactional)
        result = self.plog.append(data)
        assert not result.duplicate
        if producer:
            producer.seq += len(recs)
        for i, rec in enumerate(recs):
            offset = result.base_offset + i
            self.model.written[offset] = (rec.key, rec.value)
            if transactional:
                assert producer is not None
                producer.txn.append(offset)
            else:
                self.model.committed.add(offset)

    def end_txn(self, pid: int, commit: bool) -> None:
        producer = self.producers[pid]
        self.plog.append_marker(pid, producer.epoch, commit=commit, now_ms=self.clock.ms)
        (self.model.committed if commit else self.model.aborted).update(producer.txn)
        producer.txn = []

    def clean(self) -> None:
        stats = self.cleaner.clean_once(self.clock.ms)
        if stats is not None:
            self.cleans += 1
            self.check()

    def reopen(self) -> None:
        self.plog.close()
        if self.rng.random() < 0.5:  # snapshots lost: the producer state is rebuilt from the log
            for snapshot in (self.root / "t-0").glob("*.snapshot"):
                snapshot.unlink()
        self.plog = PartitionLog.open(self.root / "t-0", self.config, clock=self.clock)
        self.cleaner = self._cleaner()

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.25:
            self.write(None)
        elif roll < 0.40:
            self.write(rng.choice(IDEMPOTENT))
        elif roll < 0.65:
            self.write(rng.choice(TRANSACTIONAL), transactional=True)
        elif roll < 0.77:
            open_txns = [p for p in TRANSACTIONAL if self.producers[p].txn]
            if open_txns:
                self.end_txn(rng.choice(open_txns), commit=rng.random() < 0.6)
        elif roll < 0.82:
            self.plog.roll(self.clock.ms)
        elif roll < 0.88:
            self.clock.advance_ms(rng.choice([100, 3_000, 20_000]))
        elif roll < 0.97:
            self.clean()
        else:
            self.reopen()

    def check(self) -> None:
        plog, model = self.plog, self.model
        open_firsts = [p.txn[0] for p in self.producers.values() if p.txn]
        assert plog.last_stable_offset == min(open_firsts, default=plog.high_watermark)
        newest = model.newest(below=plog.last_stable_offset)
        seen = read_committed(plog)
        for key in set(newest) | set(seen):
            if newest.get(key) is None:  # never written, or deleted: a tombstone may remain
                assert seen.get(key) is None, (key, seen.get(key))
            else:
                assert seen.get(key) == newest[key], (key, seen.get(key), newest[key])
        cleaned_to = self.cleaner.checkpoints.get((plog.topic, plog.partition), plog.log_start_offset)
        keys_in_clean_part: set[bytes] = set()
        last_offsets = {h.last_offset for h in batches(plog) if h.producer_id >= 0}
        for entry in plog.producers():
            if entry.last_offset >= 0:
                assert entry.last_offset in last_offsets, f"producer {entry.producer_id}'s last batch"
        for h in batches(plog):
            if h.is_control:
                continue
            for rec in decode_records(h):
                assert model.written[rec.offset] == (rec.key, rec.value), rec.offset
                if rec.offset < cleaned_to:
                    assert rec.offset not in model.aborted, f"aborted record {rec.offset} kept"
                    assert rec.key is not None
                    assert rec.key not in keys_in_clean_part, f"{rec.key!r} twice in the clean part"
                    keys_in_clean_part.add(rec.key)

    def finish(self) -> None:
        for pid in TRANSACTIONAL:
            if self.producers[pid].txn:
                self.end_txn(pid, commit=self.rng.random() < 0.6)
        self.write(None)  # a dirty segment to clean, whatever was cleaned before
        self.plog.roll(self.clock.ms)
        self.clock.advance_ms(self.config.delete_retention_ms + self.config.min_compaction_lag_ms + 1000)
        self.write(None)  # the new active segment; everything before it is cleanable
        # As an operator would: min.cleanable.dirty.ratio=0 makes any dirty byte worth a clean.
        self.config = dataclasses.replace(self.config, min_cleanable_dirty_ratio=0.0)
        self.plog.update_config(self.config)
        for _ in range(3):
            if self.cleaner.clean_once(self.clock.ms) is None:
                break
            self.check()
        self.check()
        self.reopen()
        self.check()
        cleaned_to = self.cleaner.checkpoints.get((self.plog.topic, self.plog.partition), 0)
        assert cleaned_to == self.plog.segments[-1].base_offset
        has_batch: dict[int, bool] = {}
        last = {e.producer_id: e.last_offset for e in self.plog.producers()}
        for h in batches(self.plog, cleaned_to):
            if h.records_count == 0:  # only a producer's last batch is kept empty
                assert last.get(h.producer_id) == h.last_offset, f"empty batch at {h.base_offset}"
            if h.is_control:
                assert has_batch.pop(h.producer_id, False), f"marker at {h.base_offset} kept alone"
                continue
            if h.producer_id >= 0:
                has_batch[h.producer_id] = True
            for rec in decode_records(h):
                assert rec.value is not None, f"tombstone at {rec.offset} outlived delete.retention.ms"
        for pid in IDEMPOTENT:  # idempotent producers go on where they were
            self.write(pid)
        self.plog.close()


def _run(seed: int, root: Path) -> None:
    case = Case(seed, root)
    try:
        for _ in range(case.rng.randint(10, 60)):
            case.step()
        case.finish()
    except AssertionError as exc:
        raise AssertionError(f"seed_{seed}: {exc}") from exc
    finally:
        if not case.plog.closed:
            case.plog.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="exactly-cleaner-model-", dir=shm))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("chunk", range(CASES // CHUNK), ids=lambda c: f"seeds_{c * CHUNK}")
def test_cleaned_log_agrees_with_the_model(chunk: int, workdir: Path) -> None:
    cleaned = 0
    for seed in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        root = workdir / f"seed_{seed}"
        root.mkdir()
        _run(seed, root)
        cleaned += (root / "cleaner-offset-checkpoint").exists()
        shutil.rmtree(root)
    assert cleaned == CHUNK  # every case cleaned at least at its end
