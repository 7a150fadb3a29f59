"""Produce (v3–v13): append each partition's batches, then wait for durability when acks=all.

Every append happens before the handler's first `await`, so pipelined requests of one connection
are appended in the order they were sent (idempotent producers rely on it). The exceptions wait
in order: for the markers of the producer's previous transaction (its later requests wait as
well), and, under the fsync policy, for the partitions a transaction version 2 request adds to
its transaction to be durable before their data is appended (its transactional id's later
requests wait for their turn meanwhile: `ProduceTurns` in server/transactions.py).
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import TYPE_CHECKING

from exactly import failpoints
from exactly.log import PartitionLog
from exactly.log.errors import InvalidRecordError, LogError, StorageError
from exactly.protocol import fast_responses
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.records import LOG_OVERHEAD, MAGIC, RecordBatchError, RecordBatchHeader
from exactly.protocol.structs import TopicPartition
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import partition_log, topic_of, unknown_topic_error

if TYPE_CHECKING:
    from exactly.protocol.requests import ProduceRequest

log = logging.getLogger("exactly.produce")

# A partition of the request, checked: index, error, message, its log, its records (a view of
# the request's frame when the connection read it in place: network.py, produce_request.py).
_Records = bytes | memoryview
_Checked = tuple[int, ErrorCode, str | None, PartitionLog | None, _Records | None]


# Read once per process (EXACTLY_FAILPOINTS is set when a broker starts), not on every Produce:
# an environment lookup per request was 1.4% of a produce's CPU (issue 19).
_BEFORE_APPEND = failpoints.listed("produce.before_append")


async def handle_produce(ctx: RequestContext, request: ProduceRequest) -> bytes | None:
    if _BEFORE_APPEND:
        await failpoints.hit_async("produce.before_append")
    services = ctx.services
    driver = services.transactions
    txn_id = request.transactional_id
    if txn_id is not None and driver.writing_markers(txn_id):
        # The previous transaction's markers first, so this one is checked against the state
        # they leave. The producer's later requests wait too, and resume in order.
        await driver.wait_for_markers(txn_id)
    turns = driver.produce_turns
    turn = await turns.take(txn_id) if txn_id is not None and turns.busy(txn_id) else None
    try:
        checked = _check(ctx, request)
        added = services.appends.not_durable(driver.take_added())
        if added and not failpoints.skip("produce.added_partitions.sync"):
            # The coordinator must know the partitions before their data can reach the disk.
            # Meanwhile this id's later requests wait for its turn: the appends keep their order.
            assert txn_id is not None  # only a transactional request adds partitions
            if turn is None:
                turn = await turns.take(txn_id)  # nobody holds it: no wait
            await services.appends.sync(added, start_now=True)
        written, topic_responses = _append(ctx, checked)
    finally:
        if turn is not None and txn_id is not None:  # a turn is always some id's
            turns.give_back(txn_id, turn)
    if request.acks == -1 and written:
        await services.appends.sync(written)
    if request.acks == 0:
        if any(p[1] != ErrorCode.none for _name, _id, parts in topic_responses for p in parts):
            # As Kafka: acks=0 has no answer to carry an error, so the connection is closed,
            # and the producer refreshes its metadata and reconnects.
            ctx.session.close_after_response = True
        return None
    return fast_responses.produce(ctx.api_version, topic_responses)


_Topic = tuple[str | None, uuid.UUID | None, list[_Checked]]  # a topic's partitions, checked
_Answer = tuple[str, uuid.UUID | None, list[fast_responses.ProducedPartition]]  # and answered


def _check(ctx: RequestContext, request: ProduceRequest) -> list[_Topic]:
    """Every partition, checked before any is appended: the partitions a transaction version 2
    request adds to its transaction are then made durable by one sync round, not one each."""
    acks, txn_id = request.acks, request.transactional_id
    # Kafka: transactional records need a transactional id and WRITE on it, or nothing is
    # written and every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    if txn_id is None:
        txn_denied = _transactional(request)
    else:
        txn_denied = ctx.authorizing and _transactional(request) and not ctx.authorize(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    checked: list[_Topic] = []
    for topic in request.topic_data:
        info, name, topic_id = topic_of(ctx, topic)
        denied = txn_denied or (name is not None and not ctx.authorize(
            Operation.WRITE, ResourceType.TOPIC, name))
        parts: list[_Checked] = []
        for pdata in topic.partition_data:
            error, message = ErrorCode.none, None
            records: _Records | None = pdata.records
            plog = partition_log(ctx, info, pdata.index)
            if txn_denied:
                error = ErrorCode.transactional_id_authorization_failed
            elif denied:
                error = ErrorCode.topic_authorization_failed
            elif acks not in (0, 1, -1):
                error = ErrorCode.invalid_required_acks
            elif plog is None:
                error = unknown_topic_error(topic_id, name)
            elif not records:
                error = ErrorCode.invalid_record
                log.info("produce to %s-%d refused: INVALID_RECORD empty or null record set",
                         name, pdata.index)
            else:
                error, why, whole = _one_batch(records)
                if whole < len(records):
                    records = records[:whole]  # a fragment after the batch: dropped, as by Kafka
                if error == ErrorCode.none:
                    error, message = _check_transaction(ctx, request, plog, records)
                else:
                    # As Kafka: a message with CORRUPT_MESSAGE, none with INVALID_RECORD here
                    # (the reason goes to the log).
                    message = why if error == ErrorCode.corrupt_message else None
                    log.info("produce to %s-%d refused: %s %s", name, pdata.index,
                             error_name(error), why)
            parts.append((pdata.index, error, message, plog, records))
        checked.append((name, topic_id, parts))
    return checked


# Kafka's ReplicaManager answers these append errors with no log start offset (-1), and every
# other one (sequence, epoch, validation errors) with the log's.
_NO_LOG_START = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.corrupt_message,
    ErrorCode.kafka_storage_error, ErrorCode.unknown_topic_id})


def _append(ctx: RequestContext, checked: list[_Topic]) -> tuple[list[PartitionLog],
                                                                  list[_Answer]]:
    """Append the partitions that passed the checks; the logs written and the answer's topics."""
    services = ctx.services
    written: list[PartitionLog] = []
    topic_responses: list[_Answer] = []
    for name, topic_id, parts in checked:
        partitions: list[fast_responses.ProducedPartition] = []
        for index, error, message, plog, records in parts:
            record_errors: tuple[tuple[int, str | None], ...] = ()
            base_offset, log_start, append_time = -1, -1, -1
            if error == ErrorCode.none and plog is not None and records:
                try:
                    result = plog.append(records, now_ms=services.clock(), from_client=True)
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


