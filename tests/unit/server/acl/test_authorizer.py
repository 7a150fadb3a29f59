"""The authorizer without a network: Kafka's matching rules, its store, its filters."""

from __future__ import annotations

import json

import pytest

from exactly.server.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclStore,
    AclStoreError,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_super_users,
)
from exactly.server.acl.model import validate_new_binding

TOPIC, GROUP, TXN, CLUSTER = (ResourceType.TOPIC, ResourceType.GROUP,
                              ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER)
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(rtype: ResourceType, name: str, principal: str, op: Operation,
        perm: Permission = ALLOW, pattern: PatternType = LIT, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern),
                      AccessControlEntry(principal, host, op, perm))


def authz(*bindings: AclBinding, **kw) -> Authorizer:
    a = Authorizer(**kw)
    a.create(bindings)
    return a


def test_nothing_allowed_without_acls_by_default():
    a = authz()
    assert not a.authorize(ALICE, HOST, Operation.READ, TOPIC, "t")


def test_allow_everyone_if_no_acl_found_applies_only_to_uncovered_resources():
    a = authz(acl(TOPIC, "guarded", BOB, Operation.READ), allow_everyone_if_no_acl_found=True)
    assert a.authorize(ALICE, HOST, Operation.READ, TOPIC, "open")
    assert a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "open")
    # an ACL for somebody else covers the resource: no more default allow
    assert not a.authorize(ALICE, HOST, Operation.READ, TOPIC, "guarded")
    assert a.authorize(BOB, HOST, Operation.READ, TOPIC, "guarded")


def test_literal_match_is_exact():
    a = authz(acl(TOPIC, "orders", ALICE, Operation.READ))
    assert a.authorize(ALICE, HOST, Operation.READ, TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Operation.READ, TOPIC, "orders2")
    assert not a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "orders")
    assert not a.authorize(BOB, HOST, Operation.READ, TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Operation.READ, GROUP, "orders")


def test_wildcard_resource_principal_and_host():
    a = authz(acl(TOPIC, "*", "User:*", Operation.READ))
    assert a.authorize(ALICE, HOST, Operation.READ, TOPIC, "anything")
    assert a.authorize("User:ANONYMOUS", "::1", Operation.READ, TOPIC, "x")
    assert not a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "anything")


def test_host_must_match_unless_wildcard():
    a = authz(acl(TOPIC, "t", ALICE, Operation.READ, host="10.0.0.1"))
    assert a.authorize(ALICE, "10.0.0.1", Operation.READ, TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.2", Operation.READ, TOPIC, "t")


def test_prefixed():
    a = authz(acl(TOPIC, "sales-", ALICE, Operation.WRITE, pattern=PRE))
    assert a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "sales-eu")
    assert a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "sales-")
    assert not a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "sales")
    assert not a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "xsales-eu")


def test_deny_wins_over_allow_from_any_pattern():
    a = authz(acl(TOPIC, "*", ALICE, Operation.ALL),
              acl(TOPIC, "secret-", ALICE, Operation.READ, DENY, PRE))
    assert a.authorize(ALICE, HOST, Operation.READ, TOPIC, "public")
    assert not a.authorize(ALICE, HOST, Operation.READ, TOPIC, "secret-plans")
    assert a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "secret-plans")  # deny is for READ


def test_deny_all_denies_every_operation_and_deny_for_wildcard_principal():
    a = authz(acl(TOPIC, "t", ALICE, Operation.ALL),
              acl(TOPIC, "t", "User:*", Operation.ALL, DENY, host="10.9.9.9"))
    assert a.authorize(ALICE, HOST, Operation.DELETE, TOPIC, "t")
    assert not a.authorize(ALICE, "10.9.9.9", Operation.DESCRIBE, TOPIC, "t")


@pytest.mark.parametrize("granted", [Operation.READ, Operation.WRITE, Operation.DELETE,
                                     Operation.ALTER])
def test_operations_implying_describe(granted):
    a = authz(acl(TOPIC, "t", ALICE, granted))
    assert a.authorize(ALICE, HOST, Operation.DESCRIBE, TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Operation.DESCRIBE_CONFIGS, TOPIC, "t")


