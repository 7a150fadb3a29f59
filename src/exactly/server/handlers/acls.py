"""DescribeAcls (v1–v3), CreateAcls (v1–v3), DeleteAcls (v1–v3): Kafka's AclApis.

Describing needs DESCRIBE on the cluster, changing needs ALTER on the cluster. Without an
authorizer every one of them answers SECURITY_DISABLED, as Kafka does.
"""

from __future__ import annotations

import logging
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from exactly.server.acl.model import validate_new_binding
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

log = logging.getLogger("exactly.acls")

NO_AUTHORIZER = "no authorizer is configured: set authorizer.class.name on the broker"
E = TypeVar("E", bound=IntEnum)


def _enum(cls: type[E], value: int) -> E:
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # every one of these enums has UNKNOWN = 0


class _FilterFields(Protocol):
    """An ACL filter as DescribeAcls and DeleteAcls carry it, in every version."""

    @property
    def resource_type_filter(self) -> int: ...
    @property
    def resource_name_filter(self) -> str | None: ...
    @property
    def pattern_type_filter(self) -> int: ...
    @property
    def principal_filter(self) -> str | None: ...
    @property
    def host_filter(self) -> str | None: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


def _filter(f: _FilterFields) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
        _enum(Operation, f.operation), _enum(Permission, f.permission_type))


def _authorizer(ctx: RequestContext) -> Authorizer | None:
    return ctx.services.authorizer


async def handle_describe_acls(ctx: RequestContext,
                              request: DescribeAclsRequest) -> ResponsePayload:
    def error(code: ErrorCode, message: str) -> ResponsePayload:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                            resources=())

    authorizer = _authorizer(ctx)
    if authorizer is None:
        return error(ErrorCode.security_disabled, NO_AUTHORIZER)
    if not ctx.authorize(Operation.DESCRIBE):
        return error(ErrorCode.cluster_authorization_failed,
                     f"{ctx.principal} may not describe ACLs: it needs DESCRIBE on the cluster")
    acl_filter = _filter(request)
    problem = acl_filter.find_problem()
    if problem is not None:
        return error(ErrorCode.invalid_request, problem)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in authorizer.acls(acl_filter):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    resources = tuple(
        ctx.nested("DescribeAclsResource", resource_type=int(p.resource_type), resource_name=p.name,
                   pattern_type=int(p.pattern_type), acls=tuple(
                       ctx.nested("AclDescription", principal=e.principal, host=e.host,
                                  operation=int(e.operation),
                                  permission_type=int(e.permission))
                       for e in entries))
        for p, entries in by_pattern.items())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                        resources=resources)


async def handle_create_acls(ctx: RequestContext, request: CreateAclsRequest) -> ResponsePayload:
    def results(codes: list[tuple[ErrorCode, str | None]]) -> ResponsePayload:
        return ctx.response(throttle_time=NO_THROTTLE, results=tuple(
            ctx.nested("AclCreationResult", error_code=c, error_message=m) for c, m in codes))

    authorizer = _authorizer(ctx)
    count = len(request.creations)
    if authorizer is None:
        return results([(ErrorCode.security_disabled, NO_AUTHORIZER)] * count)
    if not ctx.authorize(Operation.ALTER):
        return results([(ErrorCode.cluster_authorization_failed,
                         f"{ctx.principal} may not create ACLs: it needs ALTER on the cluster")]
                       * count)
    outcome: list[tuple[ErrorCode, str | None]] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        binding = AclBinding(
            ResourcePattern(_enum(ResourceType, c.resource_type), c.resource_name,
                            _enum(PatternType, c.resource_pattern_type)),
            AccessControlEntry(c.principal, c.host, _enum(Operation, c.operation),
                               _enum(Permission, c.permission_type)))
        problem = validate_new_binding(binding)
        if problem is None:
            valid.append(binding)
            outcome.append((ErrorCode.none, None))
        else:
            outcome.append((ErrorCode.invalid_request, problem))
    try:
        authorizer.create(valid)
    except OSError as exc:
        log.error("could not store new ACLs: %s", exc)
        failed = (ErrorCode.unknown_server_error, f"the ACLs could not be stored: {exc}")
        outcome = [failed if code == ErrorCode.none else (code, m) for code, m in outcome]
    return results(outcome)


async def handle_delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> ResponsePayload:
    def result(code: ErrorCode, message: str | None, matching: tuple[Any, ...] = ()) -> Any:
        return ctx.nested("DeleteAclsFilterResult", error_code=code, error_message=message,
                          matching_acls=matching)

    authorizer = _authorizer(ctx)
    filters = request.filters
    if authorizer is None:
        out = [result(ErrorCode.security_disabled, NO_AUTHORIZER) for _ in filters]
    elif not ctx.authorize(Operation.ALTER):
        message = f"{ctx.principal} may not delete ACLs: it needs ALTER on the cluster"
        out = [result(ErrorCode.cluster_authorization_failed, message) for _ in filters]
    else:
        out = []
        for f in filters:
            acl_filter = _filter(f)
            problem = acl_filter.find_problem()
            if problem is not None:
                out.append(result(ErrorCode.invalid_request, problem))
                continue
            try:
                gone = authorizer.delete(acl_filter)
            except OSError as exc:
                log.error("could not store the ACLs after a delete: %s", exc)
                out.append(result(ErrorCode.unknown_server_error,
                                  f"the ACLs could not be stored: {exc}"))
                continue
            out.append(result(ErrorCode.none, None, tuple(
                ctx.nested("DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
                           resource_type=int(b.pattern.resource_type),
                           resource_name=b.pattern.name,
                           pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal,
                           host=b.entry.host, operation=int(b.entry.operation),
                           permission_type=int(b.entry.permission))
                for b in gone)))
    return ctx.response(throttle_time=NO_THROTTLE, filter_results=tuple(out))


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
}
