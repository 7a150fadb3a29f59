"""DescribeConfigs (v1–v4), IncrementalAlterConfigs (v0–v1) and the legacy AlterConfigs (v0–v2)
on TOPIC, BROKER, BROKER_LOGGER and GROUP resources, ListConfigResources (v0–v1, KIP-1142),
and DescribeCluster.

DescribeConfigs gives each config's type, documentation and synonyms as Kafka 4.4 does
(server/config_describe.py), and an empty error message (not null) on success, as Kafka.

BROKER resources are this broker (its node id) and the cluster-wide default (""): every key with
its source and read-only flag; the dynamic keys change at run time (server/dynamic_config.py,
KIP-226), the rest are refused with INVALID_REQUEST, as Kafka refuses them. The legacy
AlterConfigs replaces a resource's whole set of dynamic values (a topic's overrides, a broker
scope's dynamic configs): a key it does not name goes back to its default, as in Kafka.
BROKER_LOGGER (KIP-412) is the broker's log levels (server/loggers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from exactly.log.errors import LogError
from exactly.log.manager import validate_topic_name
from exactly.log.topic_config import TOPIC_CONFIG_KEYS
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server import config_describe, loggers
from exactly.server.acl.model import CLUSTER_NAME, Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.dynamic_config import BROKER as BROKER_SCOPE
from exactly.server.dynamic_config import DEFAULT as DEFAULT_SCOPE
from exactly.server.dynamic_config import DynamicConfigError
from exactly.server.handlers import share_admin
from exactly.server.handlers.common import NO_THROTTLE, advertised_address

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        AlterConfigsRequest,
        DescribeClusterRequest,
        DescribeConfigsRequest,
        IncrementalAlterConfigsRequest,
    )

TOPIC, BROKER = 2, 4
BROKER_LOGGER = 8  # the broker's log levels (KIP-412), server/loggers.py
GROUP = 32  # group configs (KIP-848, KIP-932): the share groups' ones, in handlers/share_admin.py
SOURCE = {"TOPIC_CONFIG": 1, "DYNAMIC_BROKER_CONFIG": 2, "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
          "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5, "DYNAMIC_BROKER_LOGGER_CONFIG": 6,
          "GROUP_CONFIG": 8}
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
    if resource.resource_type == BROKER_LOGGER:
        return loggers.describe()
    if resource.resource_type == TOPIC:
        if ctx.services.logs.topic(resource.resource_name) is None:
            raise LookupError(resource.resource_name)
        return [(e.name, e.value, e.source, e.read_only, e.sensitive)
                for e in ctx.services.logs.describe_topic_configs(resource.resource_name)]
    dynamic = ctx.services.dynamic_config
    if dynamic is not None:
        return dynamic.describe(DEFAULT_SCOPE if resource.resource_name == "" else BROKER_SCOPE)
    return [(e.name, e.value, "DEFAULT_CONFIG" if e.is_default else "STATIC_BROKER_CONFIG",
             e.read_only, e.is_sensitive) for e in ctx.services.config.items()]


def _broker_layers(ctx: RequestContext) -> Callable[[str], list[config_describe.Synonym]]:
    """For synonyms: every layer of a broker key that has a value, most precedent first."""
    entries = {name: (value, source) for name, value, source, _ro, _s in
               _entries_of_broker(ctx)}

    def layers(key: str) -> list[config_describe.Synonym]:
        value, source = entries.get(key, (None, "DEFAULT_CONFIG"))
        if source == "DEFAULT_CONFIG":
            return [] if value is None else [(key, value, config_describe.DEFAULT_SOURCE)]
        found = [] if value is None else [(key, value, SOURCE.get(source, 5))]
        return found + config_describe.default_layer(key)

    return layers


def _entries_of_broker(ctx: RequestContext) -> list[tuple[str, str | None, str, bool, bool]]:
    dynamic = ctx.services.dynamic_config
    if dynamic is not None:
        return dynamic.describe(BROKER_SCOPE)
    return [(e.name, e.value, "DEFAULT_CONFIG" if e.is_default else "STATIC_BROKER_CONFIG",
             e.read_only, e.is_sensitive) for e in ctx.services.config.items()]


def _unknown_broker(ctx: RequestContext, name: str) -> str | None:
    """Why a BROKER resource's name is not this broker's nor the cluster default's, or None."""
    node_id = str(ctx.services.identity.node_id)
    if name in ("", node_id):
        return None
    return f"Unexpected broker id, expected {node_id} (or \"\" for the cluster default), but " \
           f"received {name}"


