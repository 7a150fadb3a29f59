"""The transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnHeartbeat (KIP-1309, a draft: exactly.protocol.drafts), WriteTxnMarkers, and the operator's
views ListTransactions, DescribeTransactions, DescribeProducers."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from exactly.groups import OFFSETS_TOPIC
from exactly.protocol import fast_responses
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE, partition_log

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnRequestFromV4,
        AddPartitionsToTxnRequestUpToV3,
        DescribeProducersRequest,
        DescribeTransactionsRequest,
        EndTxnRequest,
        InitProducerIdRequest,
        ListTransactionsRequest,
        TxnHeartbeatRequest,
        WriteTxnMarkersRequest,
    )

# First request version that knows PRODUCER_FENCED; older ones get INVALID_PRODUCER_EPOCH.
_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def _for_version(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced and ctx.api_version < _FENCED_SINCE.get(ctx.api_key, 0):
        return ErrorCode.invalid_producer_epoch
    # AddPartitionsToTxn v4+ is the brokers' verification call: it knows TRANSACTION_ABORTABLE
    # (KIP-890), as Kafka answers it; the broker maps it for the client's Produce version.
    if (error == ErrorCode.transaction_abortable and ctx.api_version < 5
            and ctx.api_key != ApiKey.ADD_PARTITIONS_TO_TXN):
        return ErrorCode.invalid_txn_state
    return error


async def handle_init_producer_id(ctx: RequestContext,
                                  request: InitProducerIdRequest) -> ResponsePayload:
    services = ctx.services
    # v6 (KIP-939); older versions have neither field.
    enable_2pc = bool(getattr(request, "enable2_pc", False))
    keep_prepared_txn = bool(getattr(request, "keep_prepared_txn", False))
    if request.transactional_id is None:
        # An idempotent producer takes part in no transaction: Enable2Pc means nothing to it and
        # is ignored, as Kafka 4.4 does. KeepPreparedTxn (KIP-939, which Kafka lacks) has no
        # transaction to keep: refused.
        if keep_prepared_txn:
            return _init_response(ctx, ErrorCode.invalid_request)
        # Kafka 3+: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679).
        if not ctx.authorize(Operation.IDEMPOTENT_WRITE) and not ctx.authorize_any(
                Operation.WRITE, ResourceType.TOPIC):
            return _init_response(ctx, ErrorCode.cluster_authorization_failed)
        # An idempotent producer gets a new id each time, as in Kafka.
        return _init_response(ctx, ErrorCode.none, services.producer_ids.generate(), 0)
    if enable_2pc and not services.config["transaction.two.phase.commit.enable"]:
        # The seed: with the broker setting off, 2PC is refused as unauthorized, ACLs or not.
        return _init_response(ctx, ErrorCode.transactional_id_authorization_failed)
    txn_id = request.transactional_id
    # KIP-939: 2PC needs TWO_PHASE_COMMIT on the transactional id besides WRITE.
    if not _may_write(ctx, txn_id) or (enable_2pc and not ctx.authorize(
            Operation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, txn_id)):
        return _init_response(ctx, ErrorCode.transactional_id_authorization_failed)
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    # v7 (KIP-1309): the producer's session timeout; -1 (and every older version): no session.
    session_ms = int(getattr(request, "transaction_session_timeout_ms", -1))

    def init() -> Any:
        return services.txn.init_producer_id(txn_id, timeout_ms, pid, epoch,
                                             now_ms=services.clock(), enable_2pc=enable_2pc,
                                             keep_prepared_txn=keep_prepared_txn,
                                             session_timeout_ms=session_ms)

    await services.transactions.wait_for_markers(txn_id)
    result = init()
    if result.markers is not None:
        # The previous instance left a transaction open: it is aborted with a bumped epoch
        # (fencing it), then the new instance gets its epoch.
        await services.transactions.finish(result.markers)
        result = init()
    if result.error != ErrorCode.none:
        return _init_response(ctx, _for_version(ctx, result.error))
    await services.appends.sync([services.txn.log_for(txn_id)])
    return _init_response(ctx, ErrorCode.none, result.producer_id, result.producer_epoch,
                          result.ongoing_producer_id, result.ongoing_producer_epoch)


def _may_write(ctx: RequestContext, txn_id: str) -> bool:
    return ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)


def _init_response(ctx: RequestContext, error: ErrorCode, producer_id: int = -1,
                   producer_epoch: int = -1, ongoing_producer_id: int = -1,
                   ongoing_producer_epoch: int = -1) -> ResponsePayload:
    # OngoingTxnProducerId/OngoingTxnEpoch exist from v6 on; build() drops them before.
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, producer_id=producer_id,
                        producer_epoch=producer_epoch, ongoing_txn_producer_id=ongoing_producer_id,
                        ongoing_txn_producer_epoch=ongoing_producer_epoch)


class _TopicPartitions(Protocol):
    """A topic and its partition indexes, as every AddPartitionsToTxn version nests them."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> tuple[int, ...]: ...


