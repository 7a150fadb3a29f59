"""SaslHandshake/SaslAuthenticate and the SCRAM credential APIs, byte for byte over TCP."""

from __future__ import annotations

import socket
import ssl
import struct

import pytest
from kio.schema.describe_user_scram_credentials.v0 import request as describe_m

from exactly.client import TransactionSession
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.auth.tls import principal_of
from tests.integration.server.auth.conftest import alter_scram, hostport, secure_settings
from tests.rawclient import RawConnection

pytestmark = pytest.mark.timeout(120)


def raw(broker, listener="SASL_PLAINTEXT") -> RawConnection:
    return RawConnection(*hostport(broker, listener))


def test_requests_before_authentication_close_the_connection(secure_broker):
    conn = raw(secure_broker)
    try:
        versions = conn.request(ApiKey.API_VERSIONS, 3, client_software_name="t",
                                client_software_version="1")
        keys = {k.api_key for k in versions.api_keys}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
        conn.send_bytes(conn.frame(ApiKey.METADATA, 12, _metadata_request()))
        assert conn.is_closed_by_peer()
    finally:
        conn.close()
    assert "before SASL authentication" in secure_broker.log_text()


def _metadata_request():
    from exactly.protocol.apis import request_class

    return request_class(ApiKey.METADATA, 12)(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False)


def test_plaintext_listener_needs_no_authentication(secure_broker):
    conn = raw(secure_broker, "PLAINTEXT")
    try:
        conn.send_bytes(conn.frame(ApiKey.METADATA, 12, _metadata_request()))
        frame = conn.read_frame()
        from exactly.protocol.framing import decode_response

        _, response = decode_response(ApiKey.METADATA, 12, frame)
        # Metadata answers with the listener the client came in on.
        assert (response.brokers[0].host, response.brokers[0].port) == hostport(secure_broker,
                                                                                "PLAINTEXT")
    finally:
        conn.close()


def test_authenticate_before_handshake_is_illegal_state(secure_broker):
    conn = raw(secure_broker)
    try:
        response = conn.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\0alice\0alice-secret")
        assert response.error_code == ErrorCode.illegal_sasl_state
        assert "SaslHandshake first" in response.error_message
        assert conn.is_closed_by_peer()
    finally:
        conn.close()


def test_unknown_mechanism_lists_the_enabled_ones_and_closes(secure_broker):
    conn = raw(secure_broker)
    try:
        response = conn.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(response.mechanisms) == ["PLAIN", "SCRAM-SHA-512"]
        assert conn.is_closed_by_peer()
    finally:
        conn.close()


def test_wrong_plain_password_fails_with_a_message_then_closes(secure_broker):
    conn = raw(secure_broker)
    try:
        assert conn.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        response = conn.request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\0alice\0nope")
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert "invalid credentials with SASL mechanism PLAIN" in response.error_message
        assert conn.is_closed_by_peer()
    finally:
        conn.close()


def test_plain_then_requests_are_served(secure_broker):
    conn = raw(secure_broker)
    try:
        assert conn.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        response = conn.request(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=b"\0alice\0alice-secret")
        assert response.error_code == ErrorCode.none
        response = conn.request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        assert response.error_code == ErrorCode.illegal_sasl_state  # once per connection
    finally:
        conn.close()


def test_handshake_v0_then_bare_tokens(secure_broker):
    """Old clients: SaslHandshake v0, then the SASL token without a Kafka header."""
    conn = raw(secure_broker)
    try:
        assert conn.request(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN").error_code == 0
        token = b"\0bob\0bob-secret"
        conn.send_bytes(struct.pack(">i", len(token)) + token)
        assert conn.read_frame() == b""  # PLAIN's empty server token: success
        conn.send_bytes(conn.frame(ApiKey.METADATA, 12, _metadata_request()))
        assert len(conn.read_frame()) > 8
    finally:
        conn.close()


def test_describe_and_alter_scram_credentials(secure_broker):
    result = alter_scram(secure_broker, "erin", "erin-pw", "SCRAM-SHA-512", iterations=8192)
    assert [(r.user, r.error_code) for r in result.results] == [("erin", ErrorCode.none)]
    bad = alter_scram(secure_broker, "frank", "pw", "SCRAM-SHA-512", iterations=100)
    assert bad.results[0].error_code == ErrorCode.unacceptable_credential
    assert "iterations 100" in bad.results[0].error_message
    conn = raw(secure_broker, "PLAINTEXT")
    try:
        response = conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=(
            describe_m.UserName(name="erin"), describe_m.UserName(name="nobody")))
        erin, nobody = response.results
        assert [(c.mechanism, c.iterations) for c in erin.credential_infos] == [(2, 8192)]
        assert nobody.error_code == ErrorCode.resource_not_found
        from kio.schema.alter_user_scram_credentials.v0 import request as alter_m

        response = conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, upsertions=(), deletions=(
            alter_m.ScramCredentialDeletion(name="erin", mechanism=2),
            alter_m.ScramCredentialDeletion(name="nobody", mechanism=1)))
        assert [(r.user, r.error_code) for r in response.results] == [
            ("erin", ErrorCode.none), ("nobody", ErrorCode.resource_not_found)]
        response = conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
        assert "erin" not in [r.user for r in response.results]
        assert "carol" in [r.user for r in response.results]
    finally:
        conn.close()


def test_scram_credentials_survive_a_broker_restart(broker_factory, certs, tmp_path):
    b = broker_factory(data_dir=tmp_path / "data", settings=secure_settings(certs))
    alter_scram(b, "grace", "grace-pw", "SCRAM-SHA-512")
    b.restart()  # kill -9, then start on the same data
    host, port = hostport(b, "SASL_SSL")
    session = TransactionSession({
        "bootstrap.servers": f"{host}:{port}", "transactional.id": "after-restart",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "grace", "sasl.password": "grace-pw", "ssl.ca.location": str(certs.ca)})
    try:
        session.initialize()
    finally:
        session.close()
    assert (tmp_path / "data" / "scram-credentials.json").exists()
    assert "grace-pw" not in (tmp_path / "data" / "scram-credentials.json").read_text()


def test_ssl_client_certificate_names_the_principal(secure_broker, certs):
    peer = ssl._ssl._test_decode_cert(str(certs.client_cert))  # type: ignore[attr-defined]
    assert principal_of(peer) == "User:CN=alice,O=Exactly"
    assert principal_of(None) is None
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    host, port = hostport(secure_broker, "SSL")
    with socket.create_connection((host, port), timeout=10) as sock, \
            ctx.wrap_socket(sock, server_hostname="localhost") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_required_client_auth_refuses_a_client_without_certificate(broker_factory, certs):
    b = broker_factory(settings={**secure_settings(certs), "ssl.client.auth": "required"})
    host, port = hostport(b, "SSL")
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)), \
            socket.create_connection((host, port), timeout=10) as sock, \
            ctx.wrap_socket(sock, server_hostname="localhost") as tls:
        tls.sendall(b"\0\0\0\0")
        assert tls.recv(1) == b""
        raise ConnectionError("closed")


def test_tls_listener_without_certificate_stops_the_broker(broker_factory):
    from exactly.testing import BrokerStartError

    with pytest.raises(BrokerStartError, match="ssl.keystore.location"):
        broker_factory(settings={"listeners": "SSL://127.0.0.1:0"})
