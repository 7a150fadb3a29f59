"""Request/response framing and headers v0–v2 over kio codecs."""

import struct

import pytest

from exactly.protocol.apis import (
    SUPPORTED,
    ApiKey,
    advertised,
    build,
    request_class,
    response_class,
)
from exactly.protocol.framing import (
    MalformedRequest,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_header,
    peek_header,
)


def _metadata_request(version):
    return build(request_class(ApiKey.METADATA, version), topics=None,
                 allow_auto_topic_creation=True, include_topic_authorized_operations=False,
                 include_cluster_authorized_operations=False)


@pytest.mark.parametrize("version", [1, 4, 8, 9, 12])
def test_request_round_trip_flexible_and_not(version):
    frame = encode_request(RequestHeader(ApiKey.METADATA, version, 99, "client-é"),
                           _metadata_request(version))
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    header, request = decode_request(frame[4:])
    assert header == RequestHeader(ApiKey.METADATA, version, 99, "client-é")
    assert request.topics is None


@pytest.mark.parametrize("version", [4, 12])
def test_a_peeked_header_is_not_read_again(version):
    """The network peeks at the fixed header first and hands it on: decoding with it gives what
    decoding from scratch gives, and reads the fixed fields from what it was handed."""
    frame = encode_request(RequestHeader(ApiKey.METADATA, version, 99, "c"),
                           _metadata_request(version))[4:]
    fixed = peek_header(frame)
    assert decode_request(frame, fixed) == decode_request(frame)
    header, _ = decode_request(frame, (ApiKey.METADATA, version, 1234))
    assert header.correlation_id == 1234


def test_null_client_id_and_tagged_header_fields():
    frame = encode_request(RequestHeader(ApiKey.METADATA, 12, 1, None), _metadata_request(12))
    header, _ = decode_request(frame[4:])
    assert header.client_id is None
    # A header with one unknown tagged field (tag 5, 2 bytes) is still understood.
    body = frame[4:]
    head_len = 2 + 2 + 4 + 2
    tagged = body[:head_len] + b"\x01\x05\x02ab" + body[head_len + 1:]
    header, request = decode_request(tagged)
    assert header.correlation_id == 1 and request.topics is None


def test_bytes_after_the_body_inside_the_frame_are_ignored_as_kafka_does():
    frame = encode_request(RequestHeader(ApiKey.METADATA, 12, 1, "c"), _metadata_request(12))
    header, request = decode_request(frame[4:] + b"\x00\x00\x00")
    assert header.correlation_id == 1 and request.topics is None


def test_truncated_header_is_malformed():
    with pytest.raises(MalformedRequest):
        parse_header(struct.pack(">hhih", 3, 1, 1, 10) + b"abc", flexible=False)


def test_every_advertised_version_has_codecs():
    for api_key, (low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            assert request_class(api_key, version) and response_class(api_key, version)


def test_api_versions_response_uses_header_v0():
    from exactly.server.handlers.api_versions import api_versions_response

    frame = encode_response(ApiKey.API_VERSIONS, 3, 7, api_versions_response(3, {"transaction.version": 2}))
    # header v0: size, correlation id, then the body starts right away with the error code
    assert struct.unpack_from(">ih", frame, 4) == (7, 0)
    correlation_id, response = decode_response(ApiKey.API_VERSIONS, 3, frame[4:])
    assert correlation_id == 7
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == advertised()
