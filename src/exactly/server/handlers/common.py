"""Small pieces every handler module uses."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from exactly.log import PartitionLog, TopicInfo
from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode
from exactly.server.context import RequestContext

NO_THROTTLE = datetime.timedelta(0)


def advertised_address(ctx: RequestContext) -> tuple[str, int]:
    """Host and port of the listener this request came in on, as advertised to clients."""
    if ctx.session is not None:
        return ctx.session.advertised  # type: ignore[no-any-return]
    return ctx.broker.advertised_host, ctx.broker.advertised_port


def topic_of(ctx: RequestContext, entry: Any) -> tuple[TopicInfo | None, str | None, uuid.UUID | None]:
    """Resolve a request's topic by name (older versions) or by topic id (KIP-516 versions)."""
    name = getattr(entry, "name", None) or getattr(entry, "topic", None)
    topic_id = getattr(entry, "topic_id", None)
    if name:
        return ctx.broker.logs.topic(name), name, topic_id
    if topic_id is not None:
        info = ctx.broker.logs.topic_by_id(topic_id)
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
        return ctx.broker.logs.get_log(info.name, partition)
    except LogError:
        return None
