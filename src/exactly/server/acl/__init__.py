"""Authorization: Kafka's ACL model and StandardAuthorizer rules, with the ACLs kept in the log
dir. `make_authorizer(config)` gives None when `authorizer.class.name` is empty: then every
request is allowed, as in a Kafka broker without an authorizer. The keys are declared in
config.py of this package (ACL_KEYS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from exactly.configdef import ConfigError
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

__all__ = [
    "AUTHORIZER_CLASS_NAMES", "CLUSTER_NAME", "AccessControlEntry", "AclBinding",
    "AclBindingFilter", "AclSettings", "AclStore", "AclStoreError", "Authorizer", "Operation",
    "PatternType", "Permission", "ResourcePattern", "ResourceType", "make_authorizer",
    "parse_super_users",
]


class AclSettings(Protocol):
    """What make_authorizer reads of the broker's config (BrokerConfig is one): the keys of
    ACL_KEYS by name, and the log dir that holds acls.json."""

    def __getitem__(self, key: str) -> Any: ...

    @property
    def log_dir(self) -> Path: ...


def make_authorizer(config: AclSettings) -> Authorizer | None:
    if not config["authorizer.class.name"]:
        return None
    try:
        return Authorizer(AclStore(config.log_dir),
                          super_users=parse_super_users(config["super.users"]),
                          allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
    except AclStoreError as exc:
        raise ConfigError(str(exc)) from None  # the broker refuses to start, saying why
