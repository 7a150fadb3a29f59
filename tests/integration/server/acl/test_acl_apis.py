"""CreateAcls / DescribeAcls / DeleteAcls over TCP with confluent-kafka's AdminClient (a real
client) and raw requests: Kafka's filter semantics, validation, persistence, SECURITY_DISABLED
without an authorizer, and allow.everyone.if.no.acl.found."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.server.acl import wire
from tests.rawclient import RawConnection

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


@pytest.fixture(scope="module")
def super_broker(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"authorizer.class.name": STANDARD, "log.flush.policy": "os",
                                  "super.users": "User:admin;User:ANONYMOUS"}) as b:
        yield b


@pytest.fixture
def admin(super_broker) -> Iterator[AdminClient]:
    a = AdminClient({"bootstrap.servers": super_broker.bootstrap})
    yield a
    for f in a.delete_acls([ANY_FILTER]).values():
        f.result(20)


def acl(rtype, name, principal, op, perm=AclPermissionType.ALLOW,
        pattern=ResourcePatternType.LITERAL, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def describe(admin, f=ANY_FILTER) -> set[AclBinding]:
    return set(admin.describe_acls(f).result(20))


def test_create_describe_delete_with_confluent(admin):
    lit = acl(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ)
    star = acl(ResourceType.TOPIC, "*", "User:bob", AclOperation.WRITE)
    pre = acl(ResourceType.TOPIC, "ord", "User:alice", AclOperation.WRITE,
              AclPermissionType.DENY, ResourcePatternType.PREFIXED, host="10.0.0.1")
    grp = acl(ResourceType.GROUP, "orders", "User:alice", AclOperation.READ)
    cluster = acl(ResourceType.BROKER, "kafka-cluster", "User:ops", AclOperation.ALTER)
    for f in admin.create_acls([lit, star, pre, grp, cluster]).values():
        assert f.result(20) is None
    assert describe(admin) == {lit, star, pre, grp, cluster}

    def flt(rtype=ResourceType.ANY, name=None, pattern=ResourcePatternType.ANY, principal=None,
            op=AclOperation.ANY):
        return AclBindingFilter(rtype, name, pattern, principal, None, op, AclPermissionType.ANY)

    assert describe(admin, flt(ResourceType.TOPIC)) == {lit, star, pre}
    assert describe(admin, flt(name="orders")) == {lit, grp}
    assert describe(admin, flt(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH)) == {
        lit, star, pre}
    assert describe(admin, flt(ResourceType.TOPIC, None, ResourcePatternType.PREFIXED)) == {pre}
    assert describe(admin, flt(principal="User:alice", op=AclOperation.READ)) == {lit, grp}

    deleted = admin.delete_acls([flt(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH)])
    assert set(next(iter(deleted.values())).result(20)) == {lit, star, pre}
    assert describe(admin) == {grp, cluster}


def test_creating_an_existing_acl_again_is_fine(admin):
    one = acl(ResourceType.TRANSACTIONAL_ID, "app-", "User:alice", AclOperation.WRITE,
              pattern=ResourcePatternType.PREFIXED)
    for _ in range(2):
        for f in admin.create_acls([one]).values():
            assert f.result(20) is None
    assert describe(admin) == {one}


def test_invalid_creations_are_refused_one_by_one(super_broker, admin):
    conn = RawConnection(super_broker.host, super_broker.port)
    try:
        codes = wire.create_acls(
            conn,
            (wire.TOPIC, "ok", wire.LITERAL, "User:alice", "*", 3, wire.ALLOW),
            (wire.CLUSTER, "other", wire.LITERAL, "User:alice", "*", 7, wire.ALLOW),
            (wire.TOPIC, "t", 2, "User:alice", "*", 3, wire.ALLOW),  # MATCH is for filters
            (wire.TOPIC, "t", wire.LITERAL, "alice", "*", 3, wire.ALLOW),  # not Type:name
            (wire.TOPIC, "t", wire.LITERAL, "User:alice", "*", 1, wire.ALLOW),  # ANY op
            (wire.TOPIC, "", wire.LITERAL, "User:alice", "*", 3, wire.ALLOW),
            (wire.TXN, "tx", wire.LITERAL, "User:alice", "*", 15, wire.ALLOW),  # TWO_PHASE_COMMIT
        )
        assert codes == [ErrorCode.none, *[ErrorCode.invalid_request] * 5, ErrorCode.none]
        described = wire.describe_acls(conn, wire.TXN)
        assert described.error_code == ErrorCode.none
        assert [(r.resource_name, [a.operation for a in r.acls]) for r in described.resources] == [
            ("tx", [15])]
        assert wire.describe_acls(conn, rtype=0).error_code == ErrorCode.invalid_request
    finally:
        conn.close()


def test_acls_survive_a_restart(tmp_path):
    settings = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS",
                "log.flush.policy": "os"}
    with EmbeddedBroker(data_dir=tmp_path / "data", settings=settings) as b:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        one = acl(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ)
        for f in a.create_acls([one]).values():
            f.result(20)
        b.restart(kill=True)
        again = AdminClient({"bootstrap.servers": b.bootstrap})
        assert describe(again) == {one}


def test_without_an_authorizer_acl_apis_answer_security_disabled():
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as b:
        conn = RawConnection(b.host, b.port)
        try:
            assert wire.describe_acls(conn).error_code == ErrorCode.security_disabled
            assert wire.create_acls(conn, (wire.TOPIC, "t", wire.LITERAL, "User:a", "*", 3,
                                           wire.ALLOW)) == [ErrorCode.security_disabled]
            assert (wire.delete_acls(conn).filter_results[0].error_code
                    == ErrorCode.security_disabled)
            # and everything else is allowed, as before
            assert wire.create_topic(conn, "free", validate_only=False) == ErrorCode.none
            assert wire.produce(conn, "free") == ErrorCode.none
        finally:
            conn.close()


def test_allow_everyone_if_no_acl_found(tmp_path):
    settings = {"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true",
                "log.flush.policy": "os"}
    with EmbeddedBroker(settings=settings) as b:
        conn = RawConnection(b.host, b.port)
        try:
            # no ACL anywhere: everything goes, ACL changes included (the cluster is uncovered)
            assert wire.create_topic(conn, "open", validate_only=False) == ErrorCode.none
            assert wire.create_topic(conn, "guarded", validate_only=False) == ErrorCode.none
            assert wire.create_acls(conn, (wire.TOPIC, "guarded", wire.LITERAL, "User:alice",
                                           "*", 4, wire.ALLOW)) == [ErrorCode.none]
            assert wire.produce(conn, "open") == ErrorCode.none
            # an ACL covers "guarded" now, and it is not ANONYMOUS's
            assert wire.produce(conn, "guarded") == ErrorCode.topic_authorization_failed
        finally:
            conn.close()


def test_bad_authorizer_and_super_users_values_are_config_errors():
    from exactly.server.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig.from_sources(None, {"authorizer.class.name": "com.example.Mine"})
    with pytest.raises(ConfigError, match="super.users"):
        BrokerConfig.from_sources(None, {"super.users": "admin"})
    c = BrokerConfig.from_sources(None, {"authorizer.class.name": STANDARD,
                                     "super.users": "User:a;User:b"})
    assert c["super.users"] == "User:a;User:b"
    assert c["allow.everyone.if.no.acl.found"] is False
