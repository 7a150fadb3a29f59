"""Batch decoding without a broker: the uniform-batch path and the general loop give the same
records as the protocol layer's reference decoder, for every shape of batch."""

from __future__ import annotations

import os
import random

import pytest

from exactly.client.fetcher import _decode_loop, decode_batch
from exactly.protocol.records import (
    HEADER_SIZE,
    Record,
    RecordBatchError,
    RecordBatchHeader,
    build_batch,
    decode_records,
)

BASE_TS = 1_700_000_000_000


def _batches() -> dict[str, bytes]:
    rnd = random.Random(7)
    spread = [BASE_TS + rnd.randrange(0, 100_000) for _ in range(3000)]
    return {
        "uniform-null-key": build_batch([Record(None, os.urandom(100), timestamp=t)
                                         for t in spread[:3000]], timestamp=BASE_TS,
                                        base_offset=1000),
        "uniform-key": build_batch([Record(b"k%04d" % i, b"v" * 20, timestamp=spread[i])
                                    for i in range(200)], timestamp=BASE_TS),
        "uniform-null-value": build_batch([Record(b"key", None) for _ in range(50)],
                                          timestamp=BASE_TS),
        "empty-values": build_batch([Record(b"", b"") for _ in range(50)], timestamp=BASE_TS),
        "variable": build_batch([Record(None, b"x" * rnd.randrange(0, 300)) for _ in range(500)],
                                timestamp=BASE_TS),
        "headers": build_batch([Record(b"k", b"v", headers=(("h", b"1"), ("n", None)))
                                for _ in range(40)], timestamp=BASE_TS),
        "some-headers": build_batch([Record(b"k", b"v", headers=(("h", b"1"),) if i == 30 else ())
                                     for i in range(40)], timestamp=BASE_TS),
        "small": build_batch([Record(b"k", b"v") for _ in range(3)], timestamp=BASE_TS),
        "negative-ts": build_batch([Record(None, b"v" * 10, timestamp=BASE_TS - i * 7)
                                    for i in range(100)], timestamp=BASE_TS),
    }


def _compacted() -> bytes:
    """A batch whose offset deltas have gaps, as compaction leaves them."""
    data = bytearray()
    from exactly.protocol.records import _encode_record

    for i, delta in enumerate(range(0, 80, 2)):
        _encode_record(data, delta, i, Record(None, b"v" * 10))
    return bytes(data)


@pytest.mark.parametrize("name", list(_batches()))
def test_paths_agree_with_the_reference_decoder(name):
    batch = _batches()[name]
    h = RecordBatchHeader(batch)
    body = batch[HEADER_SIZE:]
    expected = [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in decode_records(h)]
    for decode in (decode_batch, _decode_loop):
        got = decode(body, h.records_count, h.base_offset, h.base_timestamp, -1, "t", 3, 0)
        assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == expected
        assert {(r.topic, r.partition, r.timestamp_type) for r in got} == {("t", 3, 0)}
        # a position inside the batch, and LogAppendTime
        start = h.base_offset + h.records_count // 2
        tail = decode(body, h.records_count, h.base_offset, h.base_timestamp, 42, "t", 3, start)
        assert [r.offset for r in tail] == [e[0] for e in expected if e[0] >= start]
        assert {(r.timestamp, r.timestamp_type) for r in tail} == {(42, 1)}


def test_gaps_in_offsets_take_the_loop():
    body = _compacted()
    got = decode_batch(body, 40, 500, BASE_TS, -1, "t", 0, 0)
    assert [r.offset for r in got] == list(range(500, 580, 2))
    assert [r.timestamp for r in got] == [BASE_TS + i for i in range(40)]


@pytest.mark.parametrize("cut", [1, 50, 101])
def test_truncated_or_padded_data_is_refused(cut):
    batch = _batches()["uniform-null-key"]
    h = RecordBatchHeader(batch)
    body = batch[HEADER_SIZE:]
    for data in (body[:-cut], body + b"\x00" * cut):
        with pytest.raises(RecordBatchError):
            decode_batch(data, h.records_count, h.base_offset, h.base_timestamp, -1, "t", 0, 0)
