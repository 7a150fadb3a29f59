"""ApiVersions is answered with a body encoded once per version and finalized features
(handlers/api_versions.py): over TCP, every version's answer is byte for byte kio's encoding of
the versions table, and a broker finalized at another transaction.version answers its own level."""

from __future__ import annotations

import pytest

from exactly.protocol.apis import SUPPORTED, ApiKey, advertised, request_class
from exactly.protocol.framing import RequestHeader, decode_response, encode_request, encode_response
from exactly.server.handlers.api_versions import FIXED_FEATURES, _encoded, api_versions_response
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection


def _fields(version: int) -> dict[str, str]:
    return {"client_software_name": "raw", "client_software_version": "0"} if version >= 3 else {}


def _raw_answer(broker: EmbeddedBroker, version: int, correlation_id: int) -> bytes:
    conn = RawConnection(broker.host, broker.port)
    try:
        request = request_class(ApiKey.API_VERSIONS, version)(**_fields(version))
        conn.send_bytes(encode_request(
            RequestHeader(ApiKey.API_VERSIONS, version, correlation_id, "raw"), request))
        return conn.read_frame()
    finally:
        conn.close()


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_every_version_answers_kios_encoding_of_the_table(transaction_version: int) -> None:
    # KIP-848's group.version and KIP-932's share.version are finalized at 1 whatever the
    # transaction version, as Kafka 4.4 finalizes its group and share features.
    finalized = {"transaction.version": transaction_version, **FIXED_FEATURES}
    with EmbeddedBroker(settings={"transaction.version": transaction_version}) as broker:
        lo, hi = SUPPORTED[ApiKey.API_VERSIONS]
        for version in range(lo, hi + 1):
            for correlation_id in (7, 8):  # the second answer comes from the encoded body kept
                frame = _raw_answer(broker, version, correlation_id)
                expected = encode_response(ApiKey.API_VERSIONS, version, correlation_id,
                                           api_versions_response(version,
                                                                 dict(sorted(finalized.items()))))
                assert frame == expected[4:], (version, correlation_id)
        answer = decode_response(ApiKey.API_VERSIONS, 3, _raw_answer(broker, 3, 9))[1]
        assert sorted((f.name, f.max_version_level) for f in answer.finalized_features) == [
            ("group.version", 1), ("share.version", 1),
            ("transaction.version", transaction_version)]
        assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == advertised()


def test_the_kept_body_follows_the_finalized_features() -> None:
    # One process, two feature levels: a body kept for one level must not answer the other.
    def levels(transaction_version: int) -> list[tuple[str, int]]:
        body = _encoded(3, (("transaction.version", transaction_version),))
        frame = encode_response(ApiKey.API_VERSIONS, 3, 1, body)
        answer = decode_response(ApiKey.API_VERSIONS, 3, frame[4:])[1]
        return [(f.name, f.max_version_level) for f in answer.finalized_features]

    assert levels(2) == [("transaction.version", 2)]
    assert levels(1) == [("transaction.version", 1)]
    assert levels(2) == [("transaction.version", 2)]
