"""`exactly acls ...` and `exactly users ...` as subprocesses against a real broker: ACLs added,
listed (with filters) and removed, TwoPhaseCommit included; a SCRAM credential created by the CLI
(salted client-side) lets confluent-kafka authenticate, and is gone after remove-scram. The admin
itself logs in over SASL with --command-config, as Kafka's tools do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly, table

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def acl_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"authorizer.class.name": AUTHORIZER,
                                  "super.users": "User:ANONYMOUS"}) as b:
        yield b


def _acls(bootstrap: str, *args: str) -> list[tuple[str, ...]]:
    rows = table(exactly("acls", "list", "--bootstrap-server", bootstrap, *args).stdout)
    return sorted((r["ResourceType"], r["ResourceName"], r["PatternType"], r["Principal"],
                   r["Operation"], r["Permission"]) for r in rows)


def test_add_list_remove_acls(acl_broker):
    bs = ("--bootstrap-server", acl_broker.bootstrap)
    out = exactly("acls", "add", *bs, "--allow-principal", "User:alice", "--operation", "Write",
                  "--operation", "TwoPhaseCommit", "--transactional-id", "etl-").stdout
    assert out.startswith("Added 2 ACL(s)")
    exactly("acls", "add", *bs, "--deny-principal", "User:bob", "--operation", "Read",
            "--topic", "orders", "--resource-pattern-type", "prefixed")
    exactly("acls", "add", *bs, "--allow-principal", "User:carol", "--operation",
            "IdempotentWrite", "--cluster")

    assert _acls(acl_broker.bootstrap) == [
        ("CLUSTER", "kafka-cluster", "LITERAL", "User:carol", "IdempotentWrite", "ALLOW"),
        ("TOPIC", "orders", "PREFIXED", "User:bob", "Read", "DENY"),
        ("TRANSACTIONAL_ID", "etl-", "LITERAL", "User:alice", "TwoPhaseCommit", "ALLOW"),
        ("TRANSACTIONAL_ID", "etl-", "LITERAL", "User:alice", "Write", "ALLOW"),
    ]
    # match: the ACLs that apply to the topic orders-eu (the prefixed one)
    assert _acls(acl_broker.bootstrap, "--topic", "orders-eu", "--resource-pattern-type",
                 "match") == [("TOPIC", "orders", "PREFIXED", "User:bob", "Read", "DENY")]
    assert [a[3] for a in _acls(acl_broker.bootstrap, "--principal", "User:alice")] == [
        "User:alice", "User:alice"]

    out = exactly("acls", "remove", *bs, "--transactional-id", "etl-", "--operation",
                  "Write").stdout
    assert out.startswith("Removed 1 ACL(s)")
    assert ("TRANSACTIONAL_ID", "etl-", "LITERAL", "User:alice", "TwoPhaseCommit",
            "ALLOW") in _acls(acl_broker.bootstrap)
    exactly("acls", "remove", *bs, "--transactional-id", "etl-")
    exactly("acls", "remove", *bs, "--topic", "orders", "--resource-pattern-type", "prefixed")
    exactly("acls", "remove", *bs, "--cluster")
    assert _acls(acl_broker.bootstrap) == []


def test_bad_acl_arguments_are_refused(acl_broker):
    bs = ("--bootstrap-server", acl_broker.bootstrap)
    proc = exactly("acls", "add", *bs, "--allow-principal", "User:alice", "--operation", "Fly",
                   "--topic", "t", check=False)
    assert proc.returncode == 2 and "TwoPhaseCommit" in proc.stderr
    proc = exactly("acls", "add", *bs, "--allow-principal", "alice", "--operation", "Read",
                   "--topic", "t", check=False)
    assert proc.returncode == 2 and "User:alice" in proc.stderr
    proc = exactly("acls", "add", *bs, "--allow-principal", "User:alice", "--operation", "Read",
                   check=False)
    assert proc.returncode == 2 and "resource" in proc.stderr


def test_acls_need_authorization(tmp_path):
    # Without super.users, ANONYMOUS may not alter the cluster's ACLs.
    with EmbeddedBroker(settings={"authorizer.class.name": AUTHORIZER}) as b:
        proc = exactly("acls", "add", "--bootstrap-server", b.bootstrap, "--allow-principal",
                       "User:alice", "--operation", "Read", "--topic", "t", check=False)
        assert proc.returncode == 1 and "AUTHORIZATION_FAILED" in proc.stderr


# -- SCRAM users ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                                  "sasl.plain.users": "admin:admin-secret"}) as b:
        yield b


@pytest.fixture
def admin_config(tmp_path) -> Path:
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";\n')
    return path


def _can_log_in(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": password})
    try:
        admin.list_topics(timeout=3)
        return True
    except KafkaException:
        return False


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_add_and_remove_scram_users(sasl_broker, admin_config, mechanism):
    bs = ("--bootstrap-server", sasl_broker.bootstrap, "--command-config", str(admin_config))
    user = f"dave-{mechanism[-3:]}"
    exactly("users", "add-scram", *bs, "--user", user, "--mechanism", mechanism,
            "--password", "s3cret", "--iterations", "8192")
    rows = table(exactly("users", "describe", *bs, "--user", user).stdout)
    assert rows == [{"User": user, "Mechanism": mechanism, "Iterations": "8192"}]
    assert _can_log_in(sasl_broker.bootstrap, mechanism, user, "s3cret")
    assert not _can_log_in(sasl_broker.bootstrap, mechanism, user, "wrong")

    exactly("users", "remove-scram", *bs, "--user", user, "--mechanism", mechanism)
    assert all(r["User"] != user for r in table(exactly("users", "describe", *bs).stdout))
    assert not _can_log_in(sasl_broker.bootstrap, mechanism, user, "s3cret")


def test_users_without_credentials_are_refused(sasl_broker):
    proc = exactly("users", "describe", "--bootstrap-server", sasl_broker.bootstrap, check=False,
                   timeout=90)
    assert proc.returncode != 0
