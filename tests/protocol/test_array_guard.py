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
