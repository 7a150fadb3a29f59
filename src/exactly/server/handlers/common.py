"""Small pieces every handler module uses."""

from __future__ import annotations

import datetime
import uuid

from exactly.log import PartitionLog, TopicInfo
from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode
from exactly.server.context import RequestContext

NO_THROTTLE = datetime.timedelta(0)


def advertised_address(ctx: RequestContext) -> tuple[str, int]:
    """Host and port of the listener this request came in on, as advertised to clients."""
    return ctx.session.advertised


def topic_of(ctx: RequestContext, entry: object) -> tuple[TopicInfo | None, str | None, uuid.UUID | None]:
    """Resolve a request's topic entry (any version's) by name (older versions) or by topic id
    (KIP-516 versions)."""
    name = getattr(entry, "name", None) or getattr(entry, "topic", None)
    topic_id = getattr(entry, "topic_id", None)
    if name:
        return ctx.services.logs.topic(name), name, topic_id
    if topic_id is not None:
        info = ctx.services.logs.topic_by_id(topic_id)
        return info, (info.name if info else None), topic_id
    return None, None, topic_id


def unknown_topic_error(topic_id: uuid.UUID | None, name: str | None) -> ErrorCode:
    if name is None and topic_id is not None:
        return ErrorCode.unknown_topic_id
    return ErrorCode.unknown_topic_or_partition


def partition_log(ctx: RequestContext, info: TopicInfo | None, partition: int) -> PartitionLog | None:
    if info is None or not 0 <= partition < info.num_partitions:
        return None
    try:
        return ctx.services.logs.get_log(info.name, partition)
    except LogError:
        return None
