"""Hostile input: frames a broker must survive, answered or closed as Kafka does (DESIGN.md,
invariant 8: an error code or a closed connection, never a crash, a hang, a partial write).

Each case sends a hand-made frame on a connection of its own and records what came back:
"closed", an answer, or "no answer" (the broker waits for the rest of a frame); then a normal
request on a new connection shows the broker still serves."""

from __future__ import annotations

import struct
from typing import Any

from tests.helpers.conformance.harness import Divergence, Session, case, raw_frame


def still_serving(s: Session) -> Any:
    """ApiVersions v3's error code on a fresh connection: 0 while the broker serves."""
    answer = s.call(18, 3, {"client_software_name": "conformance",
                            "client_software_version": "1"}, conn=s.connect())
    return answer["error_code"]


def raw(s: Session, frame: bytes, api_key: int, version: int, wait: float = 10.0) -> Any:
    conn = s.connect()
    conn.send_frame(frame)
    return conn.outcome(api_key, version, wait=wait)


@case("hostile.frame_sizes")
def frame_sizes(s: Session) -> None:
    """A size above socket.request.max.bytes (100 MiB in both), a negative size, a zero size,
    and a size larger than what follows (the broker waits for the rest)."""
    s.record("huge", raw(s, struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 64, 18, 0))
    s.record("negative", raw(s, struct.pack(">i", -5) + b"\x00" * 16, 18, 0))
    s.record("zero", raw(s, struct.pack(">i", 0), 18, 0))
    body = raw_frame(18, 0, 1, b"", flexible_header=False)[4:]
    s.record("truncated", raw(s, struct.pack(">i", len(body) + 40) + body, 18, 0, wait=3.0))
    s.record("short header", raw(s, struct.pack(">i", 3) + b"\x00\x12\x00", 18, 0))
    s.record("serving", still_serving(s))


@case("hostile.unknown_api")
def unknown_api(s: Session) -> None:
    """An API key nobody knows, and one out of range, each at v0."""
    s.record("key 999", raw(s, raw_frame(999, 0, 1, b"", flexible_header=False), 18, 0))
    s.record("key -1", raw(s, raw_frame(-1, 0, 1, b"", flexible_header=False), 18, 0))
    s.record("serving", still_serving(s))


@case("hostile.unknown_version")
def unknown_version(s: Session) -> None:
    """A version beyond the known ones: ApiVersions answers UNSUPPORTED_VERSION in v0 with its
    table (KIP-511); any other API closes the connection."""
    for flexible in (True, False):
        a = raw(s, raw_frame(18, 99, 7, b"", flexible_header=flexible), 18, 0)
        if isinstance(a, dict):  # the table itself is compared by the api_versions cases
            a = {"error_code": a["error_code"], "has_table": bool(a["api_keys"])}
        s.record(f"ApiVersions v99 header v{2 if flexible else 1}", a)
    s.record("Metadata v99", raw(s, raw_frame(3, 99, 7, b"\x00"), 3, 12))
    s.record("Produce v99", raw(s, raw_frame(0, 99, 7, b"\x00"), 0, 11))
    s.record("Fetch v99", raw(s, raw_frame(1, 99, 7, b"\x00"), 1, 16))
    s.record("Metadata v-1", raw(s, raw_frame(3, -1, 7, b"\x00", flexible_header=False), 3, 1))
    s.record("serving", still_serving(s))


@case("hostile.garbage_body")
def garbage_body(s: Session) -> None:
    """Known APIs and versions with bodies that do not parse: cut short, lengths that lie, an
    array claiming two billion entries; and ApiVersions v3 with a client software name that
    KIP-511 forbids (INVALID_REQUEST)."""
    s.record("Metadata v12 empty body", raw(s, raw_frame(3, 12, 1, b""), 3, 12))
    s.record("Metadata v12 huge array", raw(s, raw_frame(3, 12, 1, b"\xff\xff\xff\xff\x0f"),
                                            3, 12))
    s.record("Metadata v1 huge array", raw(s, raw_frame(
        3, 1, 1, struct.pack(">i", 0x7FFFFFFF), flexible_header=False), 3, 1))
    s.record("Produce v9 garbage", raw(s, raw_frame(0, 9, 1, b"\x07" * 40), 0, 9))
    s.record("Fetch v4 cut short", raw(s, raw_frame(
        1, 4, 1, struct.pack(">iii", -1, 500, 1), flexible_header=False), 1, 4))
    s.record("Metadata v12 trailing bytes", raw(s, raw_frame(
        3, 12, 1, b"\x01\x00\x00\x00" + b"\xde\xad\xbe\xef"), 3, 12))

    def api_versions_v3(name: str) -> bytes:
        # compact strings: name, version; empty tagged fields
        body = (bytes([len(name) + 1]) + name.encode() + bytes([2]) + b"1" + b"\x00")
        return raw_frame(18, 3, 1, body, flexible_header=True)

    s.record("ApiVersions v3 invalid software name", raw(s, api_versions_v3("bad name!"), 18, 3))
    s.record("ApiVersions v3 empty software name", raw(s, api_versions_v3(""), 18, 3))
    s.record("serving", still_serving(s))


@case("hostile.null_client_id")
def null_client_id(s: Session) -> None:
    """A request header with a null client id: a valid request (Kafka accepts it)."""
    a = raw(s, raw_frame(3, 1, 1, struct.pack(">i", 0), client_id=None,
                         flexible_header=False), 3, 1)
    if isinstance(a, dict):
        a = {"topics": a["topics"], "brokers": len(a["brokers"])}
    s.record("Metadata v1 no topics", a)


DIVERGENCES: list[Divergence] = []
