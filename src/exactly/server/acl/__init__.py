"""Authorization: Kafka's ACL model and StandardAuthorizer rules, with the ACLs kept in the log
dir. `make_authorizer(config)` gives None when `authorizer.class.name` is empty: then every
request is allowed, as in a Kafka broker without an authorizer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactly.server.acl.authorizer import AUTHORIZER_CLASS_NAMES, Authorizer, parse_super_users
from exactly.server.acl.model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from exactly.server.acl.store import AclStore, AclStoreError

if TYPE_CHECKING:
    from exactly.server.config import BrokerConfig

__all__ = [
    "AUTHORIZER_CLASS_NAMES", "CLUSTER_NAME", "AccessControlEntry", "AclBinding",
    "AclBindingFilter", "AclStore", "AclStoreError", "Authorizer", "Operation", "PatternType",
    "Permission", "ResourcePattern", "ResourceType", "make_authorizer", "parse_super_users",
]


def make_authorizer(config: BrokerConfig) -> Authorizer | None:
    from exactly.server.config import ConfigError

    if not config["authorizer.class.name"]:
        return None
    try:
        return Authorizer(AclStore(config.log_dir),
                          super_users=parse_super_users(config["super.users"]),
                          allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
    except AclStoreError as exc:
        raise ConfigError(str(exc)) from None  # the broker refuses to start, saying why
