"""kill -9 of the broker at each fault point of the log cleaner (issue 13), then a restart: every
committed record that must survive is there with its offset, nothing is duplicated, nothing of an
aborted transaction shows, the segments' indexes agree with the segments, and the cleaner goes on.

The history is written with the cleaner off; the broker is then restarted with the cleaner on and
one fault point armed, and dies inside its first clean."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from confluent_kafka import Producer

from exactly import failpoints
from exactly.log import LogConfig, PartitionLog
from exactly.log.checkpoints import CLEANER_CHECKPOINT, read_checkpoint
from exactly.protocol.records import iter_batches
from exactly.testing import EmbeddedBroker
from tests.integration.server.test_compaction import read_all, wait_cleaned
from tests.support import create_topic

TOPIC = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
         "delete.retention.ms": "0"}
# What the crash must have interrupted: files the fault point leaves behind.
LEFT_BEHIND = {
    "log.cleaner.after_cleaned": ".cleaned",
    "log.cleaner.after_swap": ".swap",
    "log.cleaner.after_delete": ".swap",
    "log.cleaner.after_checkpoint": None,
}


def write_history(bootstrap: str) -> None:
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for round_ in range(12):
        for k in range(8):
            value = None if (k + round_) % 7 == 0 else f"v{round_}-{k}".encode() * 5
            plain.produce("crashy", value, key=f"k{k}".encode())
        plain.flush(10)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crashy-t"})
    txn.init_transactions(10)
    for commit in (True, False, True, False):
        txn.begin_transaction()
        for k in range(3):
            txn.produce("crashy", f"{'c' if commit else 'aborted'}-{k}".encode(),
                        key=f"k{k}".encode())
        txn.commit_transaction(10) if commit else txn.abort_transaction(10)
    idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for r in range(10):
        idem.produce("crashy", f"i{r}".encode() * 20, key=b"idem")
        idem.flush(10)


def check_indexes(directory: Path) -> None:
    """Open the partition as the broker does and check each segment's indexes against its
    batches: every offset index entry points at a batch starting there with that base offset,
    time index entries stay inside the segment, segments do not overlap."""
    plog = PartitionLog.open(directory, LogConfig(segment_bytes=1024, cleanup_policy="compact"))
    try:
        previous_end = -1
        for seg in plog.segments:
            assert seg.base_offset >= previous_end, "segments overlap"
            starts = {}
            data = seg.read(0, seg.size)
            for h in iter_batches(data):
                h.validate(dense=False)
                starts[h.position] = h.base_offset
            for offset, position in zip(seg.index.keys, seg.index.values, strict=True):
                assert starts.get(position) == offset, (seg.base_offset, offset, position)
            for offset in seg.time_index.values:
                assert seg.base_offset <= offset < max(seg.next_offset, seg.base_offset + 1)
            previous_end = seg.next_offset
    finally:
        plog.close()


@pytest.mark.parametrize("point", sorted(LEFT_BEHIND))
def test_kill9_at_cleaner_fault_point(point: str) -> None:
    quiet = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    settings = {"log.cleaner.enable": "false", "log.cleaner.backoff.ms": "100"}
    with EmbeddedBroker(settings=settings, env=quiet) as broker:
        create_topic(broker.bootstrap, "crashy", config=TOPIC)
        write_history(broker.bootstrap)
        written = {offset: (k, v) for offset, k, v in read_all(broker.bootstrap, "crashy",
                                                                "read_uncommitted")}
        committed = read_all(broker.bootstrap, "crashy")
        expected = {k: v for _, k, v in committed}
        broker.stop()

        broker.settings["log.cleaner.enable"] = "true"
        broker.env = {**quiet, failpoints.ENV: f"{point}=crash"}
        broker.start()
        assert broker.process is not None
        assert broker.process.wait(timeout=60) == -signal.SIGKILL, "no crash at the fault point"
        partition = Path(broker.data_dir) / "crashy-0"
        suffix = LEFT_BEHIND[point]
        if suffix is not None:
            assert any(p.name.endswith(suffix) for p in partition.iterdir()), \
                f"no {suffix} file: the crash did not interrupt a clean"
        else:
            assert read_checkpoint(Path(broker.data_dir) / CLEANER_CHECKPOINT).get(("crashy", 0))

        broker.settings["log.cleaner.enable"] = "false"  # look at what the crash left
        broker.env = quiet
        broker.start()
        records = read_all(broker.bootstrap, "crashy")
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets)), "a record twice, or out of order"
        for offset, key, value in records:
            assert written[offset] == (key, value), f"offset {offset} changed"
        seen = {k: v for _, k, v in records}
        assert {k: v for k, v in seen.items() if v is not None} == \
            {k: v for k, v in expected.items() if v is not None}
        uncommitted = read_all(broker.bootstrap, "crashy", "read_uncommitted")
        cleaned_to = read_checkpoint(Path(broker.data_dir) / CLEANER_CHECKPOINT).get(("crashy", 0), 0)
        assert not [o for o, _, v in uncommitted if o < cleaned_to and v and v.startswith(b"aborted")]
        assert not list(partition.glob("*.swap")) and not list(partition.glob("*.cleaned"))
        broker.stop()
        check_indexes(partition)

        broker.settings["log.cleaner.enable"] = "true"  # and the cleaner goes on from there
        broker.start()
        end = max(written) + 1
        wait_cleaned(broker, "crashy", max(cleaned_to, 1))
        final = read_all(broker.bootstrap, "crashy")
        assert {k: v for _, k, v in final if v is not None} == \
            {k: v for k, v in expected.items() if v is not None}
        assert all(offset < end for offset, _, _ in final)
