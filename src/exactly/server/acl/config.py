"""The broker keys of authorization: `authorizer.class.name`, `super.users`,
`allow.everyone.if.no.acl.found`, with Kafka's meanings. exactly/server/config.py gathers
`ACL_KEYS`; `make_authorizer` (in this package's __init__) reads them."""

from __future__ import annotations

from exactly.configdef import Key, parse_bool
from exactly.server.acl.authorizer import AUTHORIZER_CLASS_NAMES, parse_super_users


def _parse_authorizer(text: str) -> str:
    if text and text not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"must be empty (no authorization) or {AUTHORIZER_CLASS_NAMES[0]}")
    return text


def _parse_super_users(text: str) -> str:
    parse_super_users(text)  # checked now; make_authorizer parses it again into a set
    return text


ACL_KEYS: tuple[Key, ...] = (
    Key(
        "authorizer.class.name",
        "STRING",
        "",
        _parse_authorizer,
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer: check every request against "
        "the ACLs (kept in acls.json in the log dir, changed with CreateAcls/DeleteAcls); empty "
        "(the default): no authorization, every request is allowed.",
    ),
    Key(
        "super.users",
        "STRING",
        "",
        _parse_super_users,
        "Principals allowed everything, separated by semicolons, e.g. User:admin;User:ops.",
    ),
    Key(
        "allow.everyone.if.no.acl.found",
        "BOOLEAN",
        False,
        parse_bool,
        "Allow a request on a resource that no ACL covers (else it is denied).",
    ),
)
