"""ListOffsets (v1–v10): earliest, latest, max timestamp, or the first offset at a timestamp."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exactly.log import PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE, partition_log

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import ListOffsetsRequest

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def _lookup(plog: PartitionLog, timestamp: int, committed: bool) -> tuple[int, int]:
    """(timestamp, offset) as Kafka answers them; (-1, -1) when no record is that late."""
    if timestamp == LATEST:
        return -1, plog.last_stable_offset if committed else plog.high_watermark
    if timestamp == EARLIEST:
        return -1, plog.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset()
    else:
        found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, ts = found
    return ts, offset


async def handle_list_offsets(ctx: RequestContext,
                              request: ListOffsetsRequest) -> ResponsePayload:
    committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    for topic in request.topics:
        info = ctx.services.logs.topic(topic.name)
        allowed = ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        partitions = []
        for p in topic.partitions:
            plog = partition_log(ctx, info, p.partition_index)
            error, ts, offset = ErrorCode.none, -1, -1
            if not allowed:
                error = ErrorCode.topic_authorization_failed
            elif plog is None:
                error = ErrorCode.unknown_topic_or_partition
            elif p.timestamp < MAX_TIMESTAMP and p.timestamp < 0:
                error = ErrorCode.invalid_request  # -4 (earliest local) and beyond: tiered storage
            else:
                try:
                    ts, offset = _lookup(plog, p.timestamp, committed)
                except LogError as exc:
                    error = exc.error_code
            partitions.append(ctx.nested("ListOffsetsPartitionResponse", partition_index=p.partition_index,
                                         error_code=error, timestamp=ts, offset=offset, leader_epoch=0))
        topics.append(ctx.nested("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions)))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


HANDLERS: dict[int, Handler] = {ApiKey.LIST_OFFSETS: handle_list_offsets}
