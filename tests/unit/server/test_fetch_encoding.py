"""The hand-written Fetch response writer (exactly.server.fetch_encoding, the zero-copy path's)
writes byte for byte what kio writes, at every version the broker serves, and the zero-copy
frame built with it is the copying path's frame; a response with a tagged field set goes
through kio's writer instead. (Over TCP, with records from segment files, the two paths are
compared in test_zero_copy_fetch.py.)"""

import datetime
import io
import os
import uuid
from pathlib import Path

import pytest

from exactly.log import LogConfig, PartitionLog
from exactly.log.segment import FileRecords
from exactly.protocol.apis import SUPPORTED, ApiKey, build, response_class, response_module
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import decode_response, encode_response, encode_response_body
from exactly.protocol.records import Record, build_batch
from exactly.server.fetch_encoding import fast_path, write_fetch_response
from exactly.server.network import COPY_BELOW, FileFrame, encode_file_frame

VERSIONS = range(SUPPORTED[ApiKey.FETCH][0], SUPPORTED[ApiKey.FETCH][1] + 1)
BATCH = build_batch([Record(b"k", b"v" * 300)], base_offset=41, timestamp=1_700_000_000_000)
TOPIC_ID = uuid.UUID("0b6f1d52-3b1c-4f5e-9a57-1c2d3e4f5a6b")


def _nested(version: int, entity: str, /, **fields):
    return build(getattr(response_module(ApiKey.FETCH, version), entity), **fields)


def _response(version: int, topics: list[tuple[str, list[dict]]], *, error=ErrorCode.none,
              session_id: int = 0, throttle_ms: int = 0, **extra):
    return build(response_class(ApiKey.FETCH, version),
                 throttle_time=datetime.timedelta(milliseconds=throttle_ms), error_code=error,
                 session_id=session_id, **extra, responses=tuple(
                     _nested(version, "FetchableTopicResponse", topic=name, topic_id=TOPIC_ID,
                             partitions=tuple(_nested(version, "PartitionData", **p)
                                              for p in parts))
                     for name, parts in topics))


def _partition(version: int, index: int, *, records, aborted=(), error=ErrorCode.none) -> dict:
    return {"partition_index": index, "error_code": error, "high_watermark": 2**40 + index,
            "last_stable_offset": 77, "log_start_offset": 3, "preferred_read_replica": -1,
            "records": records,
            "aborted_transactions": None if aborted is None else tuple(
                _nested(version, "AbortedTransaction", producer_id=pid, first_offset=first)
                for pid, first in aborted)}


CASES = {
    "empty": lambda v: _response(v, []),
    "session error": lambda v: _response(v, [], error=ErrorCode.fetch_session_id_not_found,
                                         session_id=9, throttle_ms=250),
    "records and aborted": lambda v: _response(v, [
        ("orders", [_partition(v, 0, records=BATCH, aborted=[(4711, 41), (2**62, 0)]),
                    _partition(v, 1, records=b""),
                    _partition(v, 2, records=None, aborted=None,
                               error=ErrorCode.offset_out_of_range)]),
        ("é" * 70, [_partition(v, p, records=BATCH * 2, aborted=None) for p in range(70)])]),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_bytes_as_kio(version: int, case: str) -> None:
    response = CASES[case](version)
    assert fast_path(response)
    out = io.BytesIO()
    write_fetch_response(out, version, response)
    assert out.getvalue() == encode_response_body(response)
    frame = encode_file_frame(version, 12345, response)
    assert frame == encode_response(ApiKey.FETCH, version, 12345, response)
    assert decode_response(ApiKey.FETCH, version, frame[4:]) == (12345, response)


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 12])
def test_tagged_fields_go_through_kio(version: int) -> None:
    """A partition with a tagged field set (the broker sets none today) is written by kio."""
    part = _partition(version, 0, records=BATCH)
    part["current_leader"] = _nested(version, "LeaderIdAndEpoch", leader_id=1, leader_epoch=5)
    response = _response(version, [("orders", [part, _partition(version, 1, records=b"")])])
    assert not fast_path(response)
    frame = encode_file_frame(version, 7, response)
    assert frame == encode_response(ApiKey.FETCH, version, 7, response)
    _, decoded = decode_response(ApiKey.FETCH, version, frame[4:])
    assert decoded.responses[0].partitions[0].current_leader.leader_epoch == 5


def test_small_ranges_are_copied_large_ones_sent_from_their_file(tmp_path: Path) -> None:
    """A range under COPY_BELOW goes into the answer's bytes (one pread instead of a dup,
    sendfile and close); a larger one stays a file range. Both give kio's bytes."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    small = build_batch([Record(None, b"s" * 100)], base_offset=0, timestamp=1)
    large = build_batch([Record(None, os.urandom(COPY_BELOW))], base_offset=0, timestamp=1)
    plog.append(small)
    plog.append(large)
    try:
        # A read cut at one batch gets that batch whole, or nothing without min_one_batch.
        assert plog.read_records(0, 1, min_one_batch=False) == (b"", -1)
        small_records, next_offset = plog.read_records(0, 1)
        assert isinstance(small_records, FileRecords) and next_offset == 1
        assert small_records.read() == small
        large_records, next_offset = plog.read_records(1, 1 << 20)
        assert isinstance(large_records, FileRecords) and next_offset == 2

        def answer(*records):
            parts = [_partition(12, p, records=r) for p, r in enumerate(records)]
            return _response(12, [("t", parts)])

        frame = encode_file_frame(12, 3, answer(small_records))
        assert frame == encode_response(ApiKey.FETCH, 12, 3, answer(small))
        frame = encode_file_frame(12, 3, answer(small_records, large_records))
        assert isinstance(frame, FileFrame)
        try:
            assert [type(part) for part in frame.parts] == [bytearray, tuple, bytearray]
            assert frame.materialize() == encode_response(  # as stored: at offset 1
                ApiKey.FETCH, 12, 3, answer(small, large_records.read()))
        finally:
            frame.close()
    finally:
        plog.close()
