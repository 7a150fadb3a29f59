"""Share groups (KIP-932): ShareGroupHeartbeat v1, ShareGroupDescribe v1, ShareFetch v1,
ShareAcknowledge v1; and what the classic group handlers ask about share groups (ListGroups,
DescribeGroups, DeleteGroups). The administration of share groups' offsets and configs is in
share_admin.py.

The state machines are in exactly/share; this module reads the log for them and answers. What
an acknowledgement, a release or an initialization changed is appended to `__share_group_state`
and synced under the flush policy before the answer goes out. A ShareFetch below its min_bytes
with nothing acquired waits for an append to one of its partitions, up to max_wait_ms, as Fetch
does. Records go out as stored (whole batches); AcquiredRecords says which offsets the member
got, with their delivery counts.

A share session belongs to the connection that opened it (`ctx.connection_id`): when that
connection is gone, network.py calls `connection_closed`, and the session ends as with epoch -1
(KAFKA-19015). A ShareFetch still waiting for records then (max_wait) acquires nothing more.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from exactly.groups.metadata_manager import GroupListing
from exactly.log import PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE
from exactly.share.config import READ_COMMITTED
from exactly.share.coordinator import ShareCoordinator
from exactly.share.fetch import Fetched, acquire_from_log
from exactly.share.partition import AckBatch
from exactly.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from exactly.share.state_store import Written

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        ShareAcknowledgeRequest,
        ShareFetchRequest,
        ShareGroupDescribeRequest,
        ShareGroupHeartbeatRequest,
    )
    from exactly.server.services import Services

_Partition = tuple[uuid.UUID, int]


def _ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def coordinator(ctx: RequestContext) -> ShareCoordinator:
    return ctx.services.share


def _share_or_none(ctx: RequestContext) -> ShareCoordinator | None:
    # The group handlers' own tests give them services without share groups.
    share: ShareCoordinator | None = getattr(ctx.services, "share", None)
    return share


def is_share_group(ctx: RequestContext, group_id: str) -> bool:
    """Is `group_id` a share group? (For the classic/consumer group handlers: one namespace.)"""
    share = _share_or_none(ctx)
    return share is not None and share.is_share_group(group_id)


async def sync_written(ctx: RequestContext, written: Iterable[Written | None]) -> None:
    logs = {w.log for w in written if w is not None}
    if logs:
        await ctx.services.appends.sync(logs)


def other_group_type(ctx: RequestContext, group_id: str) -> bool:
    """Is `group_id` a classic or consumer group? The group-id namespace is shared."""
    return any(g.group_id == group_id and g.state != "Dead"
               for g in ctx.services.groups.list_groups())


# -- ShareGroupHeartbeat ----------------------------------------------------------------------

async def handle_heartbeat(ctx: RequestContext,
                           request: ShareGroupHeartbeatRequest) -> ResponsePayload:
    def error(code: ErrorCode, message: str) -> ResponsePayload:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                            member_id=None, member_epoch=0, heartbeat_interval=NO_THROTTLE,
                            assignment=None)

    group_id = request.group_id
    if not group_id:
        return error(ErrorCode.invalid_request, "GroupId must not be empty")
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, group_id):
        return error(ErrorCode.group_authorization_failed, f"not allowed to READ group {group_id}")
    if not coordinator(ctx).is_share_group(group_id) and other_group_type(ctx, group_id):
        return error(ErrorCode.group_id_not_found, (
            f"group {group_id} is a consumer group, not a share group: pick another group.id"))
    subscribed = request.subscribed_topic_names
    if subscribed and ctx.authorizing:
        allowed = ctx.authorized(Operation.DESCRIBE, ResourceType.TOPIC, subscribed)
        if len(allowed) != len(set(subscribed)):
            return error(ErrorCode.topic_authorization_failed,
                         f"not allowed to DESCRIBE {sorted(set(subscribed) - allowed)}")
    result, written = coordinator(ctx).heartbeat(
        group_id=group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        subscribed=subscribed, rack_id=request.rack_id, client_id=ctx.client_id or "",
        client_host=ctx.client_host, now_ms=ctx.services.clock())
    await sync_written(ctx, written)
    if result.error is not ErrorCode.none:
        return error(result.error, result.message or "")
    assignment = None
    if result.assignment is not None:
        assignment = ctx.nested("Assignment", topic_partitions=tuple(
            ctx.nested("TopicPartitions", topic_id=topic_id, partitions=parts)
            for topic_id, parts in sorted(result.assignment.items())))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        error_message=None, member_id=result.member_id,
                        member_epoch=result.member_epoch,
                        heartbeat_interval=_ms(result.heartbeat_interval_ms),
                        assignment=assignment)


# -- ShareGroupDescribe -----------------------------------------------------------------------

async def handle_describe(ctx: RequestContext,
                          request: ShareGroupDescribeRequest) -> ResponsePayload:
    share = coordinator(ctx)
    groups = []
    for group_id in request.group_ids:
        ops = (ctx.authorized_operations(ResourceType.GROUP, group_id)
               if request.include_authorized_operations else -2147483648)
        group = share.groups.get(group_id)
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            code, message = ErrorCode.group_authorization_failed, "not allowed to DESCRIBE"
        elif group is None:
            code, message = ErrorCode.group_id_not_found, (
                f"group {group_id} is not a share group" if other_group_type(ctx, group_id)
                else f"group {group_id} does not exist")
        else:
            code, message = ErrorCode.none, None
        if group is None or code is not ErrorCode.none:
            groups.append(ctx.nested("DescribedGroup", error_code=code, error_message=message,
                                     group_id=group_id, group_state="Dead", group_epoch=-1,
                                     assignment_epoch=-1, assignor_name="", members=(),
                                     authorized_operations=ops))
            continue
        members = []
        for m in group.members.values():
            parts = []
            for topic_id, ps in sorted(m.assignment.items()):
                info = ctx.services.logs.topic_by_id(topic_id)
                parts.append(ctx.nested("TopicPartitions", topic_id=topic_id,
                                        topic_name=info.name if info else "", partitions=ps))
            members.append(ctx.nested(
                "Member", member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=m.subscribed,
                assignment=ctx.nested("Assignment", topic_partitions=tuple(parts))))
        groups.append(ctx.nested(
            "DescribedGroup", error_code=ErrorCode.none, error_message=None, group_id=group_id,
            group_state=group.state, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=share.assignor,
            members=tuple(members), authorized_operations=ops))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))


# -- ShareFetch / ShareAcknowledge ------------------------------------------------------------

def _ack_batches(batches: Sequence[Any]) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]


def _acknowledge(ctx: RequestContext, group_id: str, member_id: str,
                 topics: Sequence[Any]) -> tuple[dict[_Partition, ErrorCode], list[Written]]:
    """Apply the acknowledgements of a ShareFetch or ShareAcknowledge, per partition."""
    share, now = coordinator(ctx), ctx.services.clock()
    errors: dict[_Partition, ErrorCode] = {}
    written: list[Written] = []
    for topic in topics:
        info = ctx.services.logs.topic_by_id(topic.topic_id) if topic.topic_id else None
        for p in topic.partitions:
            key = (topic.topic_id, p.partition_index)
            if not p.acknowledgement_batches:
                continue
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                errors[key] = ErrorCode.unknown_topic_id if info is None else \
                    ErrorCode.unknown_topic_or_partition
                continue
            code, w = share.acknowledge(group_id, member_id, topic.topic_id, p.partition_index,
                                        _ack_batches(p.acknowledgement_batches), now)
            errors[key] = code
            if w is not None:
                written.append(w)
    return errors, written


def _has_acks(topics: Sequence[Any]) -> bool:
    return any(p.acknowledgement_batches for t in topics for p in t.partitions)


def _session(ctx: RequestContext, group_id: str, member_id: str, epoch: int,
             added: Sequence[_Partition], forgotten: Sequence[_Partition]) -> ShareSession | ErrorCode:
    share = coordinator(ctx)
    if epoch == INITIAL_EPOCH:
        # As Kafka 4.4: a share session needs the share group, not membership of it (a member
        # that left, or has not joined yet, may fetch and acknowledge).
        if not share.is_share_group(group_id):
            return ErrorCode.unknown_member_id
        return share.sessions.open(group_id, member_id, added, ctx.connection_id)
    session = share.sessions.get(group_id, member_id, epoch)
    if isinstance(session, ShareSession) and epoch != FINAL_EPOCH:
        session.update(added, forgotten)
    return session


def _refused(ctx: RequestContext, request: Any) -> tuple[ErrorCode, str] | None:
    """What ShareFetch and ShareAcknowledge check first: the ids, and READ on the group."""
    if not request.group_id:
        return ErrorCode.invalid_request, "GroupId must not be empty"
    if not request.member_id:
        return ErrorCode.invalid_request, "MemberId must not be empty"
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed, f"not allowed to READ group {request.group_id}"
    return None


async def handle_share_fetch(ctx: RequestContext, request: ShareFetchRequest) -> ResponsePayload:
    share = coordinator(ctx)

    def fail(code: ErrorCode, message: str | None) -> ResponsePayload:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                            acquisition_lock_timeout=NO_THROTTLE, responses=(),
                            node_endpoints=())

    refused = _refused(ctx, request)
    if refused is not None:
        return fail(*refused)
    group_id, member_id = str(request.group_id), str(request.member_id)
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH and _has_acks(request.topics):
        return fail(ErrorCode.invalid_request,
                    "acknowledgements cannot come with ShareSessionEpoch 0 (a new session)")
    added = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions
             if t.topic_id is not None]
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions
                 if t.topic_id is not None]
    session = _session(ctx, group_id, member_id, epoch, added, forgotten)
    if isinstance(session, ErrorCode):
        return fail(session, _session_message(session))
    ack_errors, written = _acknowledge(ctx, group_id, member_id, request.topics)
    settings = share.settings(group_id)
    if epoch == FINAL_EPOCH:
        written += share.close_session(group_id, member_id, ctx.services.clock())
        await sync_written(ctx, written)
        return ctx.response(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
            acquisition_lock_timeout=_ms(settings.record_lock_duration_ms),
            responses=_fetch_responses(ctx, ack_errors, {}), node_endpoints=())
    fetched: dict[_Partition, Fetched] = {}
    # max_bytes 0 reads nothing, as Kafka (no first batch past the limit, unlike Fetch).
    if request.max_records > 0 and request.max_bytes > 0 and session.partitions:
        fetched = await _fetch(ctx, request, session, written)
    if epoch == INITIAL_EPOCH:  # a new session's answer names each of its partitions, as Kafka
        for key in added:
            fetched.setdefault(key, Fetched())
    await sync_written(ctx, written)
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        acquisition_lock_timeout=_ms(settings.record_lock_duration_ms),
        responses=_fetch_responses(ctx, ack_errors, fetched), node_endpoints=())


def _session_message(error: ErrorCode) -> str | None:
    """The top-level message of a refused share session: none for the session errors, which
    Kafka sends bare (the code says it all), ours for the others."""
    if error in (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch):
        return None
    return _SESSION_ERRORS.get(error, "the share session was refused")


_SESSION_ERRORS = {
    ErrorCode.unknown_member_id: "the member is not in the share group: heartbeat (join) first",
    ErrorCode.share_session_not_found: (
        "no share session for this member: open one with ShareSessionEpoch 0"),
    ErrorCode.invalid_share_session_epoch: (
        "wrong ShareSessionEpoch: send the next one, or 0 to open a new session"),
    ErrorCode.share_session_limit_reached: (
        "the broker holds group.share.max.share.sessions sessions: retry later"),
}


async def _fetch(ctx: RequestContext, request: ShareFetchRequest, session: ShareSession,
                 written: list[Written]) -> dict[_Partition, Fetched]:
    share = coordinator(ctx)
    group_id, member_id, partitions = session.group_id, session.member_id, session.partitions
    settings = share.settings(group_id)
    committed = settings.isolation_level == READ_COMMITTED
    lock_ms, holding = settings.record_lock_duration_ms, False
    deadline = time.monotonic() + request.max_wait.total_seconds()
    targets = [(key, _resolve(ctx, key)) for key in partitions]
    out: dict[_Partition, Fetched] = {}
    budget, records_left, total = int(request.max_bytes), int(request.max_records), 0
    while True:  # what a round acquires adds to the answer; it waits for min_bytes
        now = ctx.services.clock()
        for key, plog in targets:
            if isinstance(plog, ErrorCode):
                out[key] = Fetched(plog)
                continue
            sp, changed = share.fetchable(group_id, key[0], key[1], plog, now)
            written += changed
            if records_left <= 0 or (budget <= 0 and total > 0):
                continue
            got = acquire_from_log(sp, plog, member_id, read_committed=committed,
                                   max_records=records_left, max_bytes=budget,
                                   batch_size=request.batch_size, now_ms=now, first=total == 0)
            if got.acquired or got.error is not ErrorCode.none:
                out[key] = out[key].merge(got) if key in out else got
                total += len(got.records)
                budget -= len(got.records)
                records_left -= got.count
        if total > 0 and not holding:
            # Records acquired for this answer must not expire while it waits for more.
            holding = True
            deadline = min(deadline, time.monotonic() + lock_ms / 2000)
        remaining = deadline - time.monotonic()
        live = [plog for _, plog in targets if isinstance(plog, PartitionLog)]
        failed = any(f.error is not ErrorCode.none for f in out.values())
        if total > 0 and total >= request.min_bytes or remaining <= 0 or not live or failed:
            return out
        await sync_written(ctx, written)  # an initialization is durable before the wait
        written.clear()
        # Woken by an append; else every 100 ms, for records released or expired meanwhile.
        await ctx.services.appends.wait_for_append(live, min(remaining, 0.1))
        if not share.sessions.is_open(session):
            # Closed meanwhile (its connection gone, or epoch -1), or replaced by a re-open:
            # nothing more is acquired for an answer that may have nowhere to go.
            return out


def _resolve(ctx: RequestContext, key: _Partition) -> PartitionLog | ErrorCode:
    """A session partition's log, or why it cannot be read."""
    info = ctx.services.logs.topic_by_id(key[0])
    if info is None:
        return ErrorCode.unknown_topic_id
    if not ctx.authorize(Operation.READ, ResourceType.TOPIC, info.name):
        return ErrorCode.topic_authorization_failed
    if not 0 <= key[1] < info.num_partitions:
        return ErrorCode.unknown_topic_or_partition
    try:
        return ctx.services.logs.get_log(info.name, key[1])
    except LogError as exc:
        return exc.error_code


