"""The authorization matrix with authenticated principals: SASL/PLAIN users on a SASL_PLAINTEXT
listener, User:admin a super user, User:ANONYMOUS on the PLAINTEXT listener."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from exactly.client import Producer as ExactlyProducer
from exactly.client import TransactionFatalError, TransactionSession
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.server.acl import wire
from tests.rawclient import RawConnection

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.plain.users": ",".join(f"{u}:{p}" for u, p in USERS.items()),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "transaction.two.phase.commit.enable": "true",
        "log.flush.policy": "os"}
    with EmbeddedBroker(settings=settings) as b:
        admin = AdminClient(ck(b, "admin"))
        for f in admin.create_topics([NewTopic("alice-topic", 1, 1),
                                      NewTopic("shared", 1, 1)]).values():
            f.result(20)
        acls = [
            AclBinding(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice",
                       "*", AclOperation.ALL, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:*", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:bob",
                       "*", AclOperation.WRITE, AclPermissionType.DENY),
            AclBinding(ResourceType.TRANSACTIONAL_ID, "app", ResourcePatternType.LITERAL,
                       "User:*", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
        ]
        for f in admin.create_acls(acls).values():
            f.result(20)
        # ANONYMOUS may not change ACLs; admin may (librdkafka lacks TWO_PHASE_COMMIT: Exactly's
        # Admin client creates that one)
        conn = RawConnection(*b.listener_addresses["PLAINTEXT"])
        try:
            assert wire.create_acls(conn, (wire.TXN, "app", wire.LITERAL, "User:alice", "*", 15,
                                           wire.ALLOW)) == [ErrorCode.cluster_authorization_failed]
        finally:
            conn.close()
        _create_2pc_acl_as_admin(b)
        yield b


def _create_2pc_acl_as_admin(b: EmbeddedBroker) -> None:
    """TWO_PHASE_COMMIT for alice, created by User:admin with Exactly's Admin over SASL."""
    from exactly.client import admin as a

    client = a.Admin(exactly_cfg(b, "admin"))
    try:
        client.create_acls([a.AclBinding(
            a.ResourceType.TRANSACTIONAL_ID, "app", a.PatternType.LITERAL, "User:alice", "*",
            a.AclOperation.TWO_PHASE_COMMIT, a.AclPermissionType.ALLOW)])
    finally:
        client.close()


def ck(b: EmbeddedBroker, user: str) -> dict[str, str]:
    return {"bootstrap.servers": b.address("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


def exactly_cfg(b: EmbeddedBroker, user: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": b.address("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], **extra}


def _produce(b: EmbeddedBroker, user: str, topic: str) -> int:
    """The error code of one record's produce (0: written). librdkafka reports a refusal in the
    delivery report, or raises it from produce() itself when its metadata already marked the
    topic unauthorized (its first Metadata request can answer before produce() is called)."""
    errors: list[KafkaError] = []
    p = Producer({**ck(b, user), "message.timeout.ms": 10000})
    try:
        p.produce(topic, b"x", on_delivery=lambda err, _m: err and errors.append(err))
    except KafkaException as exc:
        return int(exc.args[0].code())
    assert p.flush(30) == 0
    return errors[0].code() if errors else 0


@pytest.mark.parametrize(("user", "topic", "expected"), [
    ("alice", "alice-topic", 0),
    ("bob", "alice-topic", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ("alice", "shared", 0),  # User:* allows
    ("bob", "shared", KafkaError.TOPIC_AUTHORIZATION_FAILED),  # a DENY for bob wins
    ("admin", "alice-topic", 0),  # super user
])
def test_produce_per_principal(broker, user, topic, expected):
    assert _produce(broker, user, topic) == expected


def test_anonymous_on_plaintext_gets_nothing(broker):
    conn = RawConnection(*broker.listener_addresses["PLAINTEXT"])
    try:
        assert wire.produce(conn, "shared") == ErrorCode.none  # User:* covers ANONYMOUS too
        assert wire.produce(conn, "alice-topic") == ErrorCode.topic_authorization_failed
        assert wire.describe_acls(conn).error_code == ErrorCode.cluster_authorization_failed
    finally:
        conn.close()


@pytest.mark.parametrize(("user", "allowed"), [("alice", True), ("bob", False), ("admin", True)])
def test_enable_2pc_needs_two_phase_commit(broker, user, allowed):
    session = TransactionSession(exactly_cfg(broker, user, **{
        "transactional.id": "app", "transaction.two.phase.commit.enable": True}))
    try:
        if not allowed:
            with pytest.raises(TransactionFatalError) as raised:
                session.initialize()
            assert raised.value.code == ErrorCode.transactional_id_authorization_failed
            return
        session.initialize()
        session.begin_transaction()
        producer = ExactlyProducer(exactly_cfg(broker, user), session=session)
        producer.send("shared", "v", key="k")
        session.complete_transaction(session.prepare_transaction())
        producer.close()
    finally:
        session.close()


def test_plain_transaction_needs_only_write(broker):
    session = TransactionSession(exactly_cfg(broker, "bob", **{"transactional.id": "app"}))
    try:
        session.initialize()  # WRITE via User:*; no 2PC asked
    finally:
        session.close()
