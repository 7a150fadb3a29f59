"""Produce requests (v3–v13) decoded with their records in place: each partition's `records`
is a read-only view of the frame, not a copy (issue 19: broker CPU per GB produced).

kio's decoder makes a `bytes` of every records field, a full copy of what a Produce carries
(about a tenth of the broker's CPU per GB produced). The broker reads a large frame into a buffer
of the connection (network.py) and the produce handler writes the records from there to the
segment file before its first `await`; this decoder lets it do so without that copy. The
entities are kio's own classes, so handlers see what kio would give them, `records` aside (a
memoryview). The frame's buffer must stay unchanged while the request is in use: network.py
lends it to a handler that suspends and takes another buffer for the next frame.

The layout (Kafka's ProduceRequest.json): transactional id (nullable string), acks (int16),
timeout (int32 ms), topics: [name (string; v13: topic id, a UUID), partitions: [index (int32),
records (nullable bytes)]]. From v9 (KIP-482, flexible versions) strings, bytes and arrays are
compact (length + 1 as an unsigned varint) and every structure ends with tagged fields, none of
which Produce defines: a request carrying one is refused, as kio refuses it, so that a request
is taken or refused alike whatever its size. Bytes after the request are ignored, as kio does.
"""

from __future__ import annotations

import datetime
import importlib
import struct
import uuid
from functools import cache
from types import ModuleType
from typing import Any

from exactly.protocol.apis import ApiKey, request_class
from exactly.protocol.array_guard import MAX_ARRAY_LENGTH, too_many_elements
from exactly.protocol.framing import MalformedRequest, RequestHeader, parse_header, peek_header
from exactly.protocol.primitives import read_uvarint

FLEXIBLE_SINCE = 9  # KIP-482: compact encodings and tagged fields
TOPIC_ID_SINCE = 13  # KIP-516: topics named by id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_NO_TOPIC_ID = bytes(16)


@cache
def _schema(api_version: int) -> ModuleType:
    """kio's module of this Produce version (its request and nested entity classes)."""
    return importlib.import_module(request_class(ApiKey.PRODUCE, api_version).__module__)


def decode_produce_in_place(frame: memoryview, fixed: tuple[int, int, int] | None = None,
                            ) -> tuple[RequestHeader, Any]:
    """Header and kio ProduceRequest of `frame`, whose records are views of `frame`;
    MalformedRequest when the frame does not hold a whole, well-formed request. `fixed`: what
    `peek_header` returned for this frame, when the caller has it already.

    Written for speed, as it must cost less than the copy it saves (kio decodes a 1 MB Produce,
    its copy included, in ~40 µs): struct reads and one-byte varints inline, no reader object.
    """
    if fixed is None:
        fixed = peek_header(frame)
    api_version = fixed[1]
    flexible = api_version >= FLEXIBLE_SINCE
    header, pos = parse_header(frame, flexible, fixed)
    schema = _schema(api_version)
    partition_cls, topic_cls = schema.PartitionProduceData, schema.TopicProduceData
    end = len(frame)
    try:
        size, pos = _size(frame, pos, flexible, _I16)
        transactional_id = None
        if size != -1:
            transactional_id, pos = _text(frame, pos, size, end)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
        pos += 6
        count, pos = _count(frame, pos, flexible)
        topics = []
        for _ in range(count):
            if api_version >= TOPIC_ID_SINCE:
                raw = bytes(frame[pos:pos + 16])
                if len(raw) < 16:
                    raise MalformedRequest("the frame ends inside a topic id")
                pos += 16
                topic: dict[str, Any] = {"topic_id": None if raw == _NO_TOPIC_ID
                                         else uuid.UUID(bytes=raw)}
            else:
                size, pos = _size(frame, pos, flexible, _I16)
                if size < 0:
                    raise MalformedRequest("null topic name")
                name, pos = _text(frame, pos, size, end)
                topic = {"name": name}
            partitions = []
            count, pos = _count(frame, pos, flexible)
            for _ in range(count):
                index = _I32.unpack_from(frame, pos)[0]
                size, pos = _size(frame, pos + 4, flexible, _I32)
                records = None
                if size != -1:
                    if not 0 <= size <= end - pos:
                        raise MalformedRequest(f"records of {size} bytes: negative, or past the "
                                               f"frame's end")
                    records = frame[pos:pos + size]
                    pos += size
                if flexible:
                    pos = _no_tags(frame, pos)
                partitions.append(partition_cls(index=index, records=records))
            if flexible:
                pos = _no_tags(frame, pos)
            topics.append(topic_cls(**topic, partition_data=tuple(partitions)))
        if flexible:
            _no_tags(frame, pos)
    except (struct.error, IndexError):
        raise MalformedRequest(f"cannot decode Produce v{api_version} body: the frame ends "
                               f"early") from None
    except MalformedRequest as exc:
        raise MalformedRequest(f"cannot decode Produce v{api_version} body: {exc}") from None
    request = schema.ProduceRequest(transactional_id=transactional_id, acks=acks,
                                    timeout=datetime.timedelta(milliseconds=timeout_ms),
                                    topic_data=tuple(topics))
    return header, request


def _uvarint(frame: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes: lengths and counts are ints); IndexError at the end."""
    b = frame[pos]
    if b < 0x80:
        return b, pos + 1
    return read_uvarint(frame, pos, max_bytes=5, error=MalformedRequest)


def _text(frame: memoryview, pos: int, size: int, end: int) -> tuple[str, int]:
    """The string of `size` bytes at `pos` (-1, null, is the caller's to handle)."""
    if not 0 <= size <= end - pos:
        raise MalformedRequest(f"a string of {size} bytes: negative, or past the frame's end")
    try:
        return str(frame[pos:pos + size], "utf-8"), pos + size
    except UnicodeDecodeError as exc:
        raise MalformedRequest(f"string at {pos} is not UTF-8: {exc}") from None


def _size(frame: memoryview, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """A length or count (-1: null): compact (an unsigned varint of it + 1) in flexible
    versions, else `fixed` (int16 for strings, int32 for bytes and arrays)."""
    if flexible:
        size, pos = _uvarint(frame, pos)
        return size - 1, pos
    return fixed.unpack_from(frame, pos)[0], pos + fixed.size


def _count(frame: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's count, checked as array_guard checks every other request's (and Kafka's
    generated readers): at most the bytes left, and at most MAX_ARRAY_LENGTH."""
    count, pos = _size(frame, pos, flexible, _I32)
    if count < 0:
        raise MalformedRequest("null array where an array is required")
    if count > len(frame) - pos:
        raise MalformedRequest(f"an array claims {count} elements with {len(frame) - pos} "
                               f"bytes left")
    if count > MAX_ARRAY_LENGTH:
        raise MalformedRequest(too_many_elements(count))
    return count, pos


def _no_tags(frame: memoryview, pos: int) -> int:
    """The end of an empty tagged-field section: Produce defines no tags, and kio refuses any."""
    count, pos = _uvarint(frame, pos)
    if count:
        raise MalformedRequest(f"{count} tagged fields where Produce defines none")
    return pos
