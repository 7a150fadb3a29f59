"""DescribeTopicPartitions (v0, KIP-966): Metadata's topics and partitions, paged.

As Kafka 4.4 answers it (DescribeTopicPartitionsRequestHandler and the metadata cache's
describeTopicResponse): the topics asked for (none: every topic the principal may describe)
in name order, from the cursor's topic and partition on, at most `response_partition_limit`
partitions (clamped to 1..2000, `max.request.partition.size.limit`); where the answer stops, the
next cursor names the first partition left out. A cursor whose topic is not among the topics
asked for makes the request invalid: every topic answers INVALID_REQUEST. Exactly has no
eligible leader replicas (KIP-966's ELR needs several replicas): those lists are empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactly.log.errors import LogError
from exactly.log.manager import validate_topic_name
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit default
NO_OPS = -2147483648
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                             "__share_group_state"})


def _topic(ctx: RequestContext, name: str, error: ErrorCode, *, topic_id: Any = None,
           internal: bool | None = None, partitions: tuple[Any, ...] = (),
           ops: int = NO_OPS) -> Any:
    return ctx.nested("DescribeTopicPartitionsResponseTopic", error_code=error, name=name,
                      topic_id=topic_id,
                      is_internal=name in INTERNAL_TOPICS if internal is None else internal,
                      partitions=partitions, topic_authorized_operations=ops)


async def handle_describe_topic_partitions(ctx: RequestContext,
                                           request: Any) -> ResponsePayload:
    logs = ctx.services.logs
    every_topic = not request.topics
    names = ({info.name for info in logs.topics()} if every_topic
             else {t.name for t in request.topics})
    cursor = request.cursor
    if cursor is not None and cursor.topic_name not in names:
        # Kafka: "DescribeTopicPartitionsRequest topic list should contain the cursor topic"
        return ctx.response(throttle_time=NO_THROTTLE, next_cursor=None, topics=tuple(
            _topic(ctx, t.name, ErrorCode.invalid_request) for t in request.topics or ()))
    unauthorized = []
    ordered = []
    for name in sorted(names):
        if cursor is not None and name < cursor.topic_name:
            continue
        if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name):
            ordered.append(name)
        elif not every_topic:
            unauthorized.append(_topic(ctx, name, ErrorCode.topic_authorization_failed))
    remaining = max(min(MAX_PARTITIONS, request.response_partition_limit), 1)
    node = ctx.services.identity.node_id
    topics: list[Any] = []
    next_cursor = None
    for name in ordered:
        if remaining == 0:
            # the previous topics are complete: the next answer starts at this one
            next_cursor = ctx.nested("Cursor", topic_name=name, partition_index=0)
            break
        info = logs.topic(name)
        if info is None:
            if not every_topic:
                try:
                    validate_topic_name(name)
                    error = ErrorCode.unknown_topic_or_partition
                except LogError:
                    error = ErrorCode.invalid_topic_exception
                # Kafka fills every listed topic's authorized operations, unknown ones too
                topics.append(_topic(ctx, name, error,
                                     ops=ctx.authorized_operations(ResourceType.TOPIC, name)))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = list(range(max(start, 0), info.num_partitions))
        taken, rest = indexes[:remaining], indexes[remaining:]
        partitions = tuple(ctx.nested(
            "DescribeTopicPartitionsResponsePartition", error_code=ErrorCode.none,
            partition_index=p, leader_id=node, leader_epoch=0, replica_nodes=(node,),
            isr_nodes=(node,), eligible_leader_replicas=(), last_known_elr=(),
            offline_replicas=()) for p in taken)
        topics.append(_topic(ctx, name, ErrorCode.none, topic_id=info.topic_id,
                             internal=info.internal, partitions=partitions,
                             ops=ctx.authorized_operations(ResourceType.TOPIC, name)))
        if rest:
            next_cursor = ctx.nested("Cursor", topic_name=name, partition_index=rest[0])
            break
        remaining -= len(taken)
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics + unauthorized),
                        next_cursor=next_cursor)


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
}