def _known_partitions(ctx: RequestContext, topics: Iterable[_TopicPartitions],
                      ) -> tuple[list[tuple[str, int]], dict[tuple[str, int], ErrorCode]]:
    wanted, unknown = [], {}
    for t in topics:
        info = ctx.services.logs.topic(t.name)
        for p in t.partitions:
            if partition_log(ctx, info, p) is None:
                unknown[(t.name, p)] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append((t.name, p))
    return wanted, unknown


def _add(ctx: RequestContext, txn_id: str, pid: int, epoch: int,
         topics: Sequence[_TopicPartitions],
         verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    if not _may_write(ctx, txn_id):
        return {(t.name, p): ErrorCode.transactional_id_authorization_failed
                for t in topics for p in t.partitions}
    allowed = ctx.authorized(Operation.WRITE, ResourceType.TOPIC, (t.name for t in topics))
    wanted, unknown = _known_partitions(ctx, [t for t in topics if t.name in allowed])
    unknown.update({(t.name, p): ErrorCode.topic_authorization_failed
                    for t in topics if t.name not in allowed for p in t.partitions})
    if unknown:
        # As Kafka: nothing is added when any partition is unknown.
        return {**unknown, **{tp: ErrorCode.operation_not_attempted for tp in wanted}}
    txn = ctx.services.txn
    if verify_only:
        return txn.verify_partitions(txn_id, pid, epoch, wanted)
    return txn.add_partitions(txn_id, pid, epoch, wanted, now_ms=ctx.services.clock())


def _by_topic(ctx: RequestContext,
              results: dict[tuple[str, int], ErrorCode]) -> dict[str, list[tuple[int, int]]]:
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append((partition, _for_version(ctx, error)))
    return by_topic


def _topic_results(ctx: RequestContext, results: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    return tuple(ctx.nested("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=tuple(
        ctx.nested("AddPartitionsToTxnPartitionResult", partition_index=partition,
                   partition_error_code=error) for partition, error in parts))
        for topic, parts in _by_topic(ctx, results).items())


async def handle_add_partitions_to_txn(ctx: RequestContext, request: AddPartitionsToTxnRequest,
                                       ) -> bytes | ResponsePayload:
    services = ctx.services
    txn = services.txn
    if ctx.api_version <= 3:
        client = cast("AddPartitionsToTxnRequestUpToV3", request)
        txn_id = client.v3_and_below_transactional_id
        await services.transactions.wait_for_markers(txn_id)
        results = _add(ctx, txn_id, client.v3_and_below_producer_id,
                       client.v3_and_below_producer_epoch, client.v3_and_below_topics, False)
        await services.appends.sync([txn.log_for(txn_id)])
        return fast_responses.add_partitions_to_txn(ctx.api_version,
                                                    _by_topic(ctx, results).items())
    if not ctx.authorize(Operation.CLUSTER_ACTION):
        # v4+ is the brokers' verification call (KIP-890), not a client's.
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed,
                            results_by_transaction=())
    transactions = cast("AddPartitionsToTxnRequestFromV4", request).transactions
    by_txn = []
    for t in transactions:
        await services.transactions.wait_for_markers(t.transactional_id)
        results = _add(ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics,
                       t.verify_only)
        by_txn.append(ctx.nested("AddPartitionsToTxnResult", transactional_id=t.transactional_id,
                                 topic_results=_topic_results(ctx, results)))
    await services.appends.sync({txn.log_for(t.transactional_id) for t in transactions})
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        results_by_transaction=tuple(by_txn))


