"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
TxnOffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, and KIP-848's
ConsumerGroupHeartbeat and ConsumerGroupDescribe — thin adapters over `exactly.groups`.

The coordinator is sans-IO: parked JoinGroup/SyncGroup answers come through callbacks, which
these handlers turn into futures.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from exactly.groups import OFFSETS_TOPIC, GroupCoordinator, JoinResult, OffsetToCommit, SyncResult
from exactly.groups.assignors import Assignment
from exactly.groups.consumer_coordinator import ConsumerHeartbeat, new_member_id
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers import share
from exactly.server.handlers.common import advertised_address

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupHeartbeatRequest,
        DeleteGroupsRequest,
        DescribeGroupsRequest,
        FindCoordinatorRequest,
        FindCoordinatorRequestFromV4,
        FindCoordinatorRequestUpToV3,
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        LeaveGroupRequestFromV3,
        LeaveGroupRequestUpToV2,
        ListGroupsRequest,
        OffsetCommitRequest,
        OffsetDeleteRequest,
        OffsetFetchRequest,
        OffsetFetchRequestFromV8,
        OffsetFetchRequestUpToV7,
        SyncGroupRequest,
        TxnOffsetCommitRequest,
    )

NO_THROTTLE = datetime.timedelta(0)
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1


def _ms(value: Any) -> int:
    """kio's i32Timedelta fields are timedeltas; plain ints pass through."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def _may(ctx: RequestContext, operation: Operation, group_id: str) -> bool:
    return ctx.authorize(operation, ResourceType.GROUP, group_id)


def _topic_errors(ctx: RequestContext, operation: Operation,
                  offsets: dict[tuple[str, int], OffsetToCommit],
                  ) -> dict[tuple[str, int], ErrorCode]:
    """Remove from `offsets` the partitions of topics the principal may not `operation`; their
    errors, TOPIC_AUTHORIZATION_FAILED, are returned."""
    if not ctx.authorizing:
        return {}
    allowed = ctx.authorized(operation, ResourceType.TOPIC, (t for t, _ in offsets))
    denied = [tp for tp in offsets if tp[0] not in allowed]
    for tp in denied:
        del offsets[tp]
    return dict.fromkeys(denied, ErrorCode.topic_authorization_failed)


def _partition_errors(ctx: RequestContext, api: str, topics: Sequence[Any],
                      errors: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    """The `{api}ResponseTopic`s answering the request's topics with an error per partition
    (OffsetCommit, TxnOffsetCommit, OffsetDelete)."""
    return tuple(
        ctx.nested(f"{api}ResponseTopic", name=topic.name, partitions=tuple(
            ctx.nested(f"{api}ResponsePartition", partition_index=p.partition_index,
                       error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions))
        for topic in topics
    )


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.services.groups


# -- FindCoordinator --------------------------------------------------------------------------


async def handle_find_coordinator(ctx: RequestContext,
                                  request: FindCoordinatorRequest) -> ResponsePayload:
    node_id = ctx.services.identity.node_id
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)

    def answer(key: str) -> tuple[ErrorCode, str | None]:
        # A single node: this broker coordinates every group and every transactional id.
        if key_type == KEY_TYPE_GROUP:
            if not _may(ctx, Operation.DESCRIBE, key):
                return ErrorCode.group_authorization_failed, None
            return ErrorCode.none, None
        if key_type == KEY_TYPE_TRANSACTION:
            if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                return ErrorCode.transactional_id_authorization_failed, None
            return ErrorCode.none, None
        return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"

    def fields(error: ErrorCode) -> dict[str, Any]:
        ok = error is ErrorCode.none
        return {"node_id": node_id if ok else -1,
                "host": advertised_address(ctx)[0] if ok else "",
                "port": advertised_address(ctx)[1] if ok else -1}

    if ctx.api_version >= 4:
        # Kafka's batched answer leaves every coordinator's message empty (not null).
        coordinators = []
        for key in cast("FindCoordinatorRequestFromV4", request).coordinator_keys:
            error, _message = answer(key)
            coordinators.append(ctx.nested("Coordinator", key=key, error_code=error,
                                           error_message="", **fields(error)))
        return ctx.response(throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
    error, message = answer(cast("FindCoordinatorRequestUpToV3", request).key)
    # v1-v3: Kafka sends Errors.message(): "NONE" on success, the error's text otherwise.
    if message is None:
        message = "NONE" if error is ErrorCode.none else error.name.replace("_", " ").lower()
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                        **fields(error))


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -------------------------------------------


async def handle_join_group(ctx: RequestContext, request: JoinGroupRequest) -> ResponsePayload:
    if not _may(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                            generation_id=-1, protocol_type=None,
                            protocol_name=None if ctx.api_version >= 7 else "", leader="",
                            skip_assignment=False, member_id="", members=())
    loop = asyncio.get_running_loop()
    future: asyncio.Future[JoinResult] = loop.create_future()

    def respond(result: JoinResult) -> None:
        if not future.done():
            future.set_result(result)

    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(getattr(request, "rebalance_timeout", request.session_timeout))
    if rebalance_ms < 0:
        rebalance_ms = session_ms
    _coordinator(ctx).join_group(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "", client_host=ctx.client_host,
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        # MEMBER_ID_REQUIRED is understood from v4 on (KIP-394).
        require_known_member_id=ctx.api_version >= 4,
        # A restarted static leader may be told to skip the assignment from v9 on (KIP-814).
        supports_skip_assignment=ctx.api_version >= 9,
        now_ms=ctx.services.clock(), respond=respond,
    )
    result = await future
    error = result.error
    if error is ErrorCode.member_id_required and ctx.api_version < 4:  # cannot happen; be safe
        error = ErrorCode.unknown_member_id
    members = tuple(
        ctx.nested("JoinGroupResponseMember", member_id=m.member_id,
                   group_instance_id=m.group_instance_id, metadata=m.metadata)
        for m in result.members
    )
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=error, generation_id=result.generation_id,
        # v7+ make these nullable; older versions send "" where Kafka has no protocol.
        protocol_type=result.protocol_type,
        protocol_name=(result.protocol_name if ctx.api_version >= 7
                       else result.protocol_name or ""),
        leader=result.leader_id, skip_assignment=result.skip_assignment,
        member_id=result.member_id, members=members,
    )


async def handle_sync_group(ctx: RequestContext, request: SyncGroupRequest) -> ResponsePayload:
    if not _may(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                            protocol_type=None, protocol_name=None, assignment=b"")
    loop = asyncio.get_running_loop()
    future: asyncio.Future[SyncResult] = loop.create_future()

    def respond(result: SyncResult) -> None:
        if not future.done():
            future.set_result(result)

    coordinator = _coordinator(ctx)
    coordinator.sync_group(
        group_id=request.group_id, generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in request.assignments},
        now_ms=ctx.services.clock(), respond=respond,
    )
    result = await future
    return ctx.response(throttle_time=NO_THROTTLE, error_code=result.error,
                        protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                        assignment=result.assignment)


async def handle_heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> ResponsePayload:
    if not _may(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed)
    error = _coordinator(ctx).heartbeat(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id, now_ms=ctx.services.clock(),
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error)


async def handle_leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> ResponsePayload:
    if not _may(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                            members=())
    identities: list[tuple[str, str | None]]
    if ctx.api_version >= 3:
        identities = [(m.member_id, m.group_instance_id)
                      for m in cast("LeaveGroupRequestFromV3", request).members]
    else:
        identities = [(cast("LeaveGroupRequestUpToV2", request).member_id, None)]
    top, errors = _coordinator(ctx).leave_group(group_id=request.group_id, members=identities,
                                               now_ms=ctx.services.clock())
    if ctx.api_version < 3:
        # v0-2 have one error code: the top-level one, else the member's (Kafka's getError).
        error = top if top is not ErrorCode.none else (errors[0] if errors else top)
        return ctx.response(throttle_time=NO_THROTTLE, error_code=error)
    members = tuple(
        ctx.nested("MemberResponse", member_id=mid, group_instance_id=iid, error_code=err)
        for (mid, iid), err in zip(identities, errors, strict=False)
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=top, members=members)


# -- OffsetCommit / OffsetFetch ---------------------------------------------------------------


async def handle_offset_commit(ctx: RequestContext,
                               request: OffsetCommitRequest) -> ResponsePayload:
    offsets: dict[tuple[str, int], OffsetToCommit] = {
        (topic.name, p.partition_index): OffsetToCommit(
            p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
        for topic in request.topics for p in topic.partitions
    }
    if not _may(ctx, Operation.READ, request.group_id):
        errors = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
        offsets = {}
    else:
        errors = _topic_errors(ctx, Operation.READ, offsets)
    if offsets or not errors:
        result = _coordinator(ctx).commit_offsets(
            group_id=request.group_id, member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            generation_id=request.generation_id_or_member_epoch, offsets=offsets,
            now_ms=ctx.services.clock(), api_version=ctx.api_version,
        )
        errors.update(result.errors)
        if result.log is not None:
            # Acknowledge a commit only once it is durable under the flush policy.
            await ctx.services.appends.sync([result.log])
    topics = _partition_errors(ctx, "OffsetCommit", request.topics, errors)
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)


# -- TxnOffsetCommit --------------------------------------------------------------------------

# Errors of the transaction check TxnOffsetCommit answers as they are; they are fatal or abortable
# for the client (KIP-890). Any other one (CONCURRENT_TRANSACTIONS, a coordinator loading or
# moving) becomes COORDINATOR_NOT_AVAILABLE, which every client retries.
_TXN_ERRORS_AS_IS = frozenset({
    ErrorCode.invalid_txn_state, ErrorCode.invalid_producer_id_mapping,
    ErrorCode.invalid_producer_epoch, ErrorCode.transactional_id_authorization_failed,
})


def _txn_error(version: int, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.none or error in _TXN_ERRORS_AS_IS:
        return error
    if error == ErrorCode.producer_fenced:
        # TxnOffsetCommit has no version that knows PRODUCER_FENCED; Kafka's log append
        # answers a fenced producer with INVALID_PRODUCER_EPOCH here.
        return ErrorCode.invalid_producer_epoch
    if error == ErrorCode.transaction_abortable:
        return error if version >= 4 else ErrorCode.invalid_txn_state
    return ErrorCode.coordinator_not_available


async def handle_txn_offset_commit(ctx: RequestContext,
                                   request: TxnOffsetCommitRequest) -> ResponsePayload:
    coordinator = _coordinator(ctx)
    services = ctx.services
    # v6 (KIP-1319) names the topics by id: an id this broker does not know is UNKNOWN_TOPIC_ID,
    # the other topics go on.
    names = _txn_offset_topic_names(ctx, request)
    request_topics: Sequence[Any] = request.topics
    offsets: dict[tuple[str, int], OffsetToCommit] = {
        (name, p.partition_index): OffsetToCommit(
            p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
        for topic, name in zip(request_topics, names, strict=True) if name is not None
        for p in topic.partitions
    }
    group_id, txn_id = request.group_id, request.transactional_id
    pid, epoch = request.producer_id, request.producer_epoch
    errors: dict[tuple[str, int], ErrorCode] | None = None
    to_sync = []
    denied: dict[tuple[str, int], ErrorCode] = {}
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        errors = dict.fromkeys(offsets, ErrorCode.transactional_id_authorization_failed)
    elif not _may(ctx, Operation.READ, group_id):
        errors = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
    else:
        denied = _topic_errors(ctx, Operation.READ, offsets)
        if denied and not offsets:
            errors = denied
    if errors is None and group_id:  # an empty group id gets INVALID_GROUP_ID from the coordinator
        tp = TopicPartition(OFFSETS_TOPIC, coordinator.offsets_partition(group_id))
        txn = services.txn
        await services.transactions.wait_for_markers(txn_id)
        if ctx.api_version >= 5:
            # Transaction version 2 (KIP-890 part 2): the client sends no AddOffsetsToTxn; this
            # request adds the group's offsets partition to the transaction itself.
            checked = txn.add_partitions(txn_id, pid, epoch, [tp], now_ms=services.clock(),
                                         client_transaction_version=2)
        else:
            checked = txn.verify_partitions(txn_id, pid, epoch, [tp])
        error = _txn_error(ctx.api_version, checked.get(tp, ErrorCode.invalid_txn_state))
        if error != ErrorCode.none:
            errors = {**denied, **dict.fromkeys(offsets, error)}
        elif ctx.api_version >= 5:
            to_sync.append(txn.log_for(txn_id))
    if errors is None:
        # No await between the transaction check and the append: no marker can slip between.
        result = coordinator.commit_txn_offsets(
            group_id, pid, epoch, offsets, member_id=getattr(request, "member_id", ""),
            generation_id=getattr(request, "generation_id", -1),
            group_instance_id=getattr(request, "group_instance_id", None),
            now_ms=services.clock(),
        )
        errors = {**denied, **result.errors}
        if result.log is not None:
            to_sync.append(result.log)
    if to_sync:
        # Acknowledge only once the offsets (and the partition's place in the transaction) are
        # durable under the flush policy.
        await services.appends.sync(to_sync)
    if ctx.api_version >= 6:
        return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(
            ctx.nested("TxnOffsetCommitResponseTopic", topic_id=topic.topic_id, partitions=tuple(
                ctx.nested("TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                           error_code=(ErrorCode.unknown_topic_id if name is None
                                       else errors[(name, p.partition_index)]))
                for p in topic.partitions))
            for topic, name in zip(request_topics, names, strict=True)))
    topics = _partition_errors(ctx, "TxnOffsetCommit", request.topics, errors)
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)


def _txn_offset_topic_names(ctx: RequestContext,
                            request: TxnOffsetCommitRequest) -> list[str | None]:
    """The name of each topic of the request: as given before v6; from its id in v6 (KIP-1319),
    None for an id this broker does not know."""
    topics: Sequence[Any] = request.topics
    if ctx.api_version < 6:
        return [topic.name for topic in topics]
    logs = ctx.services.logs
    infos = [None if topic.topic_id is None else logs.topic_by_id(topic.topic_id)
             for topic in topics]
    return [None if info is None else info.name for info in infos]


class _TopicPartitionIndexes(Protocol):
    """A topic and partition indexes, as every OffsetFetch version nests them."""

    @property
    def name(self) -> str: ...

    @property
    def partition_indexes(self) -> tuple[int, ...]: ...


def _fetch_topics(ctx: RequestContext, group_id: str,
                  topics: Sequence[_TopicPartitionIndexes] | None, *, suffix: str,
                  require_stable: bool) -> tuple:
    """One group's OffsetFetch answer. `suffix` is "" for v1-7 names, "s" for the v8+ ones.

    With `require_stable` (v7+, read_committed consumers) a partition whose offset waits on an
    open transaction answers UNSTABLE_OFFSET_COMMIT, which the client retries, as in Kafka."""
    coordinator = _coordinator(ctx)
    wanted = None if topics is None else [
        (t.name, p) for t in topics for p in t.partition_indexes
    ]
    if not _may(ctx, Operation.DESCRIBE, group_id):
        found: dict[Any, Any] = dict.fromkeys(wanted or ())
        allowed: set[str] = set()
        error = ErrorCode.group_authorization_failed
    else:
        found = coordinator.fetch_offsets(group_id, wanted)
        # Kafka: a requested topic the principal may not describe answers an error; with all
        # topics asked for, such topics are left out.
        allowed = ctx.authorized(Operation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in found))
        error = ErrorCode.topic_authorization_failed
    unstable = coordinator.pending_partitions(group_id) if require_stable else set()
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), committed in found.items():
        if topic not in allowed:
            if topics is not None:
                by_topic.setdefault(topic, []).append(ctx.nested(
                    "OffsetFetchResponsePartition" + suffix, partition_index=partition,
                    committed_offset=-1, committed_leader_epoch=-1, metadata="",
                    error_code=error))
            continue
        if (topic, partition) in unstable:
            committed = None
        by_topic.setdefault(topic, []).append(ctx.nested(
            "OffsetFetchResponsePartition" + suffix, partition_index=partition,
            committed_offset=committed.offset if committed else -1,
            committed_leader_epoch=committed.leader_epoch if committed else -1,
            metadata=committed.metadata if committed else "",
            error_code=(ErrorCode.unstable_offset_commit if (topic, partition) in unstable
                        else ErrorCode.none)))
    if topics is not None:  # keep the request's topic order, including topics with no offsets
        for t in topics:
            by_topic.setdefault(t.name, [])
    return tuple(
        ctx.nested("OffsetFetchResponseTopic" + suffix, name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )


async def handle_offset_fetch(ctx: RequestContext,
                              request: OffsetFetchRequest) -> ResponsePayload:
    stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= 8:
        groups = []
        for g in cast("OffsetFetchRequestFromV8", request).groups:
            error = _group_error(ctx, g.group_id)
            if error is ErrorCode.none:
                # v9: a consumer-group member's fetch carries its id and epoch (KIP-848).
                error = _coordinator(ctx).validate_offset_fetch(
                    g.group_id, getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            groups.append(ctx.nested(
                "OffsetFetchResponseGroup", group_id=g.group_id, error_code=error,
                topics=(_fetch_topics(ctx, g.group_id, g.topics, suffix="s",
                                      require_stable=stable)
                        if error is ErrorCode.none else ())))
        return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))
    single = cast("OffsetFetchRequestUpToV7", request)
    topics = _fetch_topics(ctx, single.group_id, single.topics, suffix="",
                           require_stable=stable)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=_group_error(ctx, single.group_id),
                        topics=topics)


def _group_error(ctx: RequestContext, group_id: str) -> ErrorCode:
    if _may(ctx, Operation.DESCRIBE, group_id):
        return ErrorCode.none
    return ErrorCode.group_authorization_failed


# -- DescribeGroups / ListGroups / DeleteGroups -----------------------------------------------


async def handle_describe_groups(ctx: RequestContext,
                                 request: DescribeGroupsRequest) -> ResponsePayload:
    coordinator = _coordinator(ctx)
    described = []
    with_ops = bool(getattr(request, "include_authorized_operations", False))
    for group_id in request.groups:
        if not _may(ctx, Operation.DESCRIBE, group_id):
            described.append(ctx.nested(
                "DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                group_id=group_id, group_state="", protocol_type="", protocol_data="",
                members=(), authorized_operations=-(2**31)))
            continue
        if share.is_share_group(ctx, group_id):  # KIP-932: not a classic group
            described.append(ctx.nested(
                "DescribedGroup", error_code=ErrorCode.group_id_not_found,
                error_message=f"group {group_id} is a share group: use ShareGroupDescribe",
                group_id=group_id, group_state="Dead", protocol_type="", protocol_data="",
                members=(), authorized_operations=-(2**31)))
            continue
        d = coordinator.describe_group(group_id, ctx.services.clock())
        members = tuple(
            ctx.nested("DescribedGroupMember", member_id=m.member_id,
                       group_instance_id=m.group_instance_id, client_id=m.client_id,
                       client_host=m.client_host, member_metadata=m.metadata,
                       member_assignment=m.assignment)
            for m in d.members
        )
        described.append(ctx.nested(
            "DescribedGroup", error_code=ErrorCode.none, group_id=d.group_id,
            group_state=d.state, protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            members=members,
            authorized_operations=(ctx.authorized_operations(ResourceType.GROUP, d.group_id)
                                   if with_ops else -(2**31))))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(described))


async def handle_list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ResponsePayload:
    states = set(getattr(request, "states_filter", ()) or ())
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    listed = [g for g in (_coordinator(ctx).list_groups(states, ctx.services.clock())
                          + share.listings(ctx, states))
              if not types or g.group_type in types]
    if not ctx.authorize(Operation.DESCRIBE):  # else only the groups it may describe
        listed = [g for g in listed if _may(ctx, Operation.DESCRIBE, g.group_id)]
    groups = tuple(
        ctx.nested("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type,
                   group_state=g.state, group_type=g.group_type)
        for g in listed
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)


async def handle_delete_groups(ctx: RequestContext,
                               request: DeleteGroupsRequest) -> ResponsePayload:
    names: list[str] = list(request.groups_names)
    allowed = [n for n in names if _may(ctx, Operation.DELETE, n)]
    errors = dict.fromkeys(names, ErrorCode.group_authorization_failed)
    shared = [n for n in allowed if share.is_share_group(ctx, n)]  # KIP-932
    errors.update(await share.delete_share_groups(ctx, shared))
    allowed = [n for n in allowed if n not in shared]
    if allowed:
        errors.update(_coordinator(ctx).delete_groups(allowed, ctx.services.clock()))
    results = tuple(
        ctx.nested("DeletableGroupResult", group_id=name, error_code=errors[name])
        for name in names
    )
    return ctx.response(throttle_time=NO_THROTTLE, results=results)


async def handle_offset_delete(ctx: RequestContext,
                               request: OffsetDeleteRequest) -> ResponsePayload:
    """OffsetDelete (KIP-496): DELETE on the group, READ on each topic, as Kafka checks."""
    if not _may(ctx, Operation.DELETE, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.group_authorization_failed, topics=())
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    errors = _topic_errors(ctx, Operation.READ, dict.fromkeys(wanted, OffsetToCommit(-1)))
    logs = ctx.services.logs
    for tp in wanted:
        info = logs.topic(tp[0])
        if tp not in errors and (info is None or not 0 <= tp[1] < info.num_partitions):
            errors[tp] = ErrorCode.unknown_topic_or_partition
    top, result = _coordinator(ctx).delete_offsets(
        request.group_id, [tp for tp in wanted if tp not in errors], ctx.services.clock())
    if top is not ErrorCode.none:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=top, topics=())
    if result.log is not None:  # the tombstones are durable before the answer
        await ctx.services.appends.sync([result.log])
    errors.update(result.errors)
    topics = _partition_errors(ctx, "OffsetDelete", request.topics, errors)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=topics)


# -- ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) --------------------------------


def _assignment(topic_partitions: Sequence[Any] | None) -> Assignment | None:
    if topic_partitions is None:
        return None
    result: Assignment = {}
    for tp in topic_partitions:
        if tp.topic_id is not None and tp.partitions:
            result[tp.topic_id] = result.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return result


def _topic_partitions(ctx: RequestContext, assignment: Assignment, *,
                      names: bool = False) -> tuple[Any, ...]:
    logs = ctx.services.logs
    entries = []
    for topic_id in sorted(assignment, key=str):
        fields: dict[str, Any] = {"topic_id": topic_id,
                                  "partitions": tuple(sorted(assignment[topic_id]))}
        if names:
            info = logs.topic_by_id(topic_id)
            fields["topic_name"] = info.name if info is not None else ""
        entries.append(ctx.nested("TopicPartitions", **fields))
    return tuple(entries)


async def handle_consumer_group_heartbeat(
        ctx: RequestContext, request: ConsumerGroupHeartbeatRequest) -> ResponsePayload:
    def refuse(error: ErrorCode, message: str | None) -> ResponsePayload:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                            member_id=None, member_epoch=0,  # Kafka's error answer: 0
                            heartbeat_interval=datetime.timedelta(0),
                            assignment=None)

    if not _may(ctx, Operation.READ, request.group_id):
        return refuse(ErrorCode.group_authorization_failed, None)
    member_id = request.member_id
    if not member_id and ctx.api_version == 0 and request.member_epoch == 0:
        member_id = new_member_id()  # v0: the coordinator names new members
    result = _coordinator(ctx).consumer_heartbeat(ConsumerHeartbeat(
        group_id=request.group_id, member_id=member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=(tuple(request.subscribed_topic_names)
                                if request.subscribed_topic_names is not None else None),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=_assignment(request.topic_partitions),
        client_id=ctx.client_id or "", client_host=ctx.client_host,
    ), ctx.services.clock())
    if result.error is not ErrorCode.none:
        return refuse(result.error, result.error_message)
    if result.log is not None:
        # Answer only once the group's new state is durable under the flush policy.
        await ctx.services.appends.sync([result.log])
    assignment = None
    if result.assignment is not None:
        assignment = ctx.nested("Assignment",
                                topic_partitions=_topic_partitions(ctx, result.assignment))
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment)


async def handle_consumer_group_describe(
        ctx: RequestContext, request: ConsumerGroupDescribeRequest) -> ResponsePayload:
    consumer = _coordinator(ctx).consumer
    default_assignor = consumer.config.consumer_assignors[0]
    described = []
    for group_id in request.group_ids:
        base = {"group_id": group_id, "group_state": "", "group_epoch": -1,
                "assignment_epoch": -1, "assignor_name": "", "members": (),
                "authorized_operations": -(2**31)}
        if not _may(ctx, Operation.DESCRIBE, group_id):
            described.append(ctx.nested("DescribedGroup", **base,
                                        error_code=ErrorCode.group_authorization_failed))
            continue
        group = consumer.describe(group_id)
        if group is None or group.consumer is None:
            described.append(ctx.nested(
                "DescribedGroup", **base, error_code=ErrorCode.group_id_not_found,
                error_message=f"Group {group_id} is not a consumer group."))
            continue
        cg = group.consumer
        members = tuple(
            ctx.nested(
                "Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=tuple(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex or "",  # Kafka: "" for none
                assignment=ctx.nested("Assignment", topic_partitions=_topic_partitions(
                    ctx, m.assigned, names=True)),
                target_assignment=ctx.nested("Assignment", topic_partitions=_topic_partitions(
                    ctx, cg.target.get(m.member_id, {}), names=True)),
                member_type=0 if m.classic is not None else 1)  # classic / consumer
            for m in cg.members.values())
        with_ops = request.include_authorized_operations
        described.append(ctx.nested(
            "DescribedGroup", error_code=ErrorCode.none, error_message=None, group_id=group_id,
            group_state=cg.state_name(), group_epoch=cg.group_epoch,
            assignment_epoch=cg.assignment_epoch,
            assignor_name=cg.preferred_assignor(default_assignor), members=members,
            authorized_operations=(ctx.authorized_operations(ResourceType.GROUP, group_id)
                                   if with_ops else -(2**31))))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(described))


HANDLERS: dict[int, Handler] = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
}
