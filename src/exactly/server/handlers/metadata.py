"""Metadata (v0–v12): brokers, topics, partitions, topic ids; auto-creates topics when allowed."""

from __future__ import annotations

import logging
from typing import Any

from exactly.log import TopicInfo
from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.context import RequestContext
from exactly.server.handlers.common import NO_THROTTLE

log = logging.getLogger("exactly.metadata")


def _topic_entry(ctx: RequestContext, info: TopicInfo) -> Any:
    node = ctx.broker.node_id
    partitions = tuple(
        ctx.nested("MetadataResponsePartition", error_code=ErrorCode.none, partition_index=p,
                   leader_id=node, leader_epoch=0, replica_nodes=(node,), isr_nodes=(node,),
                   offline_replicas=())
        for p in range(info.num_partitions)
    )
    return ctx.nested("MetadataResponseTopic", error_code=ErrorCode.none, name=info.name,
                      topic_id=info.topic_id, is_internal=info.internal, partitions=partitions)


def _error_entry(ctx: RequestContext, name: str | None, topic_id: Any, error: ErrorCode) -> Any:
    return ctx.nested("MetadataResponseTopic", error_code=error, name=name, topic_id=topic_id,
                      is_internal=False, partitions=())


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    logs = ctx.broker.logs
    config = ctx.broker.config
    topics: list[Any] = []
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        # null (v1+) or empty (v0) means every topic
        topics = [_topic_entry(ctx, info) for info in logs.topics()]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        for wanted in request.topics:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            if name is None:
                info = logs.topic_by_id(topic_id) if topic_id is not None else None
                topics.append(_topic_entry(ctx, info) if info else
                              _error_entry(ctx, None, topic_id, ErrorCode.unknown_topic_id))
                continue
            info = logs.topic(name)
            if info is None and allow_create and config["auto.create.topics.enable"]:
                try:
                    info = logs.create_topic(name, config["num.partitions"])
                    log.info("auto-created topic %s with %d partition(s)", name, info.num_partitions)
                except LogError as exc:
                    topics.append(_error_entry(ctx, name, None, exc.error_code))
                    continue
            if info is None:
                topics.append(_error_entry(ctx, name, None, ErrorCode.unknown_topic_or_partition))
            else:
                topics.append(_topic_entry(ctx, info))
    broker = ctx.nested("MetadataResponseBroker", node_id=ctx.broker.node_id,
                        host=ctx.broker.advertised_host, port=ctx.broker.advertised_port, rack=None)
    return ctx.response(throttle_time=NO_THROTTLE, brokers=(broker,), cluster_id=ctx.broker.cluster_id,
                        controller_id=ctx.broker.node_id, topics=tuple(topics),
                        cluster_authorized_operations=-2147483648)


HANDLERS = {ApiKey.METADATA: handle_metadata}