def _fetch_responses(ctx: RequestContext, ack_errors: dict[_Partition, ErrorCode],
                     fetched: dict[_Partition, Fetched]) -> tuple[Any, ...]:
    node = ctx.services.identity.node_id
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for key in sorted(set(ack_errors) | set(fetched), key=lambda k: (str(k[0]), k[1])):
        got = fetched.get(key, Fetched(ErrorCode.none))
        ack = ack_errors.get(key, ErrorCode.none)
        by_topic.setdefault(key[0], []).append(ctx.nested(
            "PartitionData", partition_index=key[1], error_code=got.error, error_message=None,
            acknowledge_error_code=ack, acknowledge_error_message=None,
            current_leader=ctx.nested("LeaderIdAndEpoch", leader_id=node, leader_epoch=0),
            records=got.records, acquired_records=tuple(
                ctx.nested("AcquiredRecords", first_offset=a.first_offset,
                           last_offset=a.last_offset, delivery_count=a.delivery_count)
                for a in got.acquired)))
    return tuple(ctx.nested("ShareFetchableTopicResponse", topic_id=topic_id,
                            partitions=tuple(parts)) for topic_id, parts in by_topic.items())


async def handle_share_acknowledge(ctx: RequestContext,
                                   request: ShareAcknowledgeRequest) -> ResponsePayload:
    share = coordinator(ctx)

    def fail(code: ErrorCode, message: str | None) -> ResponsePayload:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                            responses=(), node_endpoints=())

    refused = _refused(ctx, request)
    if refused is not None:
        return fail(*refused)
    group_id, member_id = str(request.group_id), str(request.member_id)
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return fail(ErrorCode.invalid_share_session_epoch,
                    "ShareAcknowledge needs an open share session: ShareSessionEpoch 0 is not one")
    session = share.sessions.get(group_id, member_id, epoch)
    if isinstance(session, ErrorCode):
        return fail(session, _session_message(session))
    errors, written = _acknowledge(ctx, group_id, member_id, request.topics)
    if epoch == FINAL_EPOCH:
        written += share.close_session(group_id, member_id, ctx.services.clock())
    await sync_written(ctx, written)
    node = ctx.services.identity.node_id
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, partition), code in errors.items():
        by_topic.setdefault(topic_id, []).append(ctx.nested(
            "PartitionData", partition_index=partition, error_code=code, error_message=None,
            current_leader=ctx.nested("LeaderIdAndEpoch", leader_id=node, leader_epoch=0)))
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        responses=tuple(ctx.nested("ShareAcknowledgeTopicResponse", topic_id=t,
                                   partitions=tuple(ps)) for t, ps in by_topic.items()),
        node_endpoints=())


