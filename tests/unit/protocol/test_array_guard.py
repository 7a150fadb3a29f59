"""array_guard: a request whose array claims more elements than the frame has bytes is refused
before kio decodes it (kio's reader would reserve room for them and abort the process), and
every request kio encodes passes it unchanged."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest

from exactly.protocol import array_guard
from exactly.protocol.apis import SUPPORTED, ApiKey, request_class
from exactly.protocol.framing import (
    MalformedRequest,
    RequestHeader,
    decode_request,
    encode_request,
)
from exactly.protocol.produce_request import decode_produce_in_place
from exactly.protocol.records import Record, build_batch


def _frame(api_key: int, version: int, body: bytes, flexible: bool = True) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, 1) + b"c"
    return header + (b"\x00" if flexible else b"") + body


def test_every_request_class_has_a_plan() -> None:
    for api_key, (low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            array_guard._plan(request_class(api_key, version))


@pytest.mark.parametrize(("api_key", "version", "body", "flexible"), [
    # Metadata v12: a compact array of 4,294,967,294 topics in a five-byte body
    (ApiKey.METADATA, 12, b"\xff\xff\xff\xff\x0f", True),
    # Metadata v1: a legacy array of 2**31 - 1 topics
    (ApiKey.METADATA, 1, struct.pack(">i", 0x7FFFFFFF), False),
    # Fetch v16: a huge topics array after the fixed fields
    (ApiKey.FETCH, 16, struct.pack(">iiibii", 500, 1, 1000, 0, 0, -1) + b"\xff\xff\xff\x7f",
     True),
    # Produce v9: partitions claimed by the million inside one topic
    (ApiKey.PRODUCE, 9, b"\x00" + struct.pack(">hi", 1, 1000) + b"\x02\x02t" + b"\xff\xff\x7f",
     True),
])
def test_a_huge_array_is_malformed(api_key: int, version: int, body: bytes,
                                   flexible: bool) -> None:
    with pytest.raises(MalformedRequest, match="elements"):
        decode_request(_frame(api_key, version, body, flexible))


def _requests() -> list[tuple[int, int, object]]:
    batch = build_batch([Record(b"k", b"v")], timestamp=1)
    out: list[tuple[int, int, object]] = []
    for v in (3, 8, 9, 12, 13):
        topic = ({"topic_id": uuid.uuid4()} if v >= 13 else {"name": "t"})
        cls = request_class(ApiKey.PRODUCE, v)
        mod = __import__(cls.__module__, fromlist=["TopicProduceData"])
        out.append((ApiKey.PRODUCE, v, cls(
            transactional_id="x", acks=-1, timeout=datetime.timedelta(seconds=1),
            topic_data=(mod.TopicProduceData(**topic, partition_data=(
                mod.PartitionProduceData(index=0, records=batch),
                mod.PartitionProduceData(index=1, records=None))),))))
    for v in (4, 12, 16, 18):
        cls = request_class(ApiKey.FETCH, v)
        mod = __import__(cls.__module__, fromlist=["FetchTopic"])
        part = {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 100}
        if v >= 9:
            part["current_leader_epoch"] = -1
        if v >= 5:
            part["log_start_offset"] = -1
        topic = {"topic_id": uuid.uuid4()} if v >= 13 else {"topic": "t"}
        fields = {"max_wait": datetime.timedelta(milliseconds=5), "min_bytes": 1,
                  "topics": (mod.FetchTopic(**topic, partitions=(mod.FetchPartition(**part),)),)}
        if v >= 7:
            fields["forgotten_topics_data"] = ()
        if v >= 12:
            fields["cluster_id"] = "cluster"
        out.append((ApiKey.FETCH, v, cls(**fields)))
    cls = request_class(ApiKey.METADATA, 12)
    mod = __import__(cls.__module__, fromlist=["MetadataRequestTopic"])
    out.append((ApiKey.METADATA, 12, cls(topics=(mod.MetadataRequestTopic(name="a",
                                                                           topic_id=None),),
                                         allow_auto_topic_creation=True,
                                         include_topic_authorized_operations=False)))
    out.append((ApiKey.METADATA, 12, cls(topics=None, allow_auto_topic_creation=True,
                                         include_topic_authorized_operations=False)))
    return out


@pytest.mark.parametrize(("api_key", "version", "request_"), _requests())
def test_requests_kio_encodes_pass(api_key: int, version: int, request_: object) -> None:
    frame = encode_request(RequestHeader(api_key, version, 3, "c"), request_)
    _header, decoded = decode_request(frame[4:])
    assert decoded == request_


# -- Apache Kafka 4.4's absolute caps (MessageUtil.MAX_ARRAY_LENGTH, MAX_TAGGED_FIELD_COUNT) ----
# A request within the remaining-bytes check but over a cap: a million and one empty strings
# take a million and one bytes, ten thousand and one tagged fields twenty thousand.


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def _describe_groups(version: int, count: int) -> bytes:
    """DescribeGroups with `count` empty group names: one byte each in v5 (a compact string),
    two in v0."""
    if version >= 5:
        body = _uvarint(count + 1) + b"\x01" * count + b"\x00" + b"\x00"
    else:
        body = struct.pack(">i", count) + b"\x00\x00" * count
    return _frame(ApiKey.DESCRIBE_GROUPS, version, body, flexible=version >= 5)


@pytest.mark.parametrize("version", [0, 5])
def test_an_array_over_kafkas_cap_is_malformed_though_it_fits(version: int) -> None:
    cap = array_guard.MAX_ARRAY_LENGTH
    assert cap == 1_000_000
    with pytest.raises(MalformedRequest, match=(
            "Tried to read a collection of size 1000001, which exceeds the maximum allowed "
            "size of 1000000")):
        decode_request(_describe_groups(version, cap + 1))
    _header, request = decode_request(_describe_groups(version, cap))
    assert len(request.groups) == cap  # type: ignore[attr-defined]


def test_an_array_in_a_tagged_field_has_the_cap_too() -> None:
    """The interpreted walk (tagged fields' values) checks the cap as the compiled one does."""
    step = ("array", ("fixed", 1))  # a compact array of int8
    over = _uvarint(1_000_002) + b"\x00" * 1_000_001
    with pytest.raises(array_guard.ArrayTooLong, match="exceeds the maximum allowed size"):
        array_guard._walk(step, True, over, 0, len(over))
    at_cap = _uvarint(1_000_001) + b"\x00" * 1_000_000
    assert array_guard._walk(step, True, at_cap, 0, len(at_cap)) == len(at_cap)


def _fetch_with_cluster_ids(count: int) -> bytes:
    """Fetch v12 whose tagged fields are `count` times its ClusterId (tag 0): Kafka's generated
    reader takes a repeated tag, the last one wins."""
    cls = request_class(ApiKey.FETCH, 12)
    request = cls(max_wait=datetime.timedelta(milliseconds=5), min_bytes=1, topics=(),
                  forgotten_topics_data=(), cluster_id=None)
    frame = encode_request(RequestHeader(ApiKey.FETCH, 12, 3, "c"), request)[4:]
    assert frame.endswith(b"\x00")  # no tagged field: the count 0 ends the body
    return frame[:-1] + _uvarint(count) + b"\x00\x02\x02c" * count


def test_tagged_fields_over_kafkas_cap_are_malformed() -> None:
    cap = array_guard.MAX_TAGGED_FIELD_COUNT
    assert cap == 10_000
    with pytest.raises(MalformedRequest, match=(
            "Tried to read 10001 tagged fields, which exceeds the maximum allowed count of "
            "10000")):
        decode_request(_fetch_with_cluster_ids(cap + 1))
    _header, request = decode_request(_fetch_with_cluster_ids(cap))
    assert request.cluster_id == "c"  # type: ignore[attr-defined]


def _header_tags(count: int, present: int | None = None) -> bytes:
    """DescribeGroups v5 for one group, its request header (v2) claiming `count` tagged fields
    of no bytes (tag 5), `present` of them there (all by default)."""
    header = struct.pack(">hhih", ApiKey.DESCRIBE_GROUPS, 5, 1, 1) + b"c"
    body = _uvarint(2) + b"\x02g" + b"\x00" + b"\x00"
    fields = b"\x05\x00" * (count if present is None else present)
    return header + _uvarint(count) + fields + body


def test_request_header_tagged_fields_over_kafkas_cap_are_malformed() -> None:
    cap = array_guard.MAX_TAGGED_FIELD_COUNT
    with pytest.raises(MalformedRequest, match="10001 tagged fields, which exceeds"):
        decode_request(_header_tags(cap + 1))
    _header, request = decode_request(_header_tags(cap))
    assert request.groups == ("g",)  # type: ignore[attr-defined]
    # More fields claimed than bytes left: refused before any is read, as Kafka does.
    with pytest.raises(MalformedRequest, match="but there are only"):
        decode_request(_header_tags(50, present=1))


def _produce_topics(count: int, present: int | None = None) -> bytes:
    """Produce v9 claiming `count` topics of empty names and no partitions (three bytes each),
    `present` of them there (all by default)."""
    topics = b"\x01\x01\x00" * (count if present is None else present)
    body = b"\x00" + struct.pack(">hi", 1, 1000) + _uvarint(count + 1) + topics + b"\x00"
    return _frame(ApiKey.PRODUCE, 9, body)


def test_produce_decoded_in_place_has_the_same_cap() -> None:
    """The broker decodes a large Produce with its records in place, not through decode_request:
    the same request is refused either way."""
    cap = array_guard.MAX_ARRAY_LENGTH
    frame = _produce_topics(cap + 1)
    for decode in (decode_request, lambda f: decode_produce_in_place(memoryview(f))):
        with pytest.raises(MalformedRequest, match="exceeds the maximum allowed size"):
            decode(frame)
    # Fewer elements than claimed, in either decoder: the bytes left decide first.
    short = _produce_topics(50, present=1)
    for decode in (decode_request, lambda f: decode_produce_in_place(memoryview(f))):
        with pytest.raises(MalformedRequest, match="elements"):
            decode(short)
