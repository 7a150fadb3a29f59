"""ListOffsets (v1–v11): earliest, latest, max timestamp, or the first offset at a timestamp.

The special timestamps, each from the version that introduced it (an older version gets
UNSUPPORTED_VERSION for it, as from Kafka): -1 latest, -2 earliest, -3 max timestamp (v7,
KIP-734), -4 earliest local (v8, KIP-405), -5 latest tiered (v9, KIP-1005), -6 earliest pending
upload (v11, KIP-1023). Without tiered storage the local log is the whole log: -4 is the log start
offset, and -5 and -6 find nothing (-1), as Kafka answers them with remote storage off."""

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
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6
# The first version that knows each special timestamp.
SINCE = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}
NO_EPOCH = -1  # the leader epoch of an answer that found no offset


def _lookup(plog: PartitionLog, timestamp: int, committed: bool) -> tuple[int, int]:
    """(timestamp, offset) as Kafka answers them; (-1, -1) when no record is that late."""
    if timestamp == LATEST:
        return -1, plog.last_stable_offset if committed else plog.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1  # nothing is tiered
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
            elif ctx.api_version < SINCE.get(p.timestamp, 0):
                error = ErrorCode.unsupported_version
            elif p.timestamp < EARLIEST_PENDING_UPLOAD:
                error = ErrorCode.invalid_request  # no such special timestamp
            else:
                try:
                    ts, offset = _lookup(plog, p.timestamp, committed)
                except LogError as exc:
                    error = exc.error_code
            partitions.append(ctx.nested("ListOffsetsPartitionResponse", partition_index=p.partition_index,
                                         error_code=error, timestamp=ts, offset=offset,
                                         leader_epoch=0 if offset >= 0 else NO_EPOCH))
        topics.append(ctx.nested("ListOffsetsTopicResponse", name=topic.name, partitions=tuple(partitions)))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


HANDLERS: dict[int, Handler] = {ApiKey.LIST_OFFSETS: handle_list_offsets}
