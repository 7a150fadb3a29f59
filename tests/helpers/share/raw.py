"""Raw share-group requests for the tests (tests/rawclient.py underneath)."""

from __future__ import annotations

import uuid
from typing import Any

from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection


def connect(b: EmbeddedBroker) -> RawConnection:
    return RawConnection(b.host, b.port)


def describe_share_group(b: EmbeddedBroker, group: str) -> Any:
    conn = connect(b)
    try:
        r = conn.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, group_ids=(group,),
                         include_authorized_operations=False)
    finally:
        conn.close()
    return r.groups[0]


def describe_offsets(b: EmbeddedBroker, group: str, topic: str | None,
                     partitions: tuple[int, ...] = (0,), version: int = 1) -> Any:
    from kio.schema.describe_share_group_offsets.v1.request import (
        DescribeShareGroupOffsetsRequestGroup,
        DescribeShareGroupOffsetsRequestTopic,
    )
    topics = None if topic is None else (
        DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=partitions),)
    conn = connect(b)
    try:
        r = conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, groups=(
            DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=topics),))
    finally:
        conn.close()
    return r.groups[0]


def start_offset(b: EmbeddedBroker, group: str, topic: str, partition: int) -> int:
    """The share-partition start offset (SPSO) from DescribeShareGroupOffsets."""
    g = describe_offsets(b, group, topic, (partition,))
    return int(g.topics[0].partitions[0].start_offset)


def topic_id(b: EmbeddedBroker, topic: str) -> uuid.UUID:
    """The topic's id, from Metadata v12."""
    from kio.schema.metadata.v12.request import MetadataRequestTopic
    conn = connect(b)
    try:
        r = conn.request(ApiKey.METADATA, 12, topics=(MetadataRequestTopic(topic_id=None,
                                                                           name=topic),),
                         allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
    finally:
        conn.close()
    return r.topics[0].topic_id  # type: ignore[no-any-return]
