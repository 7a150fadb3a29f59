"""Produce (v3–v13): admit the request, append what was admitted, wait for durability when
acks=all, answer.

The order of those steps, the waits a request may meet before its appends (the markers of its
transactional id's previous transaction, the id's turn, the partitions it adds to its
transaction made durable first), and each partition's verdict (authorization, the one batch,
KIP-890) are server/admission.py's: this module appends and answers. Nothing suspends the
handler before its appends unless admission has the request wait, so pipelined requests of one
connection are appended in the order they were sent (idempotent producers rely on it).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from exactly import failpoints
from exactly.log import PartitionLog
from exactly.log.errors import InvalidRecordError, LogError, StorageError
from exactly.protocol import fast_responses
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode, error_name
from exactly.server.context import Handler, RequestContext

if TYPE_CHECKING:
    from exactly.protocol.requests import ProduceRequest
    from exactly.server.admission import Admission

log = logging.getLogger("exactly.produce")

# Read once per process (EXACTLY_FAILPOINTS is set when a broker starts), not on every Produce:
# an environment lookup per request was 1.4% of a produce's CPU.
_BEFORE_APPEND = failpoints.listed("produce.before_append")


async def handle_produce(ctx: RequestContext, request: ProduceRequest) -> bytes | None:
    if _BEFORE_APPEND:
        await failpoints.hit_async("produce.before_append")
    gate = ctx.services.transactions.produce_gate
    admission = await gate.admit(ctx, request)
    with admission:  # the transactional id's turn, if admission took it, until appended
        written, topic_responses = _append(ctx, admission)
    await gate.durable(admission, written)
    if request.acks == 0:
        if any(p[1] != ErrorCode.none for _name, _id, parts in topic_responses for p in parts):
            # As Kafka: acks=0 has no answer to carry an error, so the connection is closed,
            # and the producer refreshes its metadata and reconnects.
            ctx.session.close_after_response = True
        return None
    return fast_responses.produce(ctx.api_version, topic_responses)


_Answer = tuple[str, uuid.UUID | None, list[fast_responses.ProducedPartition]]  # a topic's


# Kafka's ReplicaManager answers these append errors with no log start offset (-1), and every
# other one (sequence, epoch, validation errors) with the log's.
_NO_LOG_START = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.corrupt_message,
    ErrorCode.kafka_storage_error, ErrorCode.unknown_topic_id})


def _append(ctx: RequestContext, admission: Admission) -> tuple[list[PartitionLog],
                                                                 list[_Answer]]:
    """Append the partitions admitted, each with the batch header admission read; the logs
    written and the answer's topics."""
    services = ctx.services
    written: list[PartitionLog] = []
    topic_responses: list[_Answer] = []
    for name, topic_id, parts in admission.topics:
        partitions: list[fast_responses.ProducedPartition] = []
        for index, error, message, plog, records, headers in parts:
            record_errors: tuple[tuple[int, str | None], ...] = ()
            base_offset, log_start, append_time = -1, -1, -1
            if error == ErrorCode.none and plog is not None and records:
                try:
                    result = plog.append(records, now_ms=services.clock(), from_client=True,
                                         headers=headers)
                except LogError as exc:
                    error = exc.error_code
                    # Kafka answers a message only with the record validation errors of the
                    # log (INVALID_RECORD); the reason of any refusal is logged below.
                    message = str(exc) if error == ErrorCode.invalid_record else None
                    if error not in _NO_LOG_START:
                        log_start = plog.log_start_offset
                    if isinstance(exc, InvalidRecordError):
                        record_errors = exc.record_errors
                    if isinstance(exc, StorageError):  # a full or failing disk
                        services.logs.storage_errors += 1
                        log.error("produce to %s-%d failed: %s %s", name, index,
                                  error_name(error), exc)
                    else:
                        log.info("produce to %s-%d refused: %s %s", name, index,
                                 error_name(error), exc)
                else:
                    base_offset, log_start = result.base_offset, result.log_start_offset
                    append_time = result.log_append_time
                    written.append(plog)  # a duplicate's original may still be awaiting its fsync
                    if not result.duplicate:
                        services.appends.notify_append(plog)
            partitions.append((index, error, base_offset, log_start, message,
                               record_errors, append_time))
        topic_responses.append((name or "", topic_id, partitions))
    return written, topic_responses


HANDLERS: dict[int, Handler] = {ApiKey.PRODUCE: handle_produce}
