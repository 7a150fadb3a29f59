"""A broker with every kind of listener, shared by the module's tests, and helpers."""

from __future__ import annotations

import secrets
import uuid

import pytest

from exactly.client.security import scram_salted_password
from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker, TestCertificates, make_test_certificates
from tests.rawclient import RawConnection

MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
PLAIN_USERS = "alice:alice-secret,bob:bob-secret"
ALL_LISTENERS = ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                 "SASL_SSL://127.0.0.1:0")


def secure_settings(certs: TestCertificates, **extra: str) -> dict[str, str]:
    return {"listeners": ALL_LISTENERS, "ssl.keystore.location": str(certs.server),
            "ssl.truststore.location": str(certs.ca), "ssl.client.auth": "requested",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.plain.users": PLAIN_USERS,
            "log.flush.policy": "os", **extra}


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return make_test_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(certs: TestCertificates):
    with EmbeddedBroker(settings=secure_settings(certs)) as b:
        alter_scram(b, "carol", "carol-secret", "SCRAM-SHA-512")
        yield b


def hostport(broker: EmbeddedBroker, listener: str) -> tuple[str, int]:
    return broker.listener_addresses[listener]


def alter_scram(broker: EmbeddedBroker, user: str, password: str, mechanism: str,
                iterations: int = 4096) -> object:
    """AlterUserScramCredentials (KIP-554) over the PLAINTEXT listener; returns the response."""
    salt = secrets.token_bytes(32)
    from kio.schema.alter_user_scram_credentials.v0 import request as m

    conn = RawConnection(*hostport(broker, "PLAINTEXT"))
    try:
        upsert = m.ScramCredentialUpsertion(
            name=user, mechanism=MECHANISM_IDS[mechanism], iterations=iterations, salt=salt,
            salted_password=scram_salted_password(mechanism, password, salt, iterations))
        return conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=(),
                            upsertions=(upsert,))
    finally:
        conn.close()


def new_topic() -> str:
    return f"auth-{uuid.uuid4().hex[:8]}"