async def handle_add_offsets_to_txn(ctx: RequestContext,
                                    request: AddOffsetsToTxnRequest) -> ResponsePayload:
    services = ctx.services
    if not _may_write(ctx, request.transactional_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.group_authorization_failed)
    offsets_partition = TopicPartition(OFFSETS_TOPIC,
                                       services.groups.offsets_partition(request.group_id))
    await services.transactions.wait_for_markers(request.transactional_id)
    error = services.txn.add_offsets(request.transactional_id, request.producer_id,
                                     request.producer_epoch, request.group_id, offsets_partition,
                                     now_ms=services.clock())
    if error == ErrorCode.none:
        await services.appends.sync([services.txn.log_for(request.transactional_id)])
    return ctx.response(throttle_time=NO_THROTTLE, error_code=_for_version(ctx, error))


async def handle_end_txn(ctx: RequestContext, request: EndTxnRequest) -> bytes:
    services = ctx.services
    if not _may_write(ctx, request.transactional_id):
        return fast_responses.end_txn(ctx.api_version,
                                      ErrorCode.transactional_id_authorization_failed)
    driver = services.transactions
    bump = ctx.api_version >= 5 and driver.transaction_version >= 2
    await driver.wait_for_markers(request.transactional_id)  # a retry gets the outcome
    result = services.txn.end_txn(request.transactional_id, request.producer_id,
                                  request.producer_epoch, request.committed, bump_epoch=bump,
                                  now_ms=services.clock())
    if result.error != ErrorCode.none:
        return fast_responses.end_txn(ctx.api_version, _for_version(ctx, result.error))
    if result.markers is not None:
        # Answered once the decision is durable; the markers follow (the transaction driver).
        await driver.decide(result.markers)
    else:
        await services.appends.sync([services.txn.log_for(request.transactional_id)])
    return fast_responses.end_txn(ctx.api_version, ErrorCode.none, result.producer_id,
                                  result.producer_epoch)


async def handle_txn_heartbeat(ctx: RequestContext,
                               request: TxnHeartbeatRequest) -> ResponsePayload:
    """KIP-1309: the producer is alive; its open transaction's session deadline moves on.
    Nothing is written, so nothing is synced."""
    services = ctx.services
    if not _may_write(ctx, request.transactional_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.transactional_id_authorization_failed)
    # No wait for markers being written, unlike EndTxn: the coordinator answers a fenced
    # identity PRODUCER_FENCED and the current one CONCURRENT_TRANSACTIONS meanwhile.
    error = services.txn.heartbeat(request.transactional_id, request.producer_id,
                                   request.producer_epoch, now_ms=services.clock())
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error)


async def handle_write_txn_markers(ctx: RequestContext,
                                   request: WriteTxnMarkersRequest) -> ResponsePayload:
    """Markers sent by a coordinator (another broker's, or an operator's tool)."""
    results, written = [], []
    may = ctx.authorize(Operation.CLUSTER_ACTION)
    for marker in request.markers:
        partitions: list[tuple[str, int]] = [
            (t.name, p) for t in marker.topics for p in t.partition_indexes]
        if not may:
            errors = dict.fromkeys(partitions, ErrorCode.cluster_authorization_failed)
            logs: list[Any] = []
        else:
            errors, logs = ctx.services.transactions.write_markers(
                marker.producer_id, marker.producer_epoch, commit=marker.transaction_result,
                coordinator_epoch=marker.coordinator_epoch, partitions=partitions)
        written.extend(logs)
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(ctx.nested(
                "WritableTxnMarkerPartitionResult", partition_index=partition, error_code=error))
        results.append(ctx.nested("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=tuple(
            ctx.nested("WritableTxnMarkerTopicResult", name=t, partitions=tuple(ps))
            for t, ps in by_topic.items())))
    await ctx.services.appends.sync(written)
    return ctx.response(markers=tuple(results))


