"""Share-group administration (KIP-932): DescribeShareGroupOffsets v0-v1, AlterShareGroupOffsets
v0, DeleteShareGroupOffsets v0, and the share groups' configs (ConfigResource GROUP) for
DescribeConfigs and IncrementalAlterConfigs (handlers/configs.py asks here).

Alter and delete work on an empty group only, as Kafka's; what they change is durable in
`__share_group_state` before the answer.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from exactly.groups.consumer_coordinator import (
    CONSUMER_GROUP_CONFIGS,
    validate_consumer_group_config,
)
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE
from exactly.server.handlers.share import coordinator, other_group_type, sync_written
from exactly.share.config import GROUP_CONFIG_KEYS, group_config_default
from exactly.share.state_store import Written

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        AlterShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequest,
    )


# -- DescribeShareGroupOffsets / AlterShareGroupOffsets / DeleteShareGroupOffsets ------------

async def handle_describe_offsets(
        ctx: RequestContext,
        request: DescribeShareGroupOffsetsRequest,
) -> ResponsePayload:
    share, logs = coordinator(ctx), ctx.services.logs
    groups = []
    for g in request.groups:
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, g.group_id):
            groups.append(ctx.nested("DescribeShareGroupOffsetsResponseGroup", group_id=g.group_id,
                                     topics=(), error_code=ErrorCode.group_authorization_failed,
                                     error_message="not allowed to DESCRIBE the group"))
            continue
        if g.topics is None:  # every initialized share-partition of the group
            wanted: dict[str, list[int]] = {}
            for topic_id, partition in share.initialized(g.group_id):
                info = logs.topic_by_id(topic_id)
                if info is not None:
                    wanted.setdefault(info.name, []).append(partition)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in g.topics}
        topics = []
        for name, partitions in wanted.items():
            info = logs.topic(name)
            parts = []
            for p in partitions:
                start = lag = -1
                code = ErrorCode.none
                if info is None or not 0 <= p < info.num_partitions:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    found = share.start_offset(g.group_id, info.topic_id, p)
                    if found is not None:
                        start = found
                        lag = share.lag(g.group_id, info.topic_id, p,
                                        logs.get_log(name, p).high_watermark)
                parts.append(ctx.nested("DescribeShareGroupOffsetsResponsePartition",
                                        partition_index=p, start_offset=start, leader_epoch=0,
                                        lag=lag, error_code=code, error_message=None))
            topics.append(ctx.nested("DescribeShareGroupOffsetsResponseTopic", topic_name=name,
                                     topic_id=info.topic_id if info else uuid.UUID(int=0),
                                     partitions=tuple(parts)))
        groups.append(ctx.nested("DescribeShareGroupOffsetsResponseGroup", group_id=g.group_id,
                                 topics=tuple(topics), error_code=ErrorCode.none,
                                 error_message=None))
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))


_GROUP_ERRORS = {
    ErrorCode.group_id_not_found: "no share group by that id",
    ErrorCode.non_empty_group: "the share group has members: stop them first",
    ErrorCode.group_authorization_failed: "not allowed on the group",
}


async def _group_change(ctx: RequestContext, result: tuple[ErrorCode, list[Written]],
                        ) -> ResponsePayload | None:
    """Sync what an admin change wrote; the failure answer if the group refused it."""
    code, written = result
    await sync_written(ctx, written)
    return _group_failure(ctx, code) if code is not ErrorCode.none else None


def _group_failure(ctx: RequestContext, code: ErrorCode) -> ResponsePayload:
    """An Alter/DeleteShareGroupOffsets answer with a group-level error."""
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code,
                        error_message=_GROUP_ERRORS.get(code), responses=())


async def handle_alter_offsets(ctx: RequestContext,
                               request: AlterShareGroupOffsetsRequest) -> ResponsePayload:
    share, logs = coordinator(ctx), ctx.services.logs
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return _group_failure(ctx, ErrorCode.group_authorization_failed)
    offsets: dict[tuple[uuid.UUID, int], int] = {}
    results: dict[str, list[tuple[int, ErrorCode, str | None]]] = {}
    ids: dict[str, uuid.UUID] = {}
    for t in request.topics:
        info = logs.topic(t.topic_name)
        ids[t.topic_name] = info.topic_id if info else uuid.UUID(int=0)
        for p in t.partitions:
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                results.setdefault(t.topic_name, []).append(
                    (p.partition_index, ErrorCode.unknown_topic_or_partition, None))
            elif not (logs.get_log(t.topic_name, p.partition_index).log_start_offset
                      <= p.start_offset <= logs.get_log(t.topic_name, p.partition_index)
                      .high_watermark):
                results.setdefault(t.topic_name, []).append(
                    (p.partition_index, ErrorCode.invalid_request,
                     "the offset is outside the partition's log start .. high watermark"))
            else:
                offsets[(info.topic_id, p.partition_index)] = p.start_offset
                results.setdefault(t.topic_name, []).append(
                    (p.partition_index, ErrorCode.none, None))
    failed = await _group_change(
        ctx, share.alter_offsets(request.group_id, offsets, ctx.services.clock()))
    if failed is not None:
        return failed
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        responses=tuple(ctx.nested(
            "AlterShareGroupOffsetsResponseTopic", topic_name=name, topic_id=ids[name],
            partitions=tuple(ctx.nested("AlterShareGroupOffsetsResponsePartition",
                                        partition_index=p, error_code=c, error_message=m)
                             for p, c, m in parts)) for name, parts in results.items()))


async def handle_delete_offsets(ctx: RequestContext,
                                request: DeleteShareGroupOffsetsRequest) -> ResponsePayload:
    share, logs = coordinator(ctx), ctx.services.logs
    if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, request.group_id):
        return _group_failure(ctx, ErrorCode.group_authorization_failed)
    topic_ids = []
    results = []
    for t in request.topics:
        info = logs.topic(t.topic_name)
        if info is None:
            results.append((t.topic_name, uuid.UUID(int=0), ErrorCode.unknown_topic_or_partition))
        else:
            topic_ids.append(info.topic_id)
            results.append((t.topic_name, info.topic_id, ErrorCode.none))
    failed = await _group_change(
        ctx, share.delete_offsets(request.group_id, topic_ids, ctx.services.clock()))
    if failed is not None:
        return failed
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        responses=tuple(ctx.nested("DeleteShareGroupOffsetsResponseTopic", topic_name=name,
                                   topic_id=tid, error_code=c, error_message=None)
                        for name, tid, c in results))




# -- group configs (DescribeConfigs / IncrementalAlterConfigs on a GROUP resource) -----------

def group_config_entries(ctx: RequestContext,
                         group_id: str) -> list[tuple[str, str | None, str, bool, bool]]:
    """(name, value, source, read_only, sensitive) of a group's share and consumer configs: its
    overrides (GROUP_CONFIG), else the broker's values (DEFAULT_CONFIG). A group need not exist
    yet."""
    share = coordinator(ctx)
    group = share.groups.get(group_id)
    overrides = group.configs if group is not None else {}
    out: list[tuple[str, str | None, str, bool, bool]] = []
    for name in sorted(GROUP_CONFIG_KEYS):
        if name in overrides:
            out.append((name, overrides[name], "GROUP_CONFIG", False, False))
        else:
            out.append((name, group_config_default(share.config, name), "DEFAULT_CONFIG", False,
                        False))
    # KIP-848's consumer.* group configs, kept beside the share groups' (alter_other_configs).
    consumer = ctx.services.groups.consumer
    others = share.other_configs.get(group_id, {})
    defaults = {"consumer.session.timeout.ms": consumer.config.consumer_session_timeout_ms,
                "consumer.heartbeat.interval.ms": consumer.config.consumer_heartbeat_interval_ms}
    for name in sorted(CONSUMER_GROUP_CONFIGS):
        if name in others:
            out.append((name, others[name], "GROUP_CONFIG", False, False))
        else:
            out.append((name, str(defaults[name]), "DEFAULT_CONFIG", False, False))
    return out


async def alter_group_configs(ctx: RequestContext, group_id: str, to_set: dict[str, str],
                              to_delete: list[str], validate_only: bool) -> str | None:
    """Set/delete a group's share configs, validated against the broker's bounds and durable
    before the answer; an error message (INVALID_CONFIG) or None."""
    if other_group_type(ctx, group_id) and not coordinator(ctx).is_share_group(group_id):
        return f"group {group_id} is not a share group: it has no share configs"
    message, written = coordinator(ctx).alter_configs(group_id, to_set, to_delete,
                                                 ctx.services.clock(),
                                                 validate_only=validate_only)
    await sync_written(ctx, [written])
    return message


_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations


async def alter_group_resource(ctx: RequestContext, resource: Any,
                               validate_only: bool) -> tuple[ErrorCode, str | None]:
    """IncrementalAlterConfigs of one GROUP resource: SET and DELETE only, as Kafka."""
    to_set = {c.name: c.value for c in resource.configs
              if c.config_operation == _SET and c.value is not None}
    to_delete = [c.name for c in resource.configs if c.config_operation == _DELETE]
    if len(to_set) + len(to_delete) != len(resource.configs):
        return ErrorCode.invalid_request, "group configs take SET (with a value) and DELETE only"
    names = set(to_set) | set(to_delete)
    if names & set(CONSUMER_GROUP_CONFIGS):
        return await _alter_consumer_configs(ctx, resource.resource_name, to_set, to_delete,
                                             validate_only)
    message = await alter_group_configs(ctx, resource.resource_name, to_set, to_delete,
                                        validate_only)
    return (ErrorCode.invalid_config, message) if message else (ErrorCode.none, None)


async def _alter_consumer_configs(ctx: RequestContext, group_id: str, to_set: dict[str, str],
                                  to_delete: list[str], validate_only: bool,
                                  ) -> tuple[ErrorCode, str | None]:
    """KIP-848's group configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms),
    within the broker's bounds, as Kafka; the consumer group coordinator reads them."""
    names = set(to_set) | set(to_delete)
    if not names <= set(CONSUMER_GROUP_CONFIGS):
        return ErrorCode.invalid_config, (
            f"{sorted(names - set(CONSUMER_GROUP_CONFIGS))} cannot be altered with consumer "
            "group configs in one request: alter them separately")
    if coordinator(ctx).is_share_group(group_id):
        return ErrorCode.invalid_config, (
            f"group {group_id} is a share group: consumer.* configs apply to consumer groups")
    for name, value in to_set.items():
        try:
            validate_consumer_group_config(ctx.services.groups.consumer.config, name, value)
        except ValueError as exc:
            return ErrorCode.invalid_config, str(exc)
    if validate_only:
        return ErrorCode.none, None
    written = coordinator(ctx).alter_other_configs(group_id, to_set, to_delete,
                                                   ctx.services.clock())
    await sync_written(ctx, [written])
    return ErrorCode.none, None


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: handle_describe_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: handle_alter_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: handle_delete_offsets,
}
