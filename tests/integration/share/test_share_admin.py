"""Share-group administration over TCP: DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, ListGroups (type share), DescribeGroups, DeleteGroups, and group configs
(ConfigResource GROUP), with what must outlive a restart."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_share_group_offsets.v0.request import DeleteShareGroupOffsetsRequestTopic

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import (
    SETTINGS,
    create_topic,
    poll_until,
    produce,
    set_group_configs,
    share_consumer,
)
from tests.helpers.share.raw import connect, describe_offsets, start_offset

pytestmark = pytest.mark.broker_settings(SETTINGS)


def request(b: EmbeddedBroker, api_key: int, version: int, **fields: Any) -> Any:
    conn = connect(b)
    try:
        return conn.request(api_key, version, **fields)
    finally:
        conn.close()


def alter(b: EmbeddedBroker, group: str, topic: str, offset: int) -> Any:
    return request(b, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, group_id=group, topics=(
        AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(
            AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=offset),)),))


def group_configs(b: EmbeddedBroker, group: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result(10).items()}


def consume(b: EmbeddedBroker, group: str, topic: str, count: int) -> list[int]:
    c = share_consumer(b, group, topic)
    got: list[int] = []
    try:
        poll_until([c], lambda: len(got) >= count, on_message=lambda _, m: got.append(m.offset()))
        c.commit_sync(10)
    finally:
        c.close()
    return got


def test_offsets_admin_and_group_lifecycle(broker: EmbeddedBroker) -> None:
    create_topic(broker, "q")
    set_group_configs(broker, "sg", share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="2000")
    produce(broker, "q", (b"%d" % i for i in range(10)))
    assert sorted(consume(broker, "sg", "q", 10)) == list(range(10))
    g = describe_offsets(broker, "sg", None)  # every initialized share-partition
    assert [(t.topic_name, p.partition_index, p.start_offset, p.lag)
            for t in g.topics for p in t.partitions] == [("q", 0, 10, 0)]
    assert describe_offsets(broker, "sg", "q", version=0).topics[0].partitions[0].start_offset == 10

    # a group with a member cannot be altered
    c = share_consumer(broker, "sg", "q")
    try:
        c.poll(1)
        assert alter(broker, "sg", "q", 3).error_code is ErrorCode.non_empty_group
    finally:
        c.close()
    r = alter(broker, "sg", "q", 3)
    assert r.error_code is ErrorCode.none
    assert r.responses[0].partitions[0].error_code is ErrorCode.none
    assert alter(broker, "sg", "q", 99).responses[0].partitions[0].error_code is \
        ErrorCode.invalid_request  # beyond the high watermark
    assert start_offset(broker, "sg", "q", 0) == 3
    assert sorted(consume(broker, "sg", "q", 7)) == list(range(3, 10))

    listed = request(broker, ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("share",))
    assert [(x.group_id, x.group_type, x.protocol_type) for x in listed.groups] == [
        ("sg", "share", "share")]
    described = request(broker, ApiKey.DESCRIBE_GROUPS, 5, groups=("sg",),
                        include_authorized_operations=False)
    assert described.groups[0].error_code is ErrorCode.group_id_not_found

    # configs, the group and its share-partitions outlive a restart
    broker.restart()
    assert group_configs(broker, "sg")["share.record.lock.duration.ms"] == "2000"
    assert group_configs(broker, "sg")["share.auto.offset.reset"] == "earliest"
    assert start_offset(broker, "sg", "q", 0) == 10

    r = request(broker, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, group_id="sg", topics=(
        DeleteShareGroupOffsetsRequestTopic(topic_name="q"),))
    assert r.error_code is ErrorCode.none and r.responses[0].error_code is ErrorCode.none
    assert start_offset(broker, "sg", "q", 0) == -1  # not initialized any more
    # initialized again by the next consumer: earliest
    assert sorted(consume(broker, "sg", "q", 10)) == list(range(10))

    r = request(broker, ApiKey.DELETE_GROUPS, 2, groups_names=("sg", "nope"))
    assert {x.group_id: x.error_code for x in r.results} == {
        "sg": ErrorCode.none, "nope": ErrorCode.group_id_not_found}
    broker.restart()
    listed = request(broker, ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("share",))
    assert listed.groups == ()
    assert start_offset(broker, "sg", "q", 0) == -1
    assert group_configs(broker, "sg")["share.auto.offset.reset"] == "latest"


def test_group_configs_are_checked_against_the_broker_bounds(broker: EmbeddedBroker) -> None:
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        set_group_configs(broker, "sg", share_record_lock_duration_ms="500")
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        set_group_configs(broker, "sg", share_delivery_count_limit="11")
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        set_group_configs(broker, "sg", share_auto_offset_reset="sometimes")
    set_group_configs(broker, "sg", share_auto_offset_reset="by_duration:PT1H",
                      share_isolation_level="read_committed")
    assert group_configs(broker, "sg")["share.isolation.level"] == "read_committed"
