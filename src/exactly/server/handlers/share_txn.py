"""TxnShareAcknowledge (KIP-1289, a draft; schema in exactly.protocol.drafts.txn_share_acknowledge):
a share consumer's acknowledgements staged in a producer's open transaction, applied when it
commits and released for redelivery when it aborts.

It mirrors TxnOffsetCommit, which puts offsets in `__consumer_offsets` under a transaction: the
share-partition's `__share_group_state` partition joins the transaction (as KIP-890's implicit
add does for Produce, through the transaction coordinator), the staged acknowledgements go there
in a transactional batch of the producer, and the coordinator's COMMIT/ABORT marker in that
partition resolves them (exactly.server.transactions, exactly.share.coordinator.complete_txn).

Checks, in Kafka's order: WRITE on the TRANSACTIONAL_ID and READ on the GROUP (KIP-1310 §6),
the share-group member and its epoch, the producer's Ongoing transaction (identity errors as
AddOffsetsToTxn answers them; INVALID_TXN_STATE with no transaction open), then per partition the
records (held by this member: else INVALID_RECORD_STATE; ACCEPT, REJECT or GAP: a RELEASE is
INVALID_REQUEST). Everything staged is durable, under the flush policy, before the answer.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE
from exactly.server.handlers.share import sync_written
from exactly.share.partition import AckBatch
from exactly.share.state_store import SHARE_STATE_TOPIC, Written

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import TxnShareAcknowledgeRequest

_Partition = tuple[uuid.UUID, int]


def _batches(p: Any) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            for b in p.acknowledgement_batches]


def _partition_error(ctx: RequestContext, topic_id: uuid.UUID | None, partition: int) -> ErrorCode:
    """Why a requested partition cannot be acknowledged before its records are looked at."""
    info = ctx.services.logs.topic_by_id(topic_id) if topic_id is not None else None
    if info is None:
        return ErrorCode.unknown_topic_id
    if not ctx.authorize(Operation.READ, ResourceType.TOPIC, info.name):
        return ErrorCode.topic_authorization_failed
    if not 0 <= partition < info.num_partitions:
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.none


async def handle_txn_share_acknowledge(ctx: RequestContext,
                                       request: TxnShareAcknowledgeRequest) -> ResponsePayload:
    services = ctx.services
    share = services.share

    def fail(code: ErrorCode) -> ResponsePayload:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code, responses=())

    txn_id, group_id = request.transactional_id or "", str(request.group_id)
    member_id = request.member_id
    if not txn_id or not group_id or not member_id:
        return fail(ErrorCode.invalid_request)
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return fail(ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, group_id):
        return fail(ErrorCode.group_authorization_failed)
    member_error = share.check_member(group_id, member_id, request.member_epoch)
    if member_error is not None:
        return fail(member_error[0])

    errors: dict[tuple[uuid.UUID | None, int], ErrorCode] = {}
    wanted: dict[_Partition, list[AckBatch]] = {}
    state_partitions: set[tuple[str, int]] = set()
    for topic in request.topics:
        topic_id = topic.topic_id
        for p in topic.partitions:
            code = _partition_error(ctx, topic_id, p.partition_index)
            state_partition = None
            if code is ErrorCode.none and topic_id is not None:
                state_partition = share.state_partition(group_id, topic_id, p.partition_index)
                if state_partition is None:
                    code = ErrorCode.invalid_record_state  # nothing was ever delivered from it
            if topic_id is None or state_partition is None:
                errors[(topic_id, p.partition_index)] = code
                continue
            wanted[(topic_id, p.partition_index)] = _batches(p)
            state_partitions.add((SHARE_STATE_TOPIC, state_partition))

    if wanted:
        # A retry while this transaction's markers are being written gets the outcome.
        await services.transactions.wait_for_markers(txn_id)
        partitions = sorted(state_partitions)
        error = services.txn.add_to_ongoing(txn_id, request.producer_id, request.producer_epoch,
                                            partitions, now_ms=services.clock())
        if error is not ErrorCode.none:
            return fail(error)
        # The coordinator must know the partition before the staged batch can be on disk, or a
        # power cut could leave a transaction in it that no coordinator will end.
        await services.appends.sync([services.txn.log_for(txn_id)])
        # Nothing awaits from here to the appends: check again that the transaction is still
        # the one open (an EndTxn could have come in during the sync).
        verified = services.txn.verify_partitions(txn_id, request.producer_id,
                                                  request.producer_epoch, partitions)
        error = next((e for e in verified.values() if e is not ErrorCode.none), ErrorCode.none)
        if error is not ErrorCode.none:
            return fail(error)
        written: list[Written] = []
        now = services.clock()
        for (topic_id, partition), batches in wanted.items():
            code, w = share.stage_txn(group_id, member_id, topic_id, partition, batches,
                                      request.producer_id, request.producer_epoch, now)
            errors[(topic_id, partition)] = code
            if w is not None:
                written.append(w)
        await sync_written(ctx, written)

    by_topic: dict[uuid.UUID | None, list[Any]] = {}
    for (topic_id, partition), code in errors.items():
        by_topic.setdefault(topic_id, []).append(ctx.nested(
            "TxnShareAcknowledgePartitionResponse", partition_index=partition, error_code=code,
            error_message=None))
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
        responses=tuple(ctx.nested("TxnShareAcknowledgeTopicResponse", topic_id=t,
                                   partitions=tuple(ps)) for t, ps in by_topic.items()))


HANDLERS: dict[int, Handler] = {
    ApiKey.TXN_SHARE_ACKNOWLEDGE: handle_txn_share_acknowledge,
}
