"""Kafka framing: a 4-byte big-endian size, then a request or response header and body.

Request headers: v1 (api key, version, correlation id, nullable client id) for non-flexible
versions, v2 (v1 + tagged fields) for flexible ones. Response headers: v0 (correlation id) or v1
(+ tagged fields); ApiVersions always answers with header v0 so any client can read it (KIP-511).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer

from exactly.protocol import array_guard
from exactly.protocol.apis import ApiKey, request_class, response_class
from exactly.protocol.array_guard import ArrayTooLong, check_tagged_field_count
from exactly.protocol.fast_requests import Encoded
from exactly.protocol.primitives import read_uvarint

SIZE = struct.Struct(">i")
_FIXED_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_CLIENT_ID_LENGTH = struct.Struct(">h")


class MalformedRequest(ValueError):
    """A frame that cannot be decoded. The connection that sent it is closed."""


@dataclass(slots=True, frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """The fixed part of any request header, readable for every version and API."""
    if len(frame) < _FIXED_HEADER.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def _read_tagged_fields(frame: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip a tagged-field section (KIP-482); the header carries no tags we act on. Its count is
    checked first, as Kafka's generated readers do (array_guard.py)."""
    count, pos = _read_uvarint(frame, pos)
    error = check_tagged_field_count(count, len(frame) - pos)
    if error is not None:
        raise MalformedRequest(error)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise MalformedRequest("tagged field runs past the end of the frame")
    return pos


