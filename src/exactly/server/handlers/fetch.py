"""Fetch (v4–v18): whole stored batches from the fetch offset, under Kafka's size rules, long-polling
until min_bytes.

Size rules (Kafka's ReplicaManager.readFromLog, KIP-74):
- The request's `max_bytes`, capped by the broker's `fetch.max.bytes`, bounds the whole answer.
- Partitions are read in request order, each with the smaller of its own `partition_max_bytes` and
  what is left of that total.
- Only the first batch of the answer may exceed these limits (KIP-74): the first partition that has
  data returns at least its first batch whole, so a consumer always progresses even when a batch is
  larger than what it asked for. After it, a partition returns only whole batches that fit what is
  left: the answer's records never exceed max_bytes, unless they are that one first batch.
- Batches go out whole. Kafka slices bytes and so may end a partition's data with a fragment of a
  batch, which clients drop (and a partition whose first batch does not fit gets nothing, as here);
  that fragment spends Kafka's total, where here a later partition may use those bytes for whole
  batches. Both stay within the same limits.
- `min_bytes` is capped by that total (as Kafka does). The long poll answers as soon as the bytes
  the answer could carry reach min_bytes, counted as Kafka's DelayedFetch counts them: a partition
  cut short by a limit (more data below its bound than returned) counts as its
  `partition_max_bytes`; else at `max_wait_ms`, or at once when reading a partition fails.
- read_committed reads below the last stable offset, and its aborted-transactions list covers
  exactly the returned range: [fetch offset, offset after the last returned batch).

Kafka's `replica.fetch.response.max.bytes` is not a key here: it is the max_bytes a follower's own
fetcher sends, and a single node has no followers; a replica's Fetch is capped by fetch.max.bytes
like any other, as in Kafka.

Zero copy (issue 19): on listeners without TLS (ZERO_COPY_LISTENERS) a partition's records are a
`FileRecords`, a range of a segment file, which the connection sends with sendfile, batches as
stored (network.py); on TLS listeners they are bytes read from the file, as before. Both give
the same bytes on the wire.

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
from exactly.log.segment import FileRecords
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE, partition_log, topic_of, unknown_topic_error

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import FetchRequest

READ_COMMITTED = 1
# Listeners whose sockets carry the bytes as they are, so records can go from file to socket.
ZERO_COPY_LISTENERS = frozenset({"PLAINTEXT", "SASL_PLAINTEXT"})

Records = bytes | FileRecords


@dataclass(slots=True)
class _Wanted:
    partition: int
    offset: int
    max_bytes: int
    plog: PartitionLog | None
    error: ErrorCode


# A requested topic: its entry in the request, its name and id, its partitions.
_Topic = tuple[object, str | None, uuid.UUID | None, list[_Wanted]]


@dataclass(slots=True)
class _Pass:
    """One read of every requested partition: the answer and what decides whether to send it."""

    responses: tuple[Any, ...]
    size: int
    # Per partition read: (size of the records returned, offset after them (-1: none), fetch
    # offset, bound it was read below, its partition_max_bytes).
    reads: list[tuple[int, int, int, int, int]]
    read_failed: bool

    def available(self) -> int:
        """Bytes toward min_bytes, as Kafka's DelayedFetch counts them: a partition with more data
        below its bound than it returned counts as its partition_max_bytes (what waiting could
        never add to)."""
        counted = 0
        for size, next_offset, offset, bound, max_bytes in self.reads:
            more = (next_offset if size else offset) < bound
            counted += max(size, max_bytes) if more else size
        return counted


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

    # fetch.max.bytes caps the answer, and min_bytes by it (Kafka's ReplicaManager): else a consumer
    # asking for more than the cap allows would wait out max_wait for bytes it can never get.
    max_bytes = max(0, min(request.max_bytes, ctx.services.config["fetch.max.bytes"]))
    min_bytes = min(request.min_bytes, max_bytes)
    deadline = time.monotonic() + request.max_wait.total_seconds()
    while True:
        read = _read(ctx, request, wanted, max_bytes)
        remaining = deadline - time.monotonic()
        if (read.size >= min_bytes or remaining <= 0 or not logs or read.read_failed
                or read.available() >= min_bytes):
            return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0,
                                responses=read.responses)
        await ctx.services.appends.wait_for_append(logs, remaining)


def _replica_id(request: FetchRequest) -> int:
    replica_id = getattr(request, "replica_id", None)
    if replica_id is None:  # v15+: in ReplicaState
        state = getattr(request, "replica_state", None)
        replica_id = state.replica_id if state is not None else -1
    return int(replica_id)


def _aborted(ctx: RequestContext, plog: PartitionLog, offset: int, bound: int,
             end: int) -> tuple[Any, ...]:
    """The aborted transactions with records in the returned range [offset, end)."""
    found = plog.aborted_transactions(offset, bound)
    return tuple(ctx.nested("AbortedTransaction", producer_id=pid, first_offset=first)
                 for pid, first in found if first < end)


def _read(ctx: RequestContext, request: FetchRequest, wanted: list[_Topic], max_bytes: int) -> _Pass:
    left = max_bytes
    size = 0
    reads = []
    read_failed = False
    responses = []
    committed = request.isolation_level == READ_COMMITTED
    files = ctx.session.listener.name in ZERO_COPY_LISTENERS
    for _topic, name, topic_id, parts in wanted:
        partitions = []
        for w in parts:
            records: Records = b""
            aborted: tuple[Any, ...] | None = () if committed else None
            error = w.error
            hwm = lso = start = -1
            if w.plog is not None:
                plog = w.plog
                hwm, lso, start = plog.high_watermark, plog.last_stable_offset, plog.log_start_offset
                bound = lso if committed else hwm
                try:
                    # KIP-74: only the answer's first batch may exceed the limits. Once the answer
                    # is full every partition is still read, as Kafka reads it with 0 bytes: its
                    # offset is checked (out of range is reported), nothing of its log is read.
                    records, next_offset = plog.read_records(
                        w.offset, max(0, min(w.max_bytes, left)), max_offset=bound,
                        min_one_batch=size == 0)
                except LogError as exc:
                    error = exc.error_code
                    read_failed = True
                    hwm = lso = start = -1  # as Kafka: a failed read tells no offsets
                    aborted = None
                else:
                    if not files and isinstance(records, FileRecords):
                        records = records.read()
                    reads.append((len(records), next_offset, w.offset, bound, w.max_bytes))
                    if committed and records:
                        aborted = _aborted(ctx, plog, w.offset, bound, next_offset)
            if w.error != ErrorCode.none:
                aborted = ()  # Kafka answers an unknown or denied partition with an empty list
            size += len(records)
            left = max(0, left - len(records))
            partitions.append(ctx.nested(
                "PartitionData", partition_index=w.partition, error_code=error, high_watermark=hwm,
                last_stable_offset=lso, log_start_offset=start, aborted_transactions=aborted,
                preferred_read_replica=-1, records=records))
        responses.append(ctx.nested("FetchableTopicResponse", topic=name or "", topic_id=topic_id,
                                    partitions=tuple(partitions)))
    return _Pass(tuple(responses), size, reads, read_failed)


HANDLERS: dict[int, Handler] = {ApiKey.FETCH: handle_fetch}