def test_alter_configs_implies_describe_configs_but_not_the_reverse():
    a = authz(acl(TOPIC, "t", ALICE, Operation.ALTER_CONFIGS))
    assert a.authorize(ALICE, HOST, Operation.DESCRIBE_CONFIGS, TOPIC, "t")
    b = authz(acl(TOPIC, "t", ALICE, Operation.DESCRIBE_CONFIGS))
    assert not b.authorize(ALICE, HOST, Operation.ALTER_CONFIGS, TOPIC, "t")


def test_implied_describe_is_still_denied_by_a_describe_deny():
    a = authz(acl(TOPIC, "t", ALICE, Operation.READ), acl(TOPIC, "t", ALICE, Operation.DESCRIBE, DENY))
    assert not a.authorize(ALICE, HOST, Operation.DESCRIBE, TOPIC, "t")
    assert a.authorize(ALICE, HOST, Operation.READ, TOPIC, "t")


def test_deny_read_does_not_deny_describe():
    a = authz(acl(TOPIC, "t", ALICE, Operation.ALL), acl(TOPIC, "t", ALICE, Operation.READ, DENY))
    assert a.authorize(ALICE, HOST, Operation.DESCRIBE, TOPIC, "t")


def test_two_phase_commit_is_its_own_operation():
    a = authz(acl(TXN, "app-", ALICE, Operation.WRITE, pattern=PRE))
    assert a.authorize(ALICE, HOST, Operation.WRITE, TXN, "app-1")
    assert not a.authorize(ALICE, HOST, Operation.TWO_PHASE_COMMIT, TXN, "app-1")
    a.create([acl(TXN, "app-1", ALICE, Operation.TWO_PHASE_COMMIT)])
    assert a.authorize(ALICE, HOST, Operation.TWO_PHASE_COMMIT, TXN, "app-1")
    assert not a.authorize(ALICE, HOST, Operation.TWO_PHASE_COMMIT, TXN, "app-2")


def test_super_users_bypass_everything_even_deny():
    a = authz(acl(CLUSTER, "kafka-cluster", "User:root", Operation.ALL, DENY),
              super_users=parse_super_users("User:root; User:ops"))
    assert a.authorize("User:root", HOST, Operation.ALTER, CLUSTER, "kafka-cluster")
    assert a.authorize("User:ops", HOST, Operation.TWO_PHASE_COMMIT, TXN, "x")
    assert not a.authorize(ALICE, HOST, Operation.ALTER, CLUSTER, "kafka-cluster")


def test_super_users_must_be_principals():
    with pytest.raises(ValueError, match="Type:name"):
        parse_super_users("root")
    assert parse_super_users("") == frozenset()


def test_authorize_any_for_idempotent_producers():
    assert authz(acl(TOPIC, "t", ALICE, Operation.WRITE)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC)
    assert not authz(acl(TOPIC, "t", ALICE, Operation.READ)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC)
    # a literal deny on the same topic cancels the allow; a wildcard deny cancels all
    assert not authz(acl(TOPIC, "t", ALICE, Operation.WRITE),
                     acl(TOPIC, "t", ALICE, Operation.WRITE, DENY)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC)
    assert not authz(acl(TOPIC, "p-", ALICE, Operation.WRITE, pattern=PRE),
                     acl(TOPIC, "*", ALICE, Operation.ALL, DENY)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC)
    assert not authz(acl(TOPIC, "p-x", ALICE, Operation.WRITE),
                     acl(TOPIC, "p-", ALICE, Operation.WRITE, DENY, PRE)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC)
    assert authz(acl(TOPIC, "q", ALICE, Operation.WRITE),
                 acl(TOPIC, "p-", ALICE, Operation.WRITE, DENY, PRE)).authorize_any(
        ALICE, HOST, Operation.WRITE, TOPIC)


def test_authorized_operations_bits():
    a = authz(acl(GROUP, "g", ALICE, Operation.READ))
    bits = a.authorized_operations(ALICE, HOST, GROUP, "g")
    assert bits == (1 << Operation.READ) | (1 << Operation.DESCRIBE)


def f(rtype=ResourceType.ANY, name=None, pattern=PatternType.ANY, principal=None, host=None,
      op=Operation.ANY, perm=Permission.ANY) -> AclBindingFilter:
    return AclBindingFilter(rtype, name, pattern, principal, host, op, perm)


