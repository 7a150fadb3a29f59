"""The authorizer: Kafka's StandardAuthorizer rules, sans-IO apart from its store.

    authorizer.authorize("User:alice", "10.0.0.5", Operation.WRITE, ResourceType.TOPIC, "orders")

Rules, as Kafka applies them: a super user may do anything. Otherwise the ACLs whose pattern
covers the resource (LITERAL of the name, LITERAL "*", PREFIXED of a prefix of the name) and
whose principal ("User:*" too) and host ("*" too) match are considered: any DENY for the
operation (or ALL) denies; else any ALLOW for the operation, ALL, or an operation that implies it
(READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows. When
no ACL at all covers the resource, `allow.everyone.if.no.acl.found` decides.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from exactly.server.acl.model import (
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    host_matches,
    principal_matches,
)
from exactly.server.acl.store import AclStore

log = logging.getLogger("exactly.authorizer")

AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",  # Kafka 3.x's ZooKeeper-era name: same rules here
)


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users` as Kafka writes it: principals separated by semicolons."""
    users = [u.strip() for u in text.split(";") if u.strip()]
    for u in users:
        if ":" not in u:
            raise ValueError(f"{u!r} is not a principal: write Type:name, e.g. User:admin")
    return frozenset(users)


class Authorizer:
    def __init__(self, store: AclStore | None = None, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: set[AclBinding] = set()
        # index: (resource type, literal name) -> bindings; prefixed ones per type
        self._literal: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        self._prefixed: dict[ResourceType, set[AclBinding]] = {}
        if store is not None:
            for binding in store.load():
                self._index(binding)

    # -- decisions ------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        found = False
        allowed = False
        for binding in self._covering(resource_type, name):
            found = True
            entry = binding.entry
            if not principal_matches(entry.principal, principal) or not host_matches(entry.host, host):
                continue
            if entry.permission == Permission.DENY:
                if entry.operation in (operation, Operation.ALL):
                    return False
            elif entry.permission == Permission.ALLOW and not allowed:
                allowed = (entry.operation in (operation, Operation.ALL)
                           or entry.operation in IMPLIED_BY.get(operation, ()))
        if not found:
            return self.allow_everyone_if_no_acl_found
        return allowed

    def authorize_any(self, principal: str, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """May the principal do `operation` on at least one resource of the type (Kafka's
        authorizeByResourceType, used for idempotent producers without IDEMPOTENT_WRITE)?"""
        if principal in self.super_users:
            return True
        of_type = [b for b in self._bindings if b.pattern.resource_type == resource_type]
        if not of_type:
            return self.allow_everyone_if_no_acl_found

        def applies(b: AclBinding) -> bool:
            e = b.entry
            return (principal_matches(e.principal, principal) and host_matches(e.host, host)
                    and e.operation in (operation, Operation.ALL))

        denies = [b.pattern for b in of_type if b.entry.permission == Permission.DENY and applies(b)]
        if any(p.pattern_type == PatternType.LITERAL and p.name == WILDCARD for p in denies):
            return False
        for b in of_type:
            if b.entry.permission != Permission.ALLOW or not applies(b):
                continue
            allow = b.pattern
            if allow.pattern_type == PatternType.LITERAL and allow.name == WILDCARD:
                return True
            # The allowed resource(s) stay allowed unless a deny covers the whole allow pattern.
            if not any(_covers(deny, allow) for deny in denies):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """Kafka's authorized-operations bit field (1 << operation code) for one resource."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def _covering(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        yield from self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            yield from self._literal.get((resource_type, WILDCARD), ())
        for b in self._prefixed.get(resource_type, ()):
            if name.startswith(b.pattern.name):
                yield b

    # -- changes --------------------------------------------------------------------------

    def acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        return sorted(b for b in self._bindings if acl_filter is None or acl_filter.matches(b))

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACLs (an existing one is kept as is) and persist them before returning."""
        new = [b for b in bindings if b not in self._bindings]
        if not new:
            return
        for b in new:
            self._index(b)
        try:
            self._save()
        except OSError:
            for b in new:
                self._unindex(b)
            raise
        for b in new:
            log.info("ACL added: %s", b)

    def delete(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove and return the ACLs the filter matches, persisted before returning."""
        gone = self.acls(acl_filter)
        if not gone:
            return []
        for b in gone:
            self._unindex(b)
        try:
            self._save()
        except OSError:
            for b in gone:
                self._index(b)
            raise
        for b in gone:
            log.info("ACL removed: %s", b)
        return gone

    def _save(self) -> None:
        if self.store is not None:
            self.store.save(self._bindings)

    def _index(self, b: AclBinding) -> None:
        self._bindings.add(b)
        p = b.pattern
        if p.pattern_type == PatternType.PREFIXED:
            self._prefixed.setdefault(p.resource_type, set()).add(b)
        else:
            self._literal.setdefault((p.resource_type, p.name), set()).add(b)

    def _unindex(self, b: AclBinding) -> None:
        self._bindings.discard(b)
        p = b.pattern
        if p.pattern_type == PatternType.PREFIXED:
            self._prefixed.get(p.resource_type, set()).discard(b)
        else:
            bucket = self._literal.get((p.resource_type, p.name))
            if bucket is not None:
                bucket.discard(b)
                if not bucket:
                    del self._literal[(p.resource_type, p.name)]


def _covers(deny: ResourcePattern, allow: ResourcePattern) -> bool:
    """Does the DENY pattern cover every resource the ALLOW pattern names?"""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.name == WILDCARD or (allow.pattern_type == PatternType.LITERAL
                                         and deny.name == allow.name)
    return allow.name.startswith(deny.name)
