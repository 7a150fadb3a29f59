"""`exactly acls add|list|remove`: manage ACLs as Kafka's kafka-acls.sh does, the KIP-939
`TwoPhaseCommit` operation included. Uses Exactly's own Admin client."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from exactly.cli.common import (
    admin_call,
    connection_options,
    open_admin,
    print_table,
)
from exactly.client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

# Kafka's tool spells operations in CamelCase (Read, IdempotentWrite, TwoPhaseCommit).
OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
              if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
OPERATION_TEXT: dict[AclOperation, str] = {
    op: "".join(w.capitalize() for w in op.name.split("_")) for op in OPERATIONS.values()}
OPERATION_NAMES = list(OPERATION_TEXT.values())


def _operation(text: str) -> AclOperation:
    op = OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        raise click.BadParameter(f"{text!r} is not one of {', '.join(OPERATION_NAMES)}",
                                 param_hint="--operation")
    return op


def _principal(text: str, option: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise click.BadParameter(f"{text!r} is not TYPE:NAME, e.g. User:alice (User:* for anyone)",
                                 param_hint=option)
    return text


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...],
               cluster: bool) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in topics]
    out += [(ResourceType.GROUP, g) for g in groups]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in txn_ids]
    if cluster:
        out.append((ResourceType.CLUSTER, "kafka-cluster"))
    return out


def resource_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
        click.option("--topic", "topics", multiple=True, metavar="NAME",
                     help="A topic (a prefix with --resource-pattern-type prefixed; * for all). "
                     "Repeatable."),
        click.option("--group", "groups", multiple=True, metavar="NAME",
                     help="A consumer group. Repeatable."),
        click.option("--transactional-id", "txn_ids", multiple=True, metavar="ID",
                     help="A transactional id. Repeatable."),
        click.option("--cluster", is_flag=True, help="The cluster resource."),
    )):
        func = option(func)
    return func


def principal_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
        click.option("--allow-principal", "allow_principals", multiple=True, metavar="User:NAME",
                     help="A principal to allow. Repeatable."),
        click.option("--deny-principal", "deny_principals", multiple=True, metavar="User:NAME",
                     help="A principal to deny (DENY wins over ALLOW). Repeatable."),
        click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
                     help="Hosts the allow principals may connect from (default: any, *)."),
        click.option("--deny-host", "deny_hosts", multiple=True, metavar="HOST",
                     help="Hosts the deny principals are denied from (default: any, *)."),
        click.option("--operation", "operations", multiple=True, metavar="OPERATION",
                     help=f"One of {', '.join(OPERATION_NAMES)}. Repeatable."),
    )):
        func = option(func)
    return func


def _pattern_option(default: str, choices: list[str]) -> Callable[..., Any]:
    return click.option("--resource-pattern-type", "pattern", type=click.Choice(choices,
                        case_sensitive=False), default=default, show_default=True,
                        help="literal: the exact name; prefixed: names that start with it"
                        + ("; any/match: filters for list and remove." if "any" in choices else "."))


def _entries(allow_principals: tuple[str, ...], deny_principals: tuple[str, ...],
             allow_hosts: tuple[str, ...], deny_hosts: tuple[str, ...]
             ) -> list[tuple[AclPermissionType, str, str]]:
    out = [(AclPermissionType.ALLOW, _principal(p, "--allow-principal"), h)
           for p in allow_principals for h in (allow_hosts or ("*",))]
    out += [(AclPermissionType.DENY, _principal(p, "--deny-principal"), h)
            for p in deny_principals for h in (deny_hosts or ("*",))]
    return out


def _print(acls: list[AclBinding]) -> None:
    rows = sorted((a.resource_type.name, a.resource_name, a.pattern_type.name, a.principal,
                    a.host, OPERATION_TEXT.get(a.operation, a.operation.name),
                    a.permission_type.name) for a in acls)
    print_table(("ResourceType", "ResourceName", "PatternType", "Principal", "Host", "Operation",
                 "Permission"), rows)


@click.group()
def acls() -> None:
    """Add, list and remove ACLs (as kafka-acls.sh)."""


@acls.command()
@connection_options
@principal_options
@resource_options
@_pattern_option("literal", ["literal", "prefixed"])
def add(bootstrap: str, command_config: str | None, timeout_ms: int, allow_principals: tuple[str, ...],
        deny_principals: tuple[str, ...], allow_hosts: tuple[str, ...],
        deny_hosts: tuple[str, ...], operations: tuple[str, ...], topics: tuple[str, ...],
        groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool, pattern: str) -> None:
    """Add ACLs: every principal x host x operation on every resource given."""
    entries = _entries(allow_principals, deny_principals, allow_hosts, deny_hosts)
    if not entries:
        raise click.UsageError("give at least one --allow-principal or --deny-principal")
    if not operations:
        raise click.UsageError("give at least one --operation")
    resources = _resources(topics, groups, txn_ids, cluster)
    if not resources:
        raise click.UsageError("give a resource: --topic, --group, --transactional-id or --cluster")
    ops = [_operation(o) for o in operations]
    pattern_type = PatternType[pattern.upper()]
    bindings = [AclBinding(rtype, name, pattern_type, principal, host, op, permission)
                for rtype, name in resources for permission, principal, host in entries
                for op in ops]
    with open_admin(bootstrap, command_config, "exactly-acls", timeout_ms) as admin:
        admin_call("add ACLs", lambda: admin.create_acls(bindings))
    click.echo(f"Added {len(bindings)} ACL(s):")
    _print(bindings)


@acls.command("list")
@connection_options
@resource_options
@click.option("--principal", default=None, metavar="User:NAME", help="Only this principal's ACLs.")
@_pattern_option("any", ["any", "match", "literal", "prefixed"])
def list_(bootstrap: str, command_config: str | None, timeout_ms: int, topics: tuple[str, ...],
          groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool, principal: str | None,
          pattern: str) -> None:
    """List ACLs, of the resources given or of all."""
    if principal is not None:
        _principal(principal, "--principal")
    resources = _resources(topics, groups, txn_ids, cluster)
    pattern_type = PatternType[pattern.upper()]
    filters = ([AclBindingFilter(rtype, name, pattern_type, principal) for rtype, name in resources]
               or [AclBindingFilter(ResourceType.ANY, None, pattern_type, principal)])
    found: list[AclBinding] = []
    with open_admin(bootstrap, command_config, "exactly-acls", timeout_ms) as admin:
        for f in filters:
            found += admin_call("list ACLs", functools.partial(admin.describe_acls, f))
    _print(list(dict.fromkeys(found)))


@acls.command()
@connection_options
@principal_options
@resource_options
@_pattern_option("literal", ["any", "match", "literal", "prefixed"])
def remove(bootstrap: str, command_config: str | None, timeout_ms: int, allow_principals: tuple[str, ...],
           deny_principals: tuple[str, ...], allow_hosts: tuple[str, ...],
           deny_hosts: tuple[str, ...], operations: tuple[str, ...], topics: tuple[str, ...],
           groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool, pattern: str) -> None:
    """Remove the ACLs of the resources given; only those of the principals and operations given,
    if any are."""
    resources = _resources(topics, groups, txn_ids, cluster)
    if not resources:
        raise click.UsageError("give a resource: --topic, --group, --transactional-id or --cluster")
    pattern_type = PatternType[pattern.upper()]
    ops = [_operation(o) for o in operations] or [AclOperation.ANY]
    entries: list[tuple[AclPermissionType, str | None, str | None]] = [
        (perm, principal, None if host == "*" and not (allow_hosts or deny_hosts) else host)
        for perm, principal, host in _entries(allow_principals, deny_principals, allow_hosts,
                                              deny_hosts)]
    if not entries:
        entries = [(AclPermissionType.ANY, None, None)]
    filters = [AclBindingFilter(rtype, name, pattern_type, principal, host, op, perm)
               for rtype, name in resources for perm, principal, host in entries for op in ops]
    with open_admin(bootstrap, command_config, "exactly-acls", timeout_ms) as admin:
        deleted = admin_call("remove ACLs", lambda: admin.delete_acls(filters))
    click.echo(f"Removed {len(deleted)} ACL(s):")
    _print(deleted)
