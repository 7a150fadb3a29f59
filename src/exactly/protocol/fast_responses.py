"""Hand-written encoders for the answers on every transaction's path: Produce, AddPartitionsToTxn
(v0-3, the client's form) and EndTxn.

kio builds an entity object per answer and walks it field by field in Python; for these small,
frequent answers that was a large part of the broker's time per transaction. These functions
write the same bytes straight from the values (tests/unit/protocol/test_fast_responses.py compares
them with kio's encoding for every version). They return the response body;
`framing.encode_response` adds the header.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence

from exactly.protocol.primitives import (
    I32,
    write_array_length,
    write_nullable_string,
    write_string,
)

_END_TXN = struct.Struct(">ih")  # throttle_time_ms, error_code
_END_TXN_V5 = struct.Struct(">ihqh")  # + producer_id, producer_epoch
_PARTITION_ERROR = struct.Struct(">ih")  # partition index, error code
_PRODUCED = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_NO_UUID = bytes(16)

# Produce: (partition index, error code, base offset, log start offset, error message, record
# errors: (index of the record in its batch, message), log append time (-1: none))
ProducedPartition = tuple[int, int, int, int, str | None, Sequence[tuple[int, str | None]], int]


def end_txn(version: int, error_code: int, producer_id: int = -1,
            producer_epoch: int = -1) -> bytes:
    """EndTxn v0-5 (throttle time 0)."""
    if version >= 5:
        return _END_TXN_V5.pack(0, error_code, producer_id, producer_epoch) + b"\x00"
    body = _END_TXN.pack(0, error_code)
    return body + b"\x00" if version >= 3 else body


def add_partitions_to_txn(version: int,
                          results: Iterable[tuple[str, Sequence[tuple[int, int]]]]) -> bytes:
    """AddPartitionsToTxn v0-3 (throttle time 0): per topic, (partition, error code) pairs."""
    if not 0 <= version <= 3:
        raise ValueError(f"AddPartitionsToTxn v{version} is not encoded here")
    flexible = version >= 3
    topics = list(results)
    out = bytearray(4)  # throttle_time_ms 0
    write_array_length(out, len(topics), flexible)
    for name, partitions in topics:
        write_string(out, name, flexible)
        write_array_length(out, len(partitions), flexible)
        for partition, error in partitions:
            out += _PARTITION_ERROR.pack(partition, error)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    return bytes(out)


def produce(version: int,
            topics: Sequence[tuple[str, uuid.UUID | None, Sequence[ProducedPartition]]]) -> bytes:
    """Produce v3-13 (throttle time 0): per topic, its name (or, v13, its
    id) and its partitions, with their record errors from v8 on."""
    if not 3 <= version <= 13:
        raise ValueError(f"Produce v{version} is not encoded here")
    flexible = version >= 9
    out = bytearray()
    write_array_length(out, len(topics), flexible)
    for name, topic_id, partitions in topics:
        if version >= 13:
            out += _NO_UUID if topic_id is None else topic_id.bytes
        else:
            write_string(out, name, flexible)
        write_array_length(out, len(partitions), flexible)
        for (index, error, base_offset, log_start_offset, message, record_errors,
             log_append_time) in partitions:
            out += _PRODUCED.pack(index, error, base_offset, log_append_time)
            if version >= 5:
                out += struct.pack(">q", log_start_offset)
            if version >= 8:
                write_array_length(out, len(record_errors), flexible)
                for batch_index, why in record_errors:
                    out += I32.pack(batch_index)
                    write_nullable_string(out, why, flexible)
                    if flexible:
                        out.append(0)
                write_nullable_string(out, message, flexible)
            if flexible:
                out.append(0)  # tagged fields: current_leader is left at its default
        if flexible:
            out.append(0)
    out += I32.pack(0)  # throttle_time_ms
    if flexible:
        out.append(0)  # tagged fields: no node_endpoints
    return bytes(out)
