"""Hand-written encoders for the client's requests on every transaction's path: Produce (v3-12),
AddPartitionsToTxn (v0-3, the client's form) and EndTxn (v0-5).

kio walks a request entity field by field in Python, and a 1-record transaction sends three of
these: their encoding was 20-50 us of the client's CPU per transaction (issue 19). These write
the same bytes straight from the values (tests/unit/protocol/test_fast_requests.py compares them
with kio's encoding for every version), as `fast_responses` does for the broker's answers. Each
returns an `Encoded` request body; the connection adds the header (`framing.request_header`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from exactly.protocol.apis import ApiKey
from exactly.protocol.primitives import (
    I32,
    write_array_length,
    write_nullable_string,
    write_string,
    write_uvarint,
)

_PRODUCE_HEAD = struct.Struct(">hi")  # acks, timeout_ms
_PRODUCER = struct.Struct(">qh")  # producer_id, producer_epoch
_END = struct.Struct(">qh?")  # producer_id, producer_epoch, committed


class Encoded(NamedTuple):
    """A request body written by hand; `parts` joined in order make it (a Produce's records are
    a part of their own, not copied into the rest). `BrokerConnection.write` sends it."""
    api_key: int
    version: int
    flexible: bool
    parts: list[bytes | bytearray | memoryview]


def produce(version: int, transactional_id: str | None, acks: int, timeout_ms: int,
            topics: Sequence[tuple[str, Sequence[tuple[int, bytes | memoryview]]]]) -> Encoded:
    """Produce v3-12: per topic, its name and its partitions' (index, records)."""
    if not 3 <= version <= 12:
        raise ValueError(f"Produce v{version} is not encoded here")
    flexible = version >= 9
    parts: list[bytes | bytearray | memoryview] = []
    out = bytearray()
    write_nullable_string(out, transactional_id, flexible)
    out += _PRODUCE_HEAD.pack(acks, timeout_ms)
    write_array_length(out, len(topics), flexible)
    for name, partitions in topics:
        write_string(out, name, flexible)
        write_array_length(out, len(partitions), flexible)
        for index, records in partitions:
            out += I32.pack(index)
            if flexible:
                write_uvarint(out, len(records) + 1)
            else:
                out += I32.pack(len(records))
            parts.append(out)
            parts.append(records)
            out = bytearray(b"\x00") if flexible else bytearray()  # the partition's tags
        if flexible:
            out.append(0)  # the topic's tags
    if flexible:
        out.append(0)
    parts.append(out)
    return Encoded(ApiKey.PRODUCE, version, flexible, parts)


def add_partitions_to_txn(version: int, transactional_id: str, producer_id: int, epoch: int,
                          topics: Sequence[tuple[str, Sequence[int]]]) -> Encoded:
    """AddPartitionsToTxn v0-3 (one transaction, as a producer sends it)."""
    if not 0 <= version <= 3:
        raise ValueError(f"AddPartitionsToTxn v{version} is not encoded here")
    flexible = version >= 3
    out = bytearray()
    write_string(out, transactional_id, flexible)
    out += _PRODUCER.pack(producer_id, epoch)
    write_array_length(out, len(topics), flexible)
    for name, partitions in topics:
        write_string(out, name, flexible)
        write_array_length(out, len(partitions), flexible)
        for partition in partitions:
            out += I32.pack(partition)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    return Encoded(ApiKey.ADD_PARTITIONS_TO_TXN, version, flexible, [out])


def end_txn(version: int, transactional_id: str, producer_id: int, epoch: int,
            committed: bool) -> Encoded:
    """EndTxn v0-5."""
    if not 0 <= version <= 5:
        raise ValueError(f"EndTxn v{version} is not encoded here")
    flexible = version >= 3
    out = bytearray()
    write_string(out, transactional_id, flexible)
    out += _END.pack(producer_id, epoch, committed)
    if flexible:
        out.append(0)
    return Encoded(ApiKey.END_TXN, version, flexible, [out])