def connection_closed(services: Services, connection_id: int) -> None:
    """A client connection is gone: the share sessions it opened end (KAFKA-19015). What they
    release is appended to __share_group_state; no client waits for it, so the next flush makes
    it durable, as for lock expiries."""
    share: ShareCoordinator | None = getattr(services, "share", None)
    if share is not None:
        share.connection_closed(connection_id, services.clock())


# -- ListGroups / DeleteGroups of share groups (called from handlers/groups.py) ---------------

def listings(ctx: RequestContext, states: set[str]) -> list[GroupListing]:
    """The share groups as ListGroups lists them (type `share`), filtered by state."""
    wanted = {s.lower() for s in states}
    share = _share_or_none(ctx)
    groups = share.groups.values() if share is not None else ()
    return [GroupListing(g.group_id, "share", g.state, "share")
            for g in groups if not wanted or g.state.lower() in wanted]


async def delete_share_groups(ctx: RequestContext, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
    """DeleteGroups of share groups: only empty ones; their state in __share_group_state goes
    too (tombstones), durable before the answer."""
    results: dict[str, ErrorCode] = {}
    written: list[Written] = []
    if not group_ids:
        return results
    for group_id in group_ids:
        code, w = coordinator(ctx).delete_group(group_id, ctx.services.clock())
        results[group_id] = code
        written += w
    await sync_written(ctx, written)
    return results


HANDLERS: dict[int, Handler] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: handle_heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: handle_describe,
    ApiKey.SHARE_FETCH: handle_share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: handle_share_acknowledge,
}
