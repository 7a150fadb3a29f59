"""CreateTopics (v2–v7), DeleteTopics (v1–v6), CreatePartitions (v0–v3)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from exactly.log.errors import LogError
from exactly.log.topic_config import describe as describe_configs
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        CreatePartitionsRequest,
        CreateTopicsRequest,
        DeleteTopicsRequest,
    )

log = logging.getLogger("exactly.topics")

SOURCE = {"TOPIC_CONFIG": 1, "DEFAULT_CONFIG": 5}


class _Assignment(Protocol):
    """A partition's replicas, as CreateTopics and CreatePartitions assign them."""

    @property
    def broker_ids(self) -> tuple[int, ...]: ...


def _check_placement(ctx: RequestContext, replication_factor: int,
                     assignments: Sequence[_Assignment] | None) -> str | None:
    node = ctx.services.identity.node_id
    if replication_factor not in (-1, 1):
        return f"replication factor {replication_factor} is larger than the 1 available broker"
    for a in assignments or ():
        if tuple(a.broker_ids) != (node,):
            return f"replica assignment {list(a.broker_ids)} names brokers other than {node}"
    return None


def _created_configs(ctx: RequestContext, name: str, info: Any) -> tuple[Any, ...] | None:
    """The new topic's configs, which CreateTopics v5+ returns (validate_only: the configs it
    would have; the topic does not exist, `info` says what it would be)."""
    if not hasattr(ctx.response_module, "CreatableTopicConfigs"):
        return None
    logs = ctx.services.logs
    entries = (logs.describe_topic_configs(name) if logs.topic(name) is not None
               else describe_configs(logs.default_config, info.configs))
    return tuple(
        ctx.nested("CreatableTopicConfigs", name=e.name, value=e.value, read_only=e.read_only,
                   config_source=SOURCE.get(e.source, 5), is_sensitive=e.sensitive)
        for e in entries)


async def handle_create_topics(ctx: RequestContext,
                               request: CreateTopicsRequest) -> ResponsePayload:
    logs = ctx.services.logs
    results = []
    cluster_create = ctx.authorize(Operation.CREATE)
    names = [t.name for t in request.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    # v5+: a failed topic answers an empty list of configs (not null), as Kafka
    no_configs = () if hasattr(ctx.response_module, "CreatableTopicConfigs") else None
    for t in request.topics:
        if t.name in duplicates:
            # Kafka: a name given twice is refused once, with INVALID_REQUEST, and not created
            if t.name in names:
                names = [n for n in names if n != t.name]
                results.append(ctx.nested(
                    "CreatableTopicResult", name=t.name, topic_id=None,
                    error_code=ErrorCode.invalid_request,
                    error_message="Duplicate topic name.", num_partitions=-1,
                    replication_factor=-1, configs=no_configs,
                    topic_config_error_code=ErrorCode.none))
            continue
        error, message, info, configs = ErrorCode.none, None, None, no_configs
        config_error = ErrorCode.none
        placement = _check_placement(ctx, t.replication_factor, t.assignments)
        num_partitions: int = t.num_partitions
        if t.assignments:
            num_partitions = len(t.assignments) if num_partitions == -1 else num_partitions
        if num_partitions == -1:
            num_partitions = ctx.services.config["num.partitions"]
        if not cluster_create and not ctx.authorize(Operation.CREATE, ResourceType.TOPIC, t.name):
            error = ErrorCode.topic_authorization_failed
            message = f"{ctx.principal} may not create topic {t.name!r}: it needs CREATE on " \
                      "the cluster or the topic"
        elif placement is not None:
            error = (ErrorCode.invalid_replication_factor if "factor" in placement
                     else ErrorCode.invalid_replica_assignment)
            message = placement
        else:
            try:
                info = logs.create_topic(t.name, num_partitions,
                                         {c.name: c.value for c in t.configs if c.value is not None},
                                         validate_only=request.validate_only)
                if not request.validate_only:
                    log.info("created topic %s with %d partition(s)", t.name, num_partitions)
                # As Kafka: validate_only answers the configs the topic would have, too.
                if ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
                    configs = _created_configs(ctx, t.name, info)
                else:
                    config_error = ErrorCode.topic_authorization_failed
            except LogError as exc:
                error, message = exc.error_code, str(exc)
        results.append(ctx.nested(
            "CreatableTopicResult", name=t.name, topic_id=info.topic_id if info else None,
            error_code=error, error_message=message,
            num_partitions=num_partitions if error == ErrorCode.none else -1,
            replication_factor=1 if error == ErrorCode.none else -1, configs=configs,
            topic_config_error_code=config_error))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(ctx: RequestContext,
                               request: DeleteTopicsRequest) -> ResponsePayload:
    logs = ctx.services.logs
    if hasattr(request, "topics"):
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        error, message = ErrorCode.none, None
        info = logs.topic(name) if name else (logs.topic_by_id(topic_id) if topic_id else None)
        target = name or (info.name if info else None)
        if not ctx.services.config["delete.topic.enable"]:
            error, message = ErrorCode.topic_deletion_disabled, "delete.topic.enable is false"
        elif target is not None and not ctx.authorize(Operation.DELETE, ResourceType.TOPIC,
                                                      target):
            error = ErrorCode.topic_authorization_failed
            info = None if name is None else info  # an id must not reveal the topic's name
        elif info is None:  # Kafka says why, in its words
            if name is None:
                error = ErrorCode.unknown_topic_id
                message = "This server does not host this topic ID."
            else:
                error = ErrorCode.unknown_topic_or_partition
                message = "This server does not host this topic-partition."
        elif info.internal:
            error, message = ErrorCode.invalid_topic_exception, f"{info.name} is an internal topic"
        else:
            try:
                logs.delete_topic(info.name)
                log.info("deleted topic %s", info.name)
            except LogError as exc:
                error, message = exc.error_code, str(exc)
        results.append(ctx.nested("DeletableTopicResult", name=info.name if info else name,
                                  topic_id=info.topic_id if info else topic_id, error_code=error,
                                  error_message=message))
    return ctx.response(throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_create_partitions(ctx: RequestContext,
                                   request: CreatePartitionsRequest) -> ResponsePayload:
    logs = ctx.services.logs
    results = []
    for t in request.topics:
        error, message = ErrorCode.none, None
        placement = _check_placement(ctx, 1, t.assignments)
        if not ctx.authorize(Operation.ALTER, ResourceType.TOPIC, t.name):
            error = ErrorCode.topic_authorization_failed
        elif placement is not None:
            error, message = ErrorCode.invalid_replica_assignment, placement
        else:
            try:
                logs.create_partitions(t.name, t.count, validate_only=request.validate_only)
            except LogError as exc:
                error, message = exc.error_code, str(exc)
                if error == ErrorCode.unknown_topic_or_partition:
                    message = None  # as Kafka: an unknown topic comes without a message
        results.append(ctx.nested("CreatePartitionsTopicResult", name=t.name, error_code=error,
                                  error_message=message))
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(results))


HANDLERS: dict[int, Handler] = {
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
}
