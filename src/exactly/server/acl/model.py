"""Kafka's ACL model: resource patterns, access control entries, bindings and binding filters,
with Kafka's wire codes (org.apache.kafka.common.acl / .resource) and its matching rules."""

from __future__ import annotations

from dataclasses import dataclass

# The wire codes; Operation and Permission are the authorizer's short names for them.
from exactly.protocol.acls import AclOperation as Operation
from exactly.protocol.acls import AclPermissionType as Permission
from exactly.protocol.acls import PatternType, ResourceType

CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"  # a LITERAL resource name, a host, or "User:*" in a principal: matches any


# An ALLOW for the key also allows these (Kafka's implied operations). DENY implies nothing.
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}

# What authorized_operations reports per resource type (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                           Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE,
                                    Operation.TWO_PHASE_COMMIT),
}


def principal_matches(acl_principal: str, principal: str) -> bool:
    """"User:alice" matches itself; "User:*" matches every principal of type User."""
    if acl_principal == principal:
        return True
    kind, sep, name = acl_principal.partition(":")
    return bool(sep) and name == WILDCARD and principal.partition(":")[0] == kind


def host_matches(acl_host: str, host: str) -> bool:
    return acl_host == WILDCARD or acl_host == host


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Does this (LITERAL or PREFIXED) pattern cover the resource `name`?"""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return False


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def to_json(self) -> dict[str, object]:
        return {"resource_type": self.pattern.resource_type.name,
                "resource_name": self.pattern.name,
                "pattern_type": self.pattern.pattern_type.name,
                "principal": self.entry.principal, "host": self.entry.host,
                "operation": self.entry.operation.name,
                "permission": self.entry.permission.name}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> AclBinding:
        return cls(ResourcePattern(ResourceType[data["resource_type"]], data["resource_name"],
                                   PatternType[data["pattern_type"]]),
                   AccessControlEntry(data["principal"], data["host"],
                                      Operation[data["operation"]],
                                      Permission[data["permission"]]))

    def __str__(self) -> str:
        p, e = self.pattern, self.entry
        return (f"{e.permission.name} {e.principal} from {e.host} {e.operation.name} on "
                f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: None (or ANY) in a field matches anything."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, binding: AclBinding) -> bool:
        return self._pattern_matches(binding.pattern) and self._entry_matches(binding.entry)

    def _pattern_matches(self, p: ResourcePattern) -> bool:
        # Kafka's ResourcePatternFilter.matches
        if self.resource_type not in (ResourceType.ANY, p.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, p.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, p.pattern_type):
            return self.name == p.name
        # MATCH: every stored pattern that would apply to a resource of this name
        if p.pattern_type == PatternType.LITERAL:
            return self.name == p.name or p.name == WILDCARD
        if p.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(p.name)
        return False

    def _entry_matches(self, e: AccessControlEntry) -> bool:
        # Kafka's AccessControlEntryFilter.matches: exact values, no wildcard expansion
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and self.operation in (Operation.ANY, e.operation)
                and self.permission in (Permission.ANY, e.permission))

    def find_problem(self) -> str | None:
        """Why Kafka would refuse this filter (UNKNOWN anywhere), or None."""
        if self.resource_type == ResourceType.UNKNOWN:
            return "the filter's resource type is UNKNOWN"
        if self.pattern_type == PatternType.UNKNOWN:
            return "the filter's pattern type is UNKNOWN"
        if self.operation == Operation.UNKNOWN:
            return "the filter's operation is UNKNOWN"
        if self.permission == Permission.UNKNOWN:
            return "the filter's permission type is UNKNOWN"
        return None


def validate_new_binding(binding: AclBinding) -> str | None:
    """Why Kafka would refuse to create this ACL (AclControlManager.validateNewAcl), or None."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"invalid resource type {p.resource_type.name}"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"invalid pattern type {p.pattern_type.name}: use LITERAL or PREFIXED"
    if e.operation in (Operation.UNKNOWN, Operation.ANY):
        return f"invalid operation {e.operation.name}"
    if e.permission not in (Permission.ALLOW, Permission.DENY):
        return f"invalid permission type {e.permission.name}: use ALLOW or DENY"
    if not p.name:
        return "the resource name must not be empty"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ":" not in e.principal:
        return f"could not parse principal {e.principal!r}: write Type:name, e.g. User:alice"
    if not e.host:
        return "the host must not be empty: use * for any host"
    return None
