"""The KIP-848 handlers at every advertised version (ConsumerGroupHeartbeat, ConsumerGroupDescribe)
and what KIP-848 changed in the others (ListGroups v5 types, OffsetFetch v9 member epochs):
requests built from kio's classes, answers encoded with kio's writers, the coordinator and its
log real."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from exactly.protocol.apis import ApiKey
from tests.unit.groups.test_handlers import Services, call, make_services, nested, request

HB, DESCRIBE = ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE


@pytest.fixture
def services(env) -> Services:
    env.logs.create_topic("t", 3)
    return Services(**vars(make_services(env.coordinator)), logs=env.logs)


def join(services: Services, version: int, member_id: str, group: str = "cg") -> Any:
    return call(services, HB, version, request(
        HB, version, group_id=group, member_id=member_id, member_epoch=0,
        rebalance_timeout=datetime.timedelta(milliseconds=30_000),
        subscribed_topic_names=("t",), topic_partitions=()))


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_joins_and_the_answer_names_partitions_by_topic_id(env, services,
                                                                      version: int) -> None:
    answer = join(services, version, "" if version == 0 else "member-a")
    # As Kafka 4.4: a new group is at epoch 1, the first subscription takes it to 2.
    assert answer.error_code == ErrorCode.none and answer.member_epoch == 2
    assert answer.member_id  # v0: chosen by the coordinator; v1: the client's
    (tp,) = answer.assignment.topic_partitions
    assert (tp.topic_id, tuple(tp.partitions)) == (env.logs.topic("t").topic_id, (0, 1, 2))
    assert answer.heartbeat_interval == datetime.timedelta(milliseconds=5000)
    assert services.synced  # answered after the group's records were synced


def test_heartbeat_v1_needs_a_member_id(services) -> None:
    answer = join(services, 1, "")
    assert answer.error_code == ErrorCode.invalid_request
    assert "member id" in answer.error_message


@pytest.mark.parametrize("version", [0, 1])
def test_describe_a_consumer_group_and_refuse_others(env, services, version: int) -> None:
    join(services, 1, "member-a")
    answer = call(services, DESCRIBE, version, request(
        DESCRIBE, version, group_ids=("cg", "nope"), include_authorized_operations=True))
    described, missing = answer.groups
    assert (described.error_code, described.group_state) == (ErrorCode.none, "Stable")
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert described.assignor_name == "uniform"
    (member,) = described.members
    assert member.member_id == "member-a" and member.subscribed_topic_names == ("t",)
    (tp,) = member.assignment.topic_partitions
    assert (tp.topic_name, tuple(tp.partitions)) == ("t", (0, 1, 2))
    assert missing.error_code == ErrorCode.group_id_not_found


def test_list_groups_reports_and_filters_the_group_type(env, services) -> None:
    join(services, 1, "member-a", group="modern")
    env.coordinator.group_manager.new_group("old", 0).protocol_type = "consumer"  # classic
    listed = call(services, ApiKey.LIST_GROUPS, 5, request(ApiKey.LIST_GROUPS, 5,
                                                            states_filter=(), types_filter=()))
    assert {(g.group_id, g.group_type) for g in listed.groups} == {("modern", "consumer"),
                                                                   ("old", "classic")}
    only = call(services, ApiKey.LIST_GROUPS, 5, request(ApiKey.LIST_GROUPS, 5, states_filter=(),
                                                          types_filter=("consumer",)))
    assert [g.group_id for g in only.groups] == ["modern"]


def test_offset_fetch_v9_checks_the_member_epoch(services) -> None:
    join(services, 1, "member-a")

    def fetch(member_id: str | None, epoch: int) -> Any:
        group = nested(ApiKey.OFFSET_FETCH, 9, "OffsetFetchRequestGroup", group_id="cg",
                       member_id=member_id, member_epoch=epoch, topics=None)
        answer = call(services, ApiKey.OFFSET_FETCH, 9, request(
            ApiKey.OFFSET_FETCH, 9, groups=(group,), require_stable=False))
        return answer.groups[0].error_code

    assert fetch("member-a", 2) == ErrorCode.none
    assert fetch("member-a", 4) == ErrorCode.stale_member_epoch
    assert fetch("ghost", 1) == ErrorCode.unknown_member_id
    assert fetch(None, -1) == ErrorCode.none  # an admin client
