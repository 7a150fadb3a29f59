"""Metadata (v0–v13): brokers, topics, partitions, topic ids; auto-creates topics when allowed.

The answer for every topic is encoded once per change of the topics (`LogManager.topics_version`)
and listener, and sent as bytes after: with the internal topics' hundred partitions it is the
most expensive answer a client can ask for over and over, and a flood of it must not cost the
other clients their turn (issue 14). With an authorizer the answer depends on the principal and
the ACLs, and it is built each time."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from exactly.log import TopicInfo
from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import encode_response_body
from exactly.server.acl.model import CLUSTER_NAME, Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE, advertised_address

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import MetadataRequest

log = logging.getLogger("exactly.metadata")


def _topic_entry(ctx: RequestContext, info: TopicInfo, include_ops: bool = False) -> Any:
    node = ctx.services.identity.node_id
    partitions = tuple(
        ctx.nested("MetadataResponsePartition", error_code=ErrorCode.none, partition_index=p,
                   leader_id=node, leader_epoch=0, replica_nodes=(node,), isr_nodes=(node,),
                   offline_replicas=())
        for p in range(info.num_partitions)
    )
    return ctx.nested("MetadataResponseTopic", error_code=ErrorCode.none, name=info.name,
                      topic_id=info.topic_id, is_internal=info.internal, partitions=partitions,
                      topic_authorized_operations=(
                          ctx.authorized_operations(ResourceType.TOPIC, info.name)
                          if include_ops else -2147483648))


def _error_entry(ctx: RequestContext, name: str | None, topic_id: Any, error: ErrorCode) -> Any:
    return ctx.nested("MetadataResponseTopic", error_code=error, name=name, topic_id=topic_id,
                      is_internal=False, partitions=())


MAX_CACHED_ANSWERS = 64  # versions x listeners x flags: a handful in practice


async def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> ResponsePayload | bytes:
    every_topic = request.topics is None or (ctx.api_version == 0 and not request.topics)
    if not every_topic or ctx.services.authorizer is not None:
        return _metadata(ctx, request)
    answers = ctx.services.answers
    key = ("metadata", ctx.services.logs.topics_version, ctx.api_version, advertised_address(ctx),
           bool(getattr(request, "include_topic_authorized_operations", False)),
           bool(getattr(request, "include_cluster_authorized_operations", False)))
    body = answers.get(key)
    if body is None:
        if len(answers) >= MAX_CACHED_ANSWERS:
            answers.clear()
        body = answers[key] = encode_response_body(_metadata(ctx, request))
    return body


def _metadata(ctx: RequestContext, request: MetadataRequest) -> ResponsePayload:
    logs = ctx.services.logs
    config = ctx.services.config
    topics: list[Any] = []
    ops = bool(getattr(request, "include_topic_authorized_operations", False))
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        # null (v1+) or empty (v0) means every topic the principal may describe
        topics = [_topic_entry(ctx, info, ops) for info in logs.topics()
                  if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, info.name)]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        may_create_any = None
        for wanted in request.topics:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            if name is None:
                info = logs.topic_by_id(topic_id) if topic_id is not None else None
                if info is not None and not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC,
                                                          info.name):
                    topics.append(_error_entry(ctx, None, topic_id,
                                               ErrorCode.topic_authorization_failed))
                    continue
                topics.append(_topic_entry(ctx, info, ops) if info else
                              _error_entry(ctx, None, topic_id, ErrorCode.unknown_topic_id))
                continue
            if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(_error_entry(ctx, name, None, ErrorCode.topic_authorization_failed))
                continue
            info = logs.topic(name)
            if info is None and allow_create and config["auto.create.topics.enable"]:
                # Kafka: auto-creation needs CREATE on the cluster or on the topic.
                if may_create_any is None:
                    may_create_any = ctx.authorize(Operation.CREATE)
                if not may_create_any and not ctx.authorize(Operation.CREATE, ResourceType.TOPIC,
                                                            name):
                    topics.append(_error_entry(ctx, name, None,
                                               ErrorCode.topic_authorization_failed))
                    continue
                try:
                    info = logs.create_topic(name, config["num.partitions"])
                    log.info("auto-created topic %s with %d partition(s)", name, info.num_partitions)
                except LogError as exc:
                    topics.append(_error_entry(ctx, name, None, exc.error_code))
                    continue
                # As Kafka (KRaft): the request that creates a topic answers it unknown, with
                # neither id nor partitions; the next Metadata describes it.
                topics.append(_error_entry(ctx, name, None, ErrorCode.unknown_topic_or_partition))
                continue
            if info is None:
                topics.append(_error_entry(ctx, name, None, ErrorCode.unknown_topic_or_partition))
            else:
                topics.append(_topic_entry(ctx, info, ops))
    broker = ctx.nested("MetadataResponseBroker", node_id=ctx.services.identity.node_id,
                        host=advertised_address(ctx)[0], port=advertised_address(ctx)[1],
                        rack=None)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, brokers=(broker,), cluster_id=ctx.services.identity.cluster_id,
                        controller_id=ctx.services.identity.node_id, topics=tuple(topics),
                        cluster_authorized_operations=(
                            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                            if getattr(request, "include_cluster_authorized_operations", False)
                            else -2147483648))


HANDLERS: dict[int, Handler] = {ApiKey.METADATA: handle_metadata}
