"""Fetch (v4–v18): whole stored batches from the fetch offset, long-polling until min_bytes.

Fetch sessions (KIP-227) are declined: the answer always carries session id 0, which tells the
client to keep sending full fetch requests, as Kafka allows.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exactly.log import PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE, partition_log, topic_of, unknown_topic_error

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import FetchRequest

READ_COMMITTED = 1


@dataclass(slots=True)
class _Wanted:
    partition: int
    offset: int
    max_bytes: int
    plog: PartitionLog | None
    error: ErrorCode


# A requested topic: its entry in the request, its name and id, its partitions.
_Topic = tuple[object, str | None, uuid.UUID | None, list[_Wanted]]


async def handle_fetch(ctx: RequestContext, request: FetchRequest) -> ResponsePayload:
    # Fetch sessions (KIP-227) are v7+. We never hand out sessions, so an incremental fetch names
    # one we don't know.
    if (getattr(request, "session_id", 0) != 0
            and getattr(request, "session_epoch", 0) not in (-1, 0)):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.fetch_session_id_not_found,
                            session_id=0, responses=())
    wanted: list[_Topic] = []
    logs: list[PartitionLog] = []
    follower = _replica_id(request) >= 0
    for topic in request.topics:
        info, name, topic_id = topic_of(ctx, topic)
        # Kafka: a follower needs CLUSTER_ACTION, a consumer READ on each topic.
        allowed = (ctx.authorize(Operation.CLUSTER_ACTION) if follower else
                   name is None or ctx.authorize(Operation.READ, ResourceType.TOPIC, name))
        parts = []
        for p in topic.partitions:
            plog = partition_log(ctx, info, p.partition) if allowed else None
            error = (ErrorCode.topic_authorization_failed if not allowed else
                     ErrorCode.none if plog else unknown_topic_error(topic_id, name))
            parts.append(_Wanted(p.partition, p.fetch_offset, p.partition_max_bytes, plog, error))
            if plog is not None:
                logs.append(plog)
        wanted.append((topic, name, topic_id, parts))

    deadline = time.monotonic() + request.max_wait.total_seconds()
    while True:
        responses, total = _read(ctx, request, wanted)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or not logs:
            return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0,
                                responses=responses)
        await ctx.services.appends.wait_for_append(logs, remaining)


def _replica_id(request: FetchRequest) -> int:
    replica_id = getattr(request, "replica_id", None)
    if replica_id is None:  # v15+: in ReplicaState
        state = getattr(request, "replica_state", None)
        replica_id = state.replica_id if state is not None else -1
    return int(replica_id)


def _read(ctx: RequestContext, request: FetchRequest,
          wanted: list[_Topic]) -> tuple[tuple[Any, ...], int]:
    budget: int = request.max_bytes
    total = 0
    responses = []
    committed = request.isolation_level == READ_COMMITTED
    for _topic, name, topic_id, parts in wanted:
        partitions = []
        for w in parts:
            records: bytes | memoryview = b""
            aborted: tuple[Any, ...] | None = () if committed else None
            error = w.error
            hwm = lso = start = -1
            if w.plog is not None:
                plog = w.plog
                hwm, lso, start = plog.high_watermark, plog.last_stable_offset, plog.log_start_offset
                upper = lso if committed else hwm
                # KIP-74: the first batch of the response goes out whole even past the limits, so
                # the consumer always progresses; later partitions get what still fits.
                limit = w.max_bytes if total == 0 else min(w.max_bytes, budget)
                try:
                    if limit > 0 or total == 0:
                        records = plog.read(w.offset, limit, max_offset=upper,
                                            min_one_batch=total == 0)
                except LogError as exc:
                    error = exc.error_code
                if committed and records:
                    aborted = tuple(
                        ctx.nested("AbortedTransaction", producer_id=pid, first_offset=first)
                        for pid, first in plog.aborted_transactions(w.offset, upper))
            total += len(records)
            budget -= len(records)
            partitions.append(ctx.nested(
                "PartitionData", partition_index=w.partition, error_code=error, high_watermark=hwm,
                last_stable_offset=lso, log_start_offset=start, aborted_transactions=aborted,
                preferred_read_replica=-1, records=bytes(records)))
        responses.append(ctx.nested("FetchableTopicResponse", topic=name or "", topic_id=topic_id,
                                    partitions=tuple(partitions)))
    return tuple(responses), total


HANDLERS: dict[int, Handler] = {ApiKey.FETCH: handle_fetch}
