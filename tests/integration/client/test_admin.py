"""Admin topic, config and cluster calls over TCP, checked against confluent-kafka's AdminClient
view of the same broker: Exactly's, and librdkafka's mock cluster for what the mock offers."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from exactly.client.admin import Admin, AdminError, AsyncAdmin, NewTopic
from exactly.client.errors import KafkaError, UnsupportedVersionError
from exactly.protocol.errors import ErrorCode


@pytest.fixture(scope="module")
def admin(exactly_broker):
    with Admin({"bootstrap.servers": exactly_broker.bootstrap}) as a:
        yield a


@pytest.fixture(scope="module")
def peer(exactly_broker):
    return AdminClient({"bootstrap.servers": exactly_broker.bootstrap})


def peer_topic(peer: AdminClient, name: str):
    return peer.list_topics(timeout=10).topics.get(name)


def test_create_list_describe_round_trip(admin, peer):
    admin.create_topics([NewTopic("adm-a", num_partitions=3),
                         NewTopic("adm-b", num_partitions=1, config={"cleanup.policy": "compact"})])
    listed = admin.list_topics()
    assert {"adm-a", "adm-b"} <= set(listed)
    assert not any(t.startswith("__") for t in listed)

    described = admin.describe_topics(["adm-a", "adm-b"])
    for name in ("adm-a", "adm-b"):
        theirs = peer_topic(peer, name)
        ours = described[name]
        assert ours.name == name and ours.topic_id is not None and not ours.internal
        assert [p.partition for p in ours.partitions] == sorted(theirs.partitions)
        for p in ours.partitions:
            other = theirs.partitions[p.partition]
            assert (p.leader, p.replicas, p.isr) == (other.leader, list(other.replicas),
                                                      list(other.isrs))
    assert len(described["adm-a"].partitions) == 3


def test_errors_per_topic_carry_the_broker_code(admin):
    admin.create_topics([NewTopic("adm-dup", num_partitions=1)])
    with pytest.raises(AdminError) as caught:
        admin.create_topics([NewTopic("adm-dup", num_partitions=1), NewTopic("adm-ok", 1)])
    assert caught.value.code == ErrorCode.topic_already_exists
    assert caught.value.name == "TOPIC_ALREADY_EXISTS"
    assert "adm-dup" in str(caught.value) and set(caught.value.errors) == {"adm-dup"}
    assert "adm-ok" in admin.list_topics()  # the other topic of the call was created

    with pytest.raises(KafkaError) as caught:
        admin.describe_topics(["adm-missing"])
    assert caught.value.name == "UNKNOWN_TOPIC_OR_PARTITION" and "adm-missing" in str(caught.value)
    assert "adm-missing" not in admin.list_topics()  # describing never auto-creates


def test_validate_only_creates_nothing(admin, peer):
    admin.create_topics([NewTopic("adm-validate", 2)], validate_only=True)
    assert "adm-validate" not in admin.list_topics()
    assert peer_topic(peer, "adm-validate") is None


def test_create_partitions(admin, peer):
    admin.create_topics([NewTopic("adm-grow", 1)])
    admin.create_partitions({"adm-grow": 4})
    assert len(admin.describe_topics(["adm-grow"])["adm-grow"].partitions) == 4
    assert len(peer_topic(peer, "adm-grow").partitions) == 4
    with pytest.raises(AdminError) as caught:
        admin.create_partitions({"adm-grow": 2})
    assert caught.value.name == "INVALID_PARTITIONS"


def test_configs_round_trip(admin, peer):
    admin.create_topics([NewTopic("adm-cfg", 1, config={"retention.ms": "3600000"})])
    configs = admin.describe_configs("adm-cfg")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == "TOPIC_CONFIG" and not configs["retention.ms"].is_default

    admin.alter_topic_configs("adm-cfg", set={"max.message.bytes": "200000"}, delete=["retention.ms"])
    configs = admin.describe_configs("adm-cfg")
    assert configs["max.message.bytes"].value == "200000"
    assert configs["retention.ms"].source != "TOPIC_CONFIG"

    resource = ConfigResource("topic", "adm-cfg")
    theirs = peer.describe_configs([resource])[resource].result(timeout=10)
    assert theirs["max.message.bytes"].value == "200000"
    assert theirs["retention.ms"].value == configs["retention.ms"].value

    with pytest.raises(AdminError) as caught:
        admin.describe_configs("adm-cfg-missing")
    assert caught.value.name == "UNKNOWN_TOPIC_OR_PARTITION"
    with pytest.raises(AdminError):
        admin.alter_topic_configs("adm-cfg", set={"no.such.config": "1"})


def test_group_configs_round_trip(admin, peer):
    """Group configs (resource type GROUP): a share group's, as Kafka's tools set them."""
    admin.alter_group_configs("adm-share", set={"share.auto.offset.reset": "earliest",
                                                "share.delivery.count.limit": "3"})
    configs = admin.describe_group_configs("adm-share")
    assert configs["share.auto.offset.reset"].value == "earliest"
    assert configs["share.delivery.count.limit"].value == "3"

    resource = ConfigResource("group", "adm-share")
    theirs = peer.describe_configs([resource])[resource].result(timeout=10)
    assert theirs["share.auto.offset.reset"].value == "earliest"

    admin.alter_group_configs("adm-share", delete=["share.delivery.count.limit"])
    assert admin.describe_group_configs("adm-share")["share.delivery.count.limit"].value != "3"
    with pytest.raises(AdminError) as caught:  # the broker's bounds: 2..10 by default
        admin.alter_group_configs("adm-share", set={"share.delivery.count.limit": "1000"})
    assert caught.value.name == "INVALID_CONFIG"


def test_delete_topics(admin, peer):
    admin.create_topics([NewTopic("adm-del", 2)])
    assert peer_topic(peer, "adm-del") is not None
    admin.delete_topics(["adm-del"])
    assert "adm-del" not in admin.list_topics()
    assert peer_topic(peer, "adm-del") is None
    with pytest.raises(AdminError) as caught:
        admin.delete_topics(["adm-del"])
    assert caught.value.name == "UNKNOWN_TOPIC_OR_PARTITION" and "adm-del" in str(caught.value)


def test_describe_cluster(admin, peer):
    ours = admin.describe_cluster()
    theirs = peer.list_topics(timeout=10)
    assert ours.cluster_id == theirs.cluster_id
    assert ours.controller_id == theirs.controller_id
    assert [(b.node_id, b.host, b.port) for b in ours.brokers] == sorted(
        (b.id, b.host, b.port) for b in theirs.brokers.values())


def test_async_admin_on_a_callers_loop(exactly_broker):
    async def main() -> list[str]:
        async with AsyncAdmin({"bootstrap.servers": exactly_broker.bootstrap}) as a:
            await a.create_topics([NewTopic("adm-async", 1)])
            return await a.list_topics()

    assert "adm-async" in asyncio.run(main())


# -- librdkafka's mock cluster -----------------------------------------------------------------
# The mock offers Metadata but none of CreateTopics, DeleteTopics, CreatePartitions,
# DescribeConfigs, IncrementalAlterConfigs, DescribeCluster or the transaction admin APIs:
# topics are made there by producing to them (auto-creation), and those calls must fail clearly.


@pytest.fixture(scope="module")
def mock_admin(mock_bootstrap):
    with Admin({"bootstrap.servers": mock_bootstrap}) as a:
        yield a


def test_mock_list_and_describe_topics(mock_bootstrap, mock_admin):
    producer = Producer({"bootstrap.servers": mock_bootstrap})
    producer.produce("mock-adm", b"x")
    assert producer.flush(10) == 0
    theirs = AdminClient({"bootstrap.servers": mock_bootstrap}).list_topics(timeout=10)

    assert "mock-adm" in mock_admin.list_topics()
    ours = mock_admin.describe_topics(["mock-adm"])["mock-adm"]
    expected = theirs.topics["mock-adm"].partitions
    assert [p.partition for p in ours.partitions] == sorted(expected)
    for p in ours.partitions:
        assert (p.leader, p.replicas, p.isr) == (expected[p.partition].leader,
                                                  list(expected[p.partition].replicas),
                                                  list(expected[p.partition].isrs))

    cluster = mock_admin.describe_cluster()  # from Metadata: the mock has no DescribeCluster
    assert cluster.cluster_id == theirs.cluster_id
    assert [b.node_id for b in cluster.brokers] == sorted(theirs.brokers)


def test_mock_refuses_what_it_lacks_clearly(mock_admin):
    with pytest.raises(UnsupportedVersionError, match="create_topics"):
        mock_admin.create_topics([NewTopic("mock-new", 1)])
    with pytest.raises(UnsupportedVersionError, match="list_transactions"):
        mock_admin.list_transactions()
