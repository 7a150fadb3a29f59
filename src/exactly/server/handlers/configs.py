"""DescribeConfigs (v1–v4) and IncrementalAlterConfigs (v0–v1) for topics; brokers are
described (read only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import CLUSTER_NAME, Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers import share_admin
from exactly.server.handlers.common import NO_THROTTLE, advertised_address

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        DescribeClusterRequest,
        DescribeConfigsRequest,
        IncrementalAlterConfigsRequest,
    )

TOPIC, BROKER = 2, 4
GROUP = 32  # group configs (KIP-848, KIP-932): the share groups' ones, in handlers/share_admin.py
SOURCE = {"TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5, "GROUP_CONFIG": 8}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class _Resource(Protocol):
    """A config resource, as DescribeConfigs and IncrementalAlterConfigs name it."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


def _entries(ctx: RequestContext, resource: _Resource) -> list[tuple[str, str | None, str, bool, bool]]:
    """(name, value, source, read_only, sensitive) of a resource; raises LookupError if unknown."""
    if resource.resource_type == GROUP:
        return share_admin.group_config_entries(ctx, resource.resource_name)
    if resource.resource_type == TOPIC:
        if ctx.services.logs.topic(resource.resource_name) is None:
            raise LookupError(resource.resource_name)
        return [(e.name, e.value, e.source, e.read_only, e.sensitive)
                for e in ctx.services.logs.describe_topic_configs(resource.resource_name)]
    return [(e.name, e.value, "DEFAULT_CONFIG" if e.is_default else "STATIC_BROKER_CONFIG",
             e.read_only, e.is_sensitive) for e in ctx.services.config.items()]


def _denied(ctx: RequestContext, operation: Operation, res: _Resource) -> ErrorCode | None:
    """Kafka: a topic's configs need the operation on the topic, a broker's on the cluster."""
    if res.resource_type == TOPIC:
        if not ctx.authorize(operation, ResourceType.TOPIC, res.resource_name):
            return ErrorCode.topic_authorization_failed
    elif res.resource_type == GROUP and not ctx.authorize(operation, ResourceType.GROUP,
                                                          res.resource_name):
        return ErrorCode.group_authorization_failed
    elif res.resource_type == BROKER and not ctx.authorize(operation, ResourceType.CLUSTER,
                                                           CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed
    return None


async def handle_describe_configs(ctx: RequestContext,
                                  request: DescribeConfigsRequest) -> ResponsePayload:
    results = []
    for res in request.resources:
        error, message, configs = ErrorCode.none, None, []
        denied = _denied(ctx, Operation.DESCRIBE_CONFIGS, res)
        if denied is not None:
            error = denied
        elif res.resource_type == BROKER and res.resource_name not in ("", str(ctx.services.identity.node_id)):
            error, message = ErrorCode.invalid_request, f"unknown broker {res.resource_name!r}"
        elif res.resource_type not in (TOPIC, BROKER, GROUP):
            error, message = ErrorCode.invalid_request, f"resource type {res.resource_type} not supported"
        else:
            try:
                entries = _entries(ctx, res)
            except LookupError:
                error = ErrorCode.unknown_topic_or_partition
                message = f"topic {res.resource_name!r} does not exist"
                entries = []
            keys = set(res.configuration_keys) if res.configuration_keys else None
            for name, value, source, read_only, sensitive in entries:
                if keys is not None and name not in keys:
                    continue
                configs.append(ctx.nested(
                    "DescribeConfigsResourceResult", name=name, value=value, read_only=read_only,
                    config_source=SOURCE.get(source, 5), is_default=source == "DEFAULT_CONFIG",
                    is_sensitive=sensitive, synonyms=(), config_type=0, documentation=None))
        results.append(ctx.nested("DescribeConfigsResult", error_code=error, error_message=message,
                                  resource_type=res.resource_type, resource_name=res.resource_name,
                                  configs=tuple(configs)))
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_incremental_alter_configs(ctx: RequestContext,
                                           request: IncrementalAlterConfigsRequest,
                                           ) -> ResponsePayload:
    responses = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        denied = _denied(ctx, Operation.ALTER_CONFIGS, res)
        if denied is not None:
            error = denied
        elif res.resource_type == GROUP:
            error, message = await share_admin.alter_group_resource(ctx, res,
                                                                    request.validate_only)
        elif res.resource_type != TOPIC:
            error = ErrorCode.invalid_request
            message = "only topic configs can be altered; broker configs are static"
        elif ctx.services.logs.topic(res.resource_name) is None:
            error = ErrorCode.unknown_topic_or_partition
            message = f"topic {res.resource_name!r} does not exist"
        else:
            to_set: dict[str, str] = {}
            to_delete: list[str] = []
            to_append: dict[str, str] = {}
            to_subtract: dict[str, str] = {}
            by_operation = {SET: to_set, APPEND: to_append, SUBTRACT: to_subtract}
            for c in res.configs:
                if c.config_operation == DELETE:
                    to_delete.append(c.name)
                elif c.config_operation in by_operation and c.value is not None:
                    by_operation[c.config_operation][c.name] = c.value
                else:
                    error = ErrorCode.invalid_request
                    message = (f"operation {c.config_operation} on {c.name} needs a value"
                               if c.config_operation in by_operation
                               else f"unknown operation {c.config_operation} on {c.name}")
            if error == ErrorCode.none:
                try:
                    ctx.services.logs.alter_topic_configs(
                        res.resource_name, to_set, to_delete, append=to_append,
                        subtract=to_subtract, validate_only=request.validate_only)
                except LogError as exc:
                    error, message = exc.error_code, str(exc)
        responses.append(ctx.nested("AlterConfigsResourceResponse", error_code=error,
                                    error_message=message, resource_type=res.resource_type,
                                    resource_name=res.resource_name))
    return ctx.response(throttle_time=NO_THROTTLE, responses=tuple(responses))


async def handle_describe_cluster(ctx: RequestContext,
                                  request: DescribeClusterRequest) -> ResponsePayload:
    broker = ctx.nested("DescribeClusterBroker", broker_id=ctx.services.identity.node_id,
                        host=advertised_address(ctx)[0], port=advertised_address(ctx)[1],
                        rack=None)
    # Kafka checks nothing here but reports the cluster's authorized operations when asked.
    ops = -2147483648
    if getattr(request, "include_cluster_authorized_operations", False):
        ops = (ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
               if ctx.authorize(Operation.DESCRIBE) else 0)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                        endpoint_type=getattr(request, "endpoint_type", 1),
                        cluster_authorized_operations=ops,
                        cluster_id=ctx.services.identity.cluster_id, controller_id=ctx.services.identity.node_id,
                        brokers=(broker,))


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
}