_LENGTH = struct.Struct(">i")
_MIN_RECORD_OVERHEAD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0: below it, no batch at all
_UP_TO_MAGIC = 17  # offset, length, leader epoch, magic


def _one_batch(records: _Records) -> tuple[ErrorCode, str | None, int]:
    """A partition's records as Kafka's ProduceRequest.validateRecords takes them (v3+): exactly
    one complete batch of magic 2, read as its ByteBufferLogInputStream reads: a length below a
    record's minimum or an unknown magic is CORRUPT_MESSAGE, a fragment after the batch is
    dropped. The error, its message, and the length of the records to append."""
    total = len(records)
    if total >= LOG_OVERHEAD:
        (length,) = _LENGTH.unpack_from(records, 8)
        if length < _MIN_RECORD_OVERHEAD:
            why = (f"batch size {length} is less than the minimum record overhead "
                   f"({_MIN_RECORD_OVERHEAD})")
            return ErrorCode.corrupt_message, why, total
        if total >= _UP_TO_MAGIC:
            magic = records[16]
            if magic > MAGIC:
                return ErrorCode.corrupt_message, f"invalid magic {magic} in the batch", total
            end = LOG_OVERHEAD + length
            if total >= end:
                if magic < MAGIC:
                    why = (f"a magic {magic} message: Produce v3 and later carry only record "
                           f"batches of magic {MAGIC}; upgrade the client")
                    return ErrorCode.invalid_record, why, total
                if total - end >= _UP_TO_MAGIC and (
                        total - end >= LOG_OVERHEAD + _LENGTH.unpack_from(records, end + 8)[0]):
                    return (ErrorCode.invalid_record,
                            "a Produce request carries exactly one record batch per partition",
                            total)
                return ErrorCode.none, None, end
    return (ErrorCode.invalid_record,
            f"no complete record batch in the partition's {total} bytes", total)