async def handle_describe_transactions(ctx: RequestContext, request: DescribeTransactionsRequest,
                                       ) -> ResponsePayload:
    # An error answers the schema's defaults (producer id and epoch 0, no start time), as Kafka.
    states = []
    for txn_id in request.transactional_ids:
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            states.append(ctx.nested(
                "TransactionState", error_code=ErrorCode.transactional_id_authorization_failed,
                transactional_id=txn_id, transaction_state="", transaction_timeout=NO_THROTTLE,
                transaction_start_time=_time(0), producer_id=0, producer_epoch=0, topics=()))
            continue
        # An answered commit shows as complete.
        await ctx.services.transactions.wait_for_markers(txn_id)
        meta = ctx.services.txn.describe(txn_id)
        if meta is None:
            states.append(ctx.nested(
                "TransactionState", error_code=ErrorCode.transactional_id_not_found,
                transactional_id=txn_id, transaction_state="", transaction_timeout=NO_THROTTLE,
                transaction_start_time=_time(0), producer_id=0, producer_epoch=0, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            # Kafka leaves out the topics the principal may not describe.
            if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic):
                by_topic.setdefault(topic, []).append(partition)
        states.append(ctx.nested(
            "TransactionState", error_code=ErrorCode.none, transactional_id=txn_id,
            transaction_state=meta.state.display_name,
            transaction_timeout=datetime.timedelta(milliseconds=meta.txn_timeout_ms),
            transaction_start_time=_time(meta.txn_start_ms), producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=tuple(ctx.nested("TopicData", topic=t, partitions=tuple(ps))
                         for t, ps in by_topic.items())))
    return ctx.response(throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def _time(ms: int) -> datetime.datetime:
    if ms < 0:  # Kafka sends -1 for "none"; kio wants an aware datetime
        return datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


async def handle_list_transactions(ctx: RequestContext,
                                   request: ListTransactionsRequest) -> ResponsePayload:
    from exactly.txn import TxnState

    known = {s.display_name for s in TxnState}
    wanted = set(request.state_filters) & known
    unknown = tuple(s for s in request.state_filters if s not in known)
    pattern = getattr(request, "transactional_id_pattern", None)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error:  # KIP-1152: Kafka answers INVALID_REGULAR_EXPRESSION
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.invalid_regular_expression,
                            unknown_state_filters=(), transaction_states=())
    if request.state_filters and not wanted:
        # Only unknown states asked for: no transaction is in one of them (Kafka lists none).
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                            unknown_state_filters=unknown, transaction_states=())
    listed = ctx.services.txn.list_transactions(
        wanted or None, set(request.producer_id_filters) or None,
        getattr(request, "duration_filter", -1), now_ms=ctx.services.clock())
    states = tuple(
        ctx.nested("TransactionState", transactional_id=m.transactional_id,
                   producer_id=m.producer_id, transaction_state=m.state.display_name)
        for m in listed if (regex is None or regex.fullmatch(m.transactional_id))
        and ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        unknown_state_filters=unknown, transaction_states=states)


async def handle_describe_producers(ctx: RequestContext,
                                    request: DescribeProducersRequest) -> ResponsePayload:
    topics = []
    for t in request.topics:
        info = ctx.services.logs.topic(t.name)
        allowed = ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for p in t.partition_indexes:
            plog = partition_log(ctx, info, p)
            if not allowed:
                parts.append(ctx.nested("PartitionResponse", partition_index=p,
                                        error_code=ErrorCode.topic_authorization_failed,
                                        error_message=None, active_producers=()))
                continue
            if plog is None:
                parts.append(ctx.nested("PartitionResponse", partition_index=p,
                                        error_code=ErrorCode.unknown_topic_or_partition,
                                        error_message=None if info is not None else
                                        "This server does not host this topic-partition.",
                                        active_producers=()))
                continue
            producers = tuple(
                ctx.nested("ProducerState", producer_id=e.producer_id, producer_epoch=e.epoch,
                           last_sequence=e.last_sequence, last_timestamp=e.last_timestamp,
                           coordinator_epoch=e.coordinator_epoch,
                           current_txn_start_offset=(-1 if e.current_txn_first_offset is None
                                                     else e.current_txn_first_offset))
                for e in plog.producers())
            parts.append(ctx.nested("PartitionResponse", partition_index=p,
                                    error_code=ErrorCode.none, error_message=None,
                                    active_producers=producers))
        topics.append(ctx.nested("TopicResponse", name=t.name, partitions=tuple(parts)))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


HANDLERS: dict[int, Handler] = {
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.TXN_HEARTBEAT: handle_txn_heartbeat,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
}
