"""Produce (v3–v13): append each partition's batches, then wait for durability when acks=all.

Every append happens before the handler's first `await`, so pipelined requests of one connection
are appended in the order they were sent (idempotent producers rely on it).
"""

from __future__ import annotations

import logging
from typing import Any

from exactly.log import PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode, error_name
from exactly.server.context import RequestContext
from exactly.server.handlers.common import NO_THROTTLE, partition_log, topic_of, unknown_topic_error

log = logging.getLogger("exactly.produce")


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    acks = request.acks
    written: list[PartitionLog] = []
    topic_responses = []
    for topic in request.topic_data:
        info, name, topic_id = topic_of(ctx, topic)
        partitions = []
        for pdata in topic.partition_data:
            error, message = ErrorCode.none, None
            base_offset, log_start = -1, -1
            plog = partition_log(ctx, info, pdata.index)
            if acks not in (0, 1, -1):
                error = ErrorCode.invalid_required_acks
            elif request.transactional_id is not None:
                error, message = ErrorCode.transactional_id_authorization_failed, \
                    "transactions are not enabled on this broker yet"
            elif plog is None:
                error = unknown_topic_error(topic_id, name)
            elif not pdata.records:
                error, message = ErrorCode.invalid_record, "empty or null record set"
            else:
                try:
                    result = plog.append(pdata.records, now_ms=broker.now_ms())
                except LogError as exc:
                    error, message = exc.error_code, str(exc)
                    log.info("produce to %s-%d refused: %s %s", name, pdata.index,
                             error_name(error), message)
                else:
                    base_offset, log_start = result.base_offset, result.log_start_offset
                    written.append(plog)  # a duplicate's original may still be awaiting its fsync
                    if not result.duplicate:
                        broker.notify_append(plog)
            partitions.append(ctx.nested(
                "PartitionProduceResponse", index=pdata.index, error_code=error,
                base_offset=base_offset, log_append_time=None, log_start_offset=log_start,
                record_errors=(), error_message=message))
        topic_responses.append(ctx.nested("TopicProduceResponse", name=name or "", topic_id=topic_id,
                                          partition_responses=tuple(partitions)))
    if acks == -1 and written:
        await broker.sync(written)
    if acks == 0:
        return None
    return ctx.response(responses=tuple(topic_responses), throttle_time=NO_THROTTLE)


HANDLERS = {ApiKey.PRODUCE: handle_produce}