def _transactional(request: ProduceRequest) -> bool:
    """Does any batch of the request carry transactional records?"""
    for topic in request.topic_data:
        for pdata in topic.partition_data:
            try:
                if pdata.records and RecordBatchHeader(pdata.records).is_transactional:
                    return True
            except RecordBatchError:
                continue
    return False


# Coordinator errors that a retry fixes, which some clients would take as fatal in a produce
# response (KIP-890 "Old Clients"): sent as the retriable NOT_ENOUGH_REPLICAS with a message.
_RETRIABLE = {ErrorCode.concurrent_transactions, ErrorCode.coordinator_not_available,
              ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress}
TRANSACTION_ABORTABLE_SINCE = 11  # Produce versions that know TRANSACTION_ABORTABLE
IMPLICIT_ADD_SINCE = 12  # KIP-890 part 2: Produce adds the partition to the transaction


def _check_transaction(ctx: RequestContext, request: ProduceRequest, plog: PartitionLog,
                       records: _Records) -> tuple[ErrorCode, str | None]:
    """KIP-890: a transactional batch goes only into a partition of its ongoing transaction."""
    try:
        header = RecordBatchHeader(records)
    except RecordBatchError:
        return ErrorCode.none, None  # the log refuses it with the right error
    if not header.is_transactional:
        return ErrorCode.none, None
    txn_id = request.transactional_id
    if txn_id is None:
        return ErrorCode.invalid_record, "a transactional batch needs the request's transactional id"
    pid, epoch = header.producer_id, header.producer_epoch
    if plog.in_transaction(pid):
        return ErrorCode.none, None  # verified when its transaction first wrote here
    tp = TopicPartition(plog.topic, plog.partition)
    error = ctx.services.transactions.verify_write(
        txn_id, pid, epoch, tp, implicit_add=ctx.api_version >= IMPLICIT_ADD_SINCE)
    if error == ErrorCode.none:
        return error, None
    if error == ErrorCode.invalid_txn_state and not ctx.api_version >= IMPLICIT_ADD_SINCE:
        # As Kafka's verification (KIP-890 part 1): a partition the transaction does not hold
        # makes it abortable; older clients get INVALID_TXN_STATE (below).
        error = ErrorCode.transaction_abortable
    message = f"transaction {txn_id!r} of producer {pid} epoch {epoch} cannot write to {tp[0]}-{tp[1]}: {error_name(error)}"
    # As Kafka's ReplicaManager: a message only with the errors it rewrites (INVALID_TXN_STATE,
    # the retriable ones); the others (fenced, unknown mapping, abortable) go without one.
    if error in _RETRIABLE:
        return ErrorCode.not_enough_replicas, message
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, None
    if error == ErrorCode.transaction_abortable and ctx.api_version < TRANSACTION_ABORTABLE_SINCE:
        return ErrorCode.invalid_txn_state, message
    if error == ErrorCode.invalid_txn_state:
        return error, message
    return error, None


HANDLERS: dict[int, Handler] = {ApiKey.PRODUCE: handle_produce}