def _read_uvarint(frame: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    return read_uvarint(frame, pos, max_bytes=5, error=MalformedRequest)


def parse_header(frame: bytes | memoryview, flexible: bool,
                 fixed: tuple[int, int, int] | None = None) -> tuple[RequestHeader, int]:
    """Decode the request header; returns it and the position where the body starts. `fixed`:
    what `peek_header` returned for this frame, when the caller has it already."""
    api_key, api_version, correlation_id = peek_header(frame) if fixed is None else fixed
    pos = _FIXED_HEADER.size
    if len(frame) < pos + 2:
        raise MalformedRequest("request header ends before the client id")
    (client_len,) = _CLIENT_ID_LENGTH.unpack_from(frame, pos)
    pos += 2
    client_id: str | None = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise MalformedRequest("client id runs past the end of the frame")
        try:
            client_id = str(frame[pos : pos + client_len], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest("client id is not UTF-8") from exc
        pos += client_len
    elif client_len != -1:
        raise MalformedRequest(f"negative client id length {client_len}")
    if flexible:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields, as in nearly every header
            pos += 1
        else:
            pos = _read_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def _flexible(cls: type) -> bool:
    """Whether a kio entity uses the compact, tagged encoding of KIP-482."""
    return bool(vars(cls)["__flexible__"])


@cache
def _reader(api_key: int, version: int) -> Any:
    return entity_reader(request_class(api_key, version))


def is_flexible(api_key: int, version: int) -> bool:
    return _flexible(request_class(api_key, version))


def decode_request(frame: bytes | memoryview,
                   fixed: tuple[int, int, int] | None = None) -> tuple[RequestHeader, Any]:
    """Header and kio request entity of a supported API version; MalformedRequest otherwise.
    `fixed`: what `peek_header` returned for this frame, when the caller has it already.

    Bytes left over inside the frame after the body are ignored, as Apache Kafka's parser does:
    librdkafka pads some requests (Metadata v12 for all topics) with unused bytes.
    """
    if fixed is None:
        fixed = peek_header(frame)
    api_key, api_version, _ = fixed
    header, pos = parse_header(frame, is_flexible(api_key, api_version), fixed)
    try:
        # Before kio: its reader reserves an array's room from the claimed length, and a
        # huge claim aborts the process (array_guard.py).
        array_guard.check(request_class(api_key, api_version), frame, pos)
    except ArrayTooLong as exc:
        raise MalformedRequest(f"cannot decode {api_key=} v{api_version} body: {exc}") from exc
    try:
        request, _size = _reader(api_key, api_version)(frame, pos)
    except Exception as exc:  # kio raises several types for short or inconsistent input
        raise MalformedRequest(f"cannot decode {api_key=} v{api_version} body: {exc}") from exc
    return header, request


_writers: dict[type, Any] = {}


def _writer(cls: type) -> Any:
    writer = _writers.get(cls)
    if writer is None:
        writer = _writers[cls] = entity_writer(cls)
    return writer


_RESPONSE_HEADER = struct.Struct(">ii")  # size, correlation id


@cache
def _response_tags(api_key: int, api_version: int) -> bytes:
    """What follows the correlation id in a response header: v1's empty tagged fields, or none."""
    flexible = _flexible(response_class(api_key, api_version))
    return b"\0" if flexible and api_key != ApiKey.API_VERSIONS else b""


def encode_response_body(response: Any) -> bytes:
    """A response's body alone, to be cached and sent as bytes by encode_response."""
    buf = io.BytesIO()
    _writer(type(response))(buf, response)
    return buf.getvalue()


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """A complete response frame, size prefix included. `response` is a kio entity, or the body
    already encoded (bytes, from exactly.protocol.fast_responses)."""
    if isinstance(response, bytes):
        tags = _response_tags(api_key, api_version)
        size = 4 + len(tags) + len(response)
        return _RESPONSE_HEADER.pack(size, correlation_id) + tags + response
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(struct.pack(">i", correlation_id))
    flexible: bool = _flexible(response_class(api_key, api_version))
    if flexible and api_key != ApiKey.API_VERSIONS:
        buf.write(b"\0")  # response header v1: no tagged fields
    _writer(type(response))(buf, response)
    data = buf.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    del data
    return out


def client_id_field(client_id: str | None) -> bytes:
    """A request header's client_id (a nullable string with an int16 length in every version)."""
    if client_id is None:
        return b"\xff\xff"
    raw = client_id.encode()
    return struct.pack(">h", len(raw)) + raw


def encoded_request(correlation_id: int, client_id: bytes, body: Encoded) -> bytes:
    """A complete request frame of a hand-encoded body (fast_requests); `client_id` as
    client_id_field() makes it."""
    head = _FIXED_HEADER.pack(body.api_key, body.version, correlation_id) + client_id
    if body.flexible:
        head += b"\0"
    size = len(head)
    for part in body.parts:
        size += len(part)
    return b"".join((SIZE.pack(size), head, *body.parts))


def encode_request(header: RequestHeader, request: Any) -> bytes:
    """A complete request frame (used by tests and tools that speak raw protocol)."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(_FIXED_HEADER.pack(header.api_key, header.api_version, header.correlation_id))
    buf.write(client_id_field(header.client_id))
    if _flexible(type(request)):
        buf.write(b"\0")
    _writer(type(request))(buf, request)
    data = buf.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    del data
    return out


def _clamp_start_times(frame: bytes | memoryview, pos: int) -> bytes:
    """DescribeTransactions v0 with negative start times (-1: none) raised to 0.

    Brokers, Kafka's included, send -1 for an Empty or unknown transaction, and kio's datetime
    decoder refuses negative timestamps; 0 reads back as "no start time".
    """
    out = bytearray(frame)
    pos += 4  # throttle_time_ms
    count, pos = _read_uvarint(out, pos)
    for _ in range(max(count - 1, 0)):
        pos += 2  # error_code
        for _ in range(2):  # transactional_id, transaction_state: compact strings
            size, pos = _read_uvarint(out, pos)
            pos += max(size - 1, 0)
        pos += 4  # transaction_timeout_ms
        if struct.unpack_from(">q", out, pos)[0] < 0:
            struct.pack_into(">q", out, pos, 0)
        pos += 8 + 8 + 2  # start time, producer id, producer epoch
        topics, pos = _read_uvarint(out, pos)
        for _ in range(max(topics - 1, 0)):
            size, pos = _read_uvarint(out, pos)
            pos += max(size - 1, 0)
            partitions, pos = _read_uvarint(out, pos)
            pos += 4 * max(partitions - 1, 0)
            pos = _read_tagged_fields(out, pos)
        pos = _read_tagged_fields(out, pos)
    return bytes(out)


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """Correlation id and entity of a response frame without its size prefix."""
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    pos = 4
    cls = response_class(api_key, api_version)
    if _flexible(cls) and api_key != ApiKey.API_VERSIONS:
        pos = _read_tagged_fields(frame, pos)
    if api_key == ApiKey.DESCRIBE_TRANSACTIONS:
        frame = _clamp_start_times(frame, pos)
    response: Any
    response, _size = entity_reader(cls)(frame, pos)
    return correlation_id, response
