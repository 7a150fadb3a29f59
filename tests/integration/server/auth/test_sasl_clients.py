"""Real clients over TCP: confluent-kafka (librdkafka), kafka-python and Exactly's own client
authenticate with SASL/PLAIN and SASL/SCRAM, over plain TCP and over TLS."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CKProducer

from exactly.client import Consumer, Producer, TransactionSession
from exactly.client.errors import AuthenticationError
from tests.integration.server.auth.conftest import alter_scram, hostport, new_topic

pytestmark = pytest.mark.timeout(120)


def ck_config(broker, listener, **extra):
    host, port = hostport(broker, listener)
    return {"bootstrap.servers": f"{host}:{port}", **extra}


def ck_roundtrip(config: dict[str, str], values: list[bytes] | None = None) -> list[bytes]:
    """Produce `values` (default v0..v4) to a new one-partition topic, read them back."""
    topic = new_topic()
    values = values if values is not None else [f"v{i}".encode() for i in range(5)]
    producer = CKProducer({**config, "linger.ms": 50})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = CKConsumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    return got


def test_confluent_scram_sha512_over_sasl_ssl(secure_broker, certs):
    config = ck_config(secure_broker, "SASL_SSL", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol", "sasl.password": "carol-secret",
        "ssl.ca.location": str(certs.ca)})
    assert ck_roundtrip(config) == [f"v{i}".encode() for i in range(5)]


def test_confluent_large_batches_over_sasl_ssl(secure_broker, certs):
    """Produce requests of about a megabyte through TLS: the broker reads frames larger than
    its receive buffer in place, in pieces as TLS hands them over."""
    config = ck_config(secure_broker, "SASL_SSL", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol", "sasl.password": "carol-secret",
        "ssl.ca.location": str(certs.ca)})
    values = [os.urandom(150_000) for _ in range(20)]
    assert ck_roundtrip(config, values) == values


def test_confluent_plain_over_sasl_plaintext(secure_broker):
    config = ck_config(secure_broker, "SASL_PLAINTEXT", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": "alice-secret"})
    assert ck_roundtrip(config) == [f"v{i}".encode() for i in range(5)]


def test_confluent_over_ssl_with_a_client_certificate(secure_broker, certs):
    config = ck_config(secure_broker, "SSL", **{
        "security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(certs.client_cert),
        "ssl.key.location": str(certs.client_key)})
    assert ck_roundtrip(config) == [f"v{i}".encode() for i in range(5)]


def test_kafka_python_plain_over_sasl_plaintext(secure_broker):
    from kafka import KafkaConsumer, KafkaProducer

    host, port = hostport(secure_broker, "SASL_PLAINTEXT")
    common = {"bootstrap_servers": f"{host}:{port}", "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "bob",
              "sasl_plain_password": "bob-secret"}
    topic = new_topic()
    producer = KafkaProducer(**common)
    for i in range(3):
        producer.send(topic, f"kp{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                             **common)
    try:
        got = [m.value for _, m in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == [b"kp0", b"kp1", b"kp2"]


def test_kafka_python_scram_over_sasl_ssl(secure_broker, certs):
    from kafka import KafkaProducer

    host, port = hostport(secure_broker, "SASL_SSL")
    producer = KafkaProducer(bootstrap_servers=f"{host}:{port}", security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="carol",
                             sasl_plain_password="carol-secret", ssl_cafile=str(certs.ca))
    try:
        metadata = producer.send(new_topic(), b"scram").get(timeout=30)
        assert metadata.offset == 0
    finally:
        producer.close()


def _confluent_errors(config: dict[str, str]) -> list[str]:
    errors: list[str] = []
    producer = CKProducer({**config, "error_cb": lambda e: errors.append(e.str())})
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=5)
    producer.poll(1)
    return errors


def test_confluent_wrong_password_names_the_cause(secure_broker, certs):
    errors = _confluent_errors(ck_config(secure_broker, "SASL_SSL", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol", "sasl.password": "wrong", "ssl.ca.location": str(certs.ca)}))
    assert any("Authentication failed" in e and "SCRAM-SHA-512" in e for e in errors), errors


def test_confluent_unknown_mechanism_names_the_enabled_ones(secure_broker):
    errors = _confluent_errors(ck_config(secure_broker, "SASL_PLAINTEXT", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "carol", "sasl.password": "carol-secret"}))
    assert any("SCRAM-SHA-256" in e and "PLAIN" in e and "SCRAM-SHA-512" in e
               for e in errors), errors


def exactly_config(broker, listener, **extra):
    host, port = hostport(broker, listener)
    return {"bootstrap.servers": f"{host}:{port}", **extra}


def test_exactly_client_wrong_password_and_unknown_mechanism(secure_broker, certs):
    wrong = exactly_config(secure_broker, "SASL_SSL", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol", "sasl.password": "nope", "ssl.ca.location": str(certs.ca)})
    with pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED.*invalid credentials"):
        TransactionSession({**wrong, "transactional.id": "t-wrong"}).initialize()
    unknown = exactly_config(secure_broker, "SASL_PLAINTEXT", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "carol", "sasl.password": "carol-secret"})
    with pytest.raises(AuthenticationError,
                       match="refused SASL mechanism SCRAM-SHA-256.*enables: PLAIN, SCRAM-SHA-512"):
        TransactionSession({**unknown, "transactional.id": "t-unknown"}).initialize()


def test_exactly_client_untrusted_certificate_is_an_authentication_error(secure_broker):
    config = exactly_config(secure_broker, "SSL", **{"security.protocol": "SSL"})
    with pytest.raises(AuthenticationError, match="TLS handshake.*ssl.ca.location"):
        TransactionSession({**config, "transactional.id": "t-untrusted"}).initialize()


def test_exactly_session_producer_consumer_over_sasl_ssl_with_scram(secure_broker, certs):
    alter_scram(secure_broker, "dave", "dave-secret", "SCRAM-SHA-512")
    config = exactly_config(secure_broker, "SASL_SSL", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "dave", "sasl.password": "dave-secret",
        "ssl.ca.location": str(certs.ca)})
    topic = new_topic()
    session = TransactionSession({**config, "transactional.id": f"tx-{topic}"})
    producer = Producer(config, session=session)
    try:
        session.initialize()
        session.begin_transaction()
        for i in range(3):
            producer.send(topic, f"committed-{i}".encode())
        session.commit_transaction()
        session.begin_transaction()
        producer.send(topic, b"aborted")
        session.abort_transaction()
    finally:
        producer.close()
        session.close()
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        for _ in range(30):
            got += [r.value for r in consumer.poll(1000)]
            if len(got) >= 3:
                break
    finally:
        consumer.close()
    assert got == [b"committed-0", b"committed-1", b"committed-2"]