def test_filters_as_kafka():
    lit = acl(TOPIC, "orders", ALICE, Operation.READ)
    star = acl(TOPIC, "*", BOB, Operation.WRITE)
    pre = acl(TOPIC, "ord", ALICE, Operation.WRITE, DENY, PRE)
    grp = acl(GROUP, "orders", ALICE, Operation.READ)
    a = authz(lit, star, pre, grp)
    assert set(a.acls(f())) == {lit, star, pre, grp}
    assert set(a.acls(f(TOPIC))) == {lit, star, pre}
    # ANY pattern type: exact name, any type
    assert set(a.acls(f(name="orders"))) == {lit, grp}
    assert set(a.acls(f(name="ord"))) == {pre}
    # MATCH: every pattern that applies to a resource named so
    assert set(a.acls(f(TOPIC, "orders", PatternType.MATCH))) == {lit, star, pre}
    # LITERAL / PREFIXED: that type, exact name
    assert set(a.acls(f(TOPIC, "orders", LIT))) == {lit}
    assert set(a.acls(f(TOPIC, None, PRE))) == {pre}
    assert set(a.acls(f(TOPIC, "orders", PRE))) == set()
    # entry fields: exact, no wildcard expansion
    assert set(a.acls(f(principal=ALICE))) == {lit, pre, grp}
    assert set(a.acls(f(principal="User:*"))) == set()
    assert set(a.acls(f(op=Operation.WRITE, perm=DENY))) == {pre}
    assert set(a.acls(f(host="*"))) == {lit, star, pre, grp}
    assert set(a.acls(f(host="10.0.0.1"))) == set()


def test_delete_by_filter():
    a = authz(acl(TOPIC, "a", ALICE, Operation.READ), acl(TOPIC, "b", ALICE, Operation.READ),
              acl(GROUP, "g", ALICE, Operation.READ))
    gone = a.delete(f(TOPIC))
    assert {b.pattern.name for b in gone} == {"a", "b"}
    assert [b.pattern.resource_type for b in a.acls()] == [GROUP]
    assert not a.authorize(ALICE, HOST, Operation.READ, TOPIC, "a")
    assert a.delete(f(TOPIC)) == []


def test_validate_new_binding():
    ok = acl(TOPIC, "t", ALICE, Operation.READ)
    assert validate_new_binding(ok) is None
    assert "pattern type" in validate_new_binding(acl(TOPIC, "t", ALICE, Operation.READ,
                                                      pattern=PatternType.MATCH))
    assert "operation" in validate_new_binding(acl(TOPIC, "t", ALICE, Operation.ANY))
    assert "permission" in validate_new_binding(acl(TOPIC, "t", ALICE, Operation.READ,
                                                    Permission.ANY))
    assert "principal" in validate_new_binding(acl(TOPIC, "t", "alice", Operation.READ))
    assert "empty" in validate_new_binding(acl(TOPIC, "", ALICE, Operation.READ))
    assert "kafka-cluster" in validate_new_binding(acl(CLUSTER, "c", ALICE, Operation.ALTER))
    assert "resource type" in validate_new_binding(acl(ResourceType.ANY, "t", ALICE,
                                                       Operation.READ))


def test_store_round_trip_and_reload(tmp_path):
    bindings = [acl(TOPIC, "t", ALICE, Operation.READ),
                acl(TXN, "tx-", BOB, Operation.TWO_PHASE_COMMIT, pattern=PRE),
                acl(CLUSTER, "kafka-cluster", BOB, Operation.IDEMPOTENT_WRITE, DENY, host="1.2.3.4")]
    a = Authorizer(AclStore(tmp_path))
    a.create(bindings)
    a.create(bindings[:1])  # creating an existing ACL again changes nothing
    again = Authorizer(AclStore(tmp_path))
    assert set(again.acls()) == set(bindings)
    assert again.authorize(BOB, HOST, Operation.TWO_PHASE_COMMIT, TXN, "tx-9")
    again.delete(f(principal=BOB))
    assert Authorizer(AclStore(tmp_path)).acls() == [bindings[0]]
    assert not list(tmp_path.glob("*.tmp"))


def test_damaged_store_is_an_error_that_says_what_to_do(tmp_path):
    (tmp_path / "acls.json").write_text("{not json")
    with pytest.raises(AclStoreError, match="acls.json.*remove it"):
        Authorizer(AclStore(tmp_path))
    (tmp_path / "acls.json").write_text(json.dumps({"version": 1, "acls": [{"x": 1}]}))
    with pytest.raises(AclStoreError):
        Authorizer(AclStore(tmp_path))
