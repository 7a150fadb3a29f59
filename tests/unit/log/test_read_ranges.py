"""What a read returns, against a model of Kafka's rule (KIP-74): whole batches from the one
holding the offset, up to max_bytes, none at or past the bound; the first whole even when larger
with min_one_batch, nothing without. Batches small (not all indexed) and large (each indexed)
are mixed, so reads start both where the offset index points at the batch (read on from the last
fetch, no scan) and where a scan finds it; before and after a restart (bytes not yet checked)."""

from __future__ import annotations

import os

import pytest

from exactly.log import LogConfig, PartitionLog
from exactly.log.errors import OffsetOutOfRangeError
from exactly.protocol.records import iter_batches
from tests.helpers.log.log_helpers import batch

# (records, value size): batches of about 0.1, 1, 5 and 20 KiB; the index has an entry every
# 4 KiB of appends, so the large ones are always indexed and some small ones are not.
SHAPES = [(1, 50), (1, 900), (5, 1000), (1, 20_000), (3, 40), (2, 2500), (1, 60)] * 3
LIMITS = [1, 100, 1100, 5200, 6000, 25_000, 60_000, 1 << 20]


def _expected(stored: list[tuple[int, int, bytes]], offset: int, max_bytes: int, bound: int,
              min_one_batch: bool) -> tuple[bytes, int]:
    """(bytes, offset after them) by the rule, from (base offset, next offset, bytes) of each
    stored batch."""
    out, next_offset = b"", -1
    for base, end, data in stored:
        if end <= offset:
            continue
        if base >= bound:
            break
        if len(out) + len(data) > max_bytes and (out or not min_one_batch):
            break
        out += data
        next_offset = end
    return out, next_offset


def _check(plog: PartitionLog, stored: list[tuple[int, int, bytes]]) -> None:
    end = plog.log_end_offset
    for offset in range(end + 1):
        for max_bytes in LIMITS:
            for bound in (end, end - 3):
                for min_one_batch in (True, False):
                    want = _expected(stored, offset, max_bytes, bound, min_one_batch)
                    records, next_offset = plog.read_records(
                        offset, max_bytes, max_offset=bound, min_one_batch=min_one_batch)
                    got = records if isinstance(records, bytes) else records.read()
                    assert (got, next_offset if got else -1) == want, (
                        offset, max_bytes, bound, min_one_batch)
                    assert plog.read(offset, max_bytes, max_offset=bound,
                                     min_one_batch=min_one_batch) == want[0]


def test_reads_follow_the_rule(tmp_path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    for n, size in SHAPES:
        plog.append(batch(n, value_size=size))
    stored = [(h.base_offset, h.next_offset, bytes(h.raw()))
              for h in iter_batches(plog.read(0, 1 << 30))]
    assert len(stored) == len(SHAPES)
    _check(plog, stored)
    plog.close()
    # After a restart the bytes are trusted but not checked: the first reads check them.
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), recovery_point=plog.log_end_offset)
    try:
        _check(plog, stored)
    finally:
        plog.close()


def test_a_read_with_no_room_left_reads_no_file(tmp_path, monkeypatch) -> None:
    """A Fetch whose answer is already full still reads each later partition, with 0 bytes and
    no first batch (Kafka's readFromLog): its offset is checked, out of range is reported, and
    nothing of its files is read, whether the index points at the offset's batch or not."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    try:
        for n, size in SHAPES:
            plog.append(batch(n, value_size=size))
        preads = []
        real = os.pread
        monkeypatch.setattr(os, "pread", lambda *args: preads.append(args) or real(*args))
        for offset in range(plog.log_end_offset + 1):
            assert plog.read_records(offset, 0, min_one_batch=False) == (b"", -1)
        assert preads == []
        with pytest.raises(OffsetOutOfRangeError):
            plog.read_records(plog.log_end_offset + 1, 0, min_one_batch=False)
        records, _ = plog.read_records(0, 0, min_one_batch=True)  # the answer's first batch
        assert len(records) > 0
    finally:
        plog.close()