def _denied(ctx: RequestContext, operation: Operation, res: _Resource) -> ErrorCode | None:
    """Kafka: a topic's configs need the operation on the topic, a broker's on the cluster."""
    if res.resource_type == TOPIC:
        if not ctx.authorize(operation, ResourceType.TOPIC, res.resource_name):
            return ErrorCode.topic_authorization_failed
    elif res.resource_type == GROUP and not ctx.authorize(operation, ResourceType.GROUP,
                                                          res.resource_name):
        return ErrorCode.group_authorization_failed
    elif res.resource_type in (BROKER, BROKER_LOGGER) and not ctx.authorize(
            operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.cluster_authorization_failed
    return None


@dataclass(slots=True)
class _Changes:
    """What one resource of an (Incremental)AlterConfigs request asks for."""

    set: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    append: dict[str, str] = field(default_factory=dict)
    subtract: dict[str, str] = field(default_factory=dict)
    replace: bool = False  # the legacy AlterConfigs: the given values become the whole set


def _incremental_changes(configs: Iterable[Any]) -> tuple[_Changes, str | None]:
    """An IncrementalAlterConfigs resource's operations; the reason if one is malformed."""
    changes = _Changes()
    by_operation = {SET: changes.set, APPEND: changes.append, SUBTRACT: changes.subtract}
    configs = list(configs)
    names = [c.name for c in configs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # as Kafka
        return changes, f"Error due to duplicate config keys: {', '.join(twice)}"
    for c in configs:
        if c.config_operation == DELETE:
            changes.delete.append(c.name)
        elif c.config_operation in by_operation and c.value is not None:
            by_operation[c.config_operation][c.name] = c.value
        else:
            return changes, (f"operation {c.config_operation} on {c.name} needs a value"
                             if c.config_operation in by_operation
                             else f"unknown operation {c.config_operation} on {c.name}")
    return changes, None


def _alter(ctx: RequestContext, resource_type: int, name: str, changes: _Changes,
           validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Apply one TOPIC, BROKER or BROKER_LOGGER resource's changes: (error, message)."""
    logs = ctx.services.logs
    if resource_type == TOPIC:
        info = logs.topic(name)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
        delete = ([k for k in info.configs if k not in changes.set] if changes.replace
                  else changes.delete)
        try:
            logs.alter_topic_configs(name, changes.set, delete, append=changes.append,
                                     subtract=changes.subtract, validate_only=validate_only)
        except LogError as exc:
            return exc.error_code, str(exc)
        return ErrorCode.none, None
    if resource_type not in (BROKER, BROKER_LOGGER):
        return ErrorCode.invalid_request, f"resource type {resource_type} not supported"
    unknown = _unknown_broker(ctx, name)
    if unknown is not None or (resource_type == BROKER_LOGGER and not name):
        return ErrorCode.invalid_request, unknown or "BROKER_LOGGER needs this broker's id"
    if changes.append or changes.subtract:
        return ErrorCode.invalid_config, ("APPEND and SUBTRACT need a list-typed config; no "
                                          "dynamic broker config or logger level is one: use SET")
    if resource_type == BROKER_LOGGER:
        if changes.replace:
            return ErrorCode.invalid_request, ("AlterConfigs cannot change BROKER_LOGGER; use "
                                               "IncrementalAlterConfigs")
        try:
            loggers.alter(changes.set, changes.delete, validate_only=validate_only)
        except loggers.LoggerConfigError as exc:
            return exc.error_code, str(exc)
        return ErrorCode.none, None
    dynamic = ctx.services.dynamic_config
    if dynamic is None:
        return ErrorCode.invalid_request, "this broker's configs cannot change at run time"
    try:
        dynamic.alter(DEFAULT_SCOPE if name == "" else BROKER_SCOPE, changes.set, changes.delete,
                      replace=changes.replace, validate_only=validate_only)
    except DynamicConfigError as exc:
        return exc.error_code, f"Invalid config value for resource BROKER {name!r}: {exc}"
    return ErrorCode.none, None


async def handle_describe_configs(ctx: RequestContext,
                                  request: DescribeConfigsRequest) -> ResponsePayload:
    results = []
    for res in request.resources:
        error, message, configs = ErrorCode.none, None, []
        denied = _denied(ctx, Operation.DESCRIBE_CONFIGS, res)
        if denied is not None:
            error = denied
        elif res.resource_type in (BROKER, BROKER_LOGGER) and _unknown_broker(ctx, res.resource_name):
            error, message = ErrorCode.invalid_request, _unknown_broker(ctx, res.resource_name)
        elif res.resource_type not in (TOPIC, BROKER, GROUP, BROKER_LOGGER):
            error, message = ErrorCode.invalid_request, f"resource type {res.resource_type} not supported"
        else:
            try:
                entries = _entries(ctx, res)
            except LookupError:
                error = ErrorCode.unknown_topic_or_partition
                message = f"topic {res.resource_name!r} does not exist"
                try:
                    validate_topic_name(res.resource_name)
                except LogError as exc:  # as Kafka: a name no topic can have
                    error, message = exc.error_code, str(exc)
                entries = []
            keys = set(res.configuration_keys) if res.configuration_keys else None
            want_synonyms = bool(getattr(request, "include_synonyms", False))
            want_docs = bool(getattr(request, "include_documentation", False))
            layers = _broker_layers(ctx) if want_synonyms and res.resource_type in (
                TOPIC, BROKER) else None
            topic = res.resource_type == TOPIC
            for name, value, source, read_only, sensitive in entries:
                if keys is not None and name not in keys:
                    continue
                synonyms: list[config_describe.Synonym] = []
                if layers is not None:
                    if topic:
                        default = TOPIC_CONFIG_KEYS[name].default if name in \
                            TOPIC_CONFIG_KEYS else None
                        synonyms = config_describe.topic_synonyms(
                            name, value if source == "TOPIC_CONFIG" else None, default, layers)
                    else:
                        synonyms = config_describe.broker_synonyms(name, layers)
                kind = res.resource_type in (TOPIC, BROKER)
                configs.append(ctx.nested(
                    "DescribeConfigsResourceResult", name=name, value=value, read_only=read_only,
                    config_source=SOURCE.get(source, 5), is_default=source == "DEFAULT_CONFIG",
                    is_sensitive=sensitive, synonyms=tuple(
                        ctx.nested("DescribeConfigsSynonym", name=n,
                                   value=None if sensitive else v, source=src)
                        for n, v, src in synonyms),
                    config_type=config_describe.config_type(name, topic) if kind else 0,
                    documentation=config_describe.documentation(name, topic)
                    if want_docs and kind else None))
            if error == ErrorCode.none:
                message = ""  # as Kafka: an empty message, not null
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
        elif any(c.config_operation not in (SET, DELETE, APPEND, SUBTRACT)
                 for c in res.configs):
            # As Kafka, whose AlterConfigOp.OpType.forId throws on an unknown operation:
            # UNKNOWN_SERVER_ERROR, without a message.
            error, message = ErrorCode.unknown_server_error, None
        elif res.resource_type == GROUP:
            error, message = await share_admin.alter_group_resource(ctx, res,
                                                                    request.validate_only)
        else:
            changes, malformed = _incremental_changes(res.configs)
            if malformed is not None:
                error, message = ErrorCode.invalid_request, malformed
            else:
                error, message = _alter(ctx, res.resource_type, res.resource_name, changes,
                                        request.validate_only)
        responses.append(_altered(ctx, res, error, message))
    return ctx.response(throttle_time=NO_THROTTLE, responses=tuple(responses))


async def handle_alter_configs(ctx: RequestContext,
                               request: AlterConfigsRequest) -> ResponsePayload:
    """The legacy AlterConfigs: each resource's dynamic values become exactly those given."""
    responses = []
    for res in request.resources:
        denied = _denied(ctx, Operation.ALTER_CONFIGS, res)
        nulls = [c.name for c in res.configs if c.value is None]
        if denied is not None:
            error, message = denied, None
        elif nulls:  # as Kafka: the legacy API has no "delete"; a null value is refused
            error = ErrorCode.invalid_request
            message = f"Null value not supported for : {', '.join(nulls)}"
        else:
            changes = _Changes(set={c.name: c.value for c in res.configs if c.value is not None},
                               replace=True)
            error, message = _alter(ctx, res.resource_type, res.resource_name, changes,
                                    request.validate_only)
        responses.append(_altered(ctx, res, error, message))
    return ctx.response(throttle_time=NO_THROTTLE, responses=tuple(responses))


def _altered(ctx: RequestContext, res: _Resource, error: ErrorCode, message: str | None) -> Any:
    return ctx.nested("AlterConfigsResourceResponse", error_code=error, error_message=message,
                      resource_type=res.resource_type, resource_name=res.resource_name)


async def handle_describe_cluster(ctx: RequestContext,
                                  request: DescribeClusterRequest) -> ResponsePayload:
    endpoint_type = getattr(request, "endpoint_type", 1)
    if endpoint_type != 1:  # v1 (KIP-919): this is a broker's listener; there is no controller's
        error = (ErrorCode.mismatched_endpoint_type if endpoint_type == 2
                 else ErrorCode.unsupported_endpoint_type)
        message = ("The request was sent to an endpoint of type BROKER, but we wanted an "
                   "endpoint of type CONTROLLER" if endpoint_type == 2
                   else f"Unsupported endpoint type {endpoint_type}")
        return ctx.response(throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                            endpoint_type=1, cluster_authorized_operations=-2147483648,
                            cluster_id="", controller_id=-1, brokers=())
    # v2 (KIP-1073): a broker answering requests is not fenced.
    broker = ctx.nested("DescribeClusterBroker", broker_id=ctx.services.identity.node_id,
                        host=advertised_address(ctx)[0], port=advertised_address(ctx)[1],
                        rack=None, is_fenced=False)
    # Kafka checks nothing here but reports the cluster's authorized operations when asked.
    ops = -2147483648
    if getattr(request, "include_cluster_authorized_operations", False):
        ops = (ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
               if ctx.authorize(Operation.DESCRIBE) else 0)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                        endpoint_type=1, cluster_authorized_operations=ops,
                        cluster_id=ctx.services.identity.cluster_id, controller_id=ctx.services.identity.node_id,
                        brokers=(broker,))


CLIENT_METRICS = 16  # KIP-714's client metrics subscriptions: Exactly has none


async def handle_list_config_resources(ctx: RequestContext, request: Any) -> ResponsePayload:
    """ListConfigResources (KIP-1142): the resources that have configs, of the types asked for
    (v1; none asked: every type). v0 asked for client metrics resources only. As Kafka: an
    unknown type is UNSUPPORTED_VERSION, and the caller needs DESCRIBE_CONFIGS on the cluster."""
    if not ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed,
                            config_resources=())
    known = (BROKER_LOGGER, BROKER, TOPIC, GROUP, CLIENT_METRICS)
    asked = set(getattr(request, "resource_types", None) or ()) if ctx.api_version >= 1 else {
        CLIENT_METRICS}
    if not asked:
        asked = set(known)
    if asked - set(known):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.unsupported_version, config_resources=())
    node = str(ctx.services.identity.node_id)
    found: list[tuple[str, int]] = []
    if BROKER_LOGGER in asked:
        found.append((node, BROKER_LOGGER))
    if BROKER in asked:
        found.append((node, BROKER))
    if TOPIC in asked:
        found += [(info.name, TOPIC) for info in ctx.services.logs.topics()]
    if GROUP in asked:  # Kafka lists the groups that have configs of their own
        found += [(group_id, GROUP) for group_id, group in
                  sorted(share_admin.coordinator(ctx).groups.items()) if group.configs]
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        config_resources=tuple(
                            ctx.nested("ConfigResource", resource_name=name, resource_type=kind)
                            for name, kind in found))


HANDLERS: dict[int, Handler] = {
    ApiKey.LIST_CONFIG_RESOURCES: handle_list_config_resources,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
}
