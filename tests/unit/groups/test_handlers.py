"""The group API handlers, every advertised version: requests built from kio's classes, answers
encoded with kio's writers. The coordinator and its log are real; only the broker's services
around them are reduced to the parts the handlers use (the TCP end-to-end tests cover the rest)."""

from __future__ import annotations

import asyncio
import datetime
import io
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.constants import EntityType

from exactly.protocol.apis import SUPPORTED, ApiKey, build, request_class
from exactly.server.auth import AuthSession, ListenerRuntime
from exactly.server.context import RequestContext
from exactly.server.handlers.groups import HANDLERS
from exactly.server.services import BrokerIdentity
from tests.helpers.groups.group_helpers import T0


class Services(SimpleNamespace):
    """The parts of exactly.server.services.Services that the group handlers use."""


def make_services(coordinator: Any) -> Services:
    synced: list[Any] = []

    async def sync(logs: Any) -> None:
        synced.extend(logs)

    async def no_markers(transactional_id: str) -> None:
        pass

    return Services(groups=coordinator, clock=lambda: T0, authorizer=None,
                    identity=BrokerIdentity(node_id=7, cluster_id="c", finalized_features={}),
                    appends=SimpleNamespace(sync=sync),
                    transactions=SimpleNamespace(wait_for_markers=no_markers), synced=synced)


def session() -> AuthSession:
    return AuthSession(ListenerRuntime("PLAINTEXT", "h", 9092), mechanisms=(), plain_users={},
                       scram_store=None)  # type: ignore[arg-type]


def request(api_key: int, version: int, **fields: Any) -> Any:
    return build(request_class(api_key, version), **fields)


def nested(api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
    module = load_payload_module(api_key, version, EntityType.request)
    return build(getattr(module, class_name), **fields)


def call(services: Services, api_key: int, version: int, req: Any) -> Any:
    ctx = RequestContext(services, api_key, version, 1, "cli", "/127.0.0.1",  # type: ignore[arg-type]
                         session())

    async def handle() -> Any:
        return await HANDLERS[api_key](ctx, req)

    response = asyncio.run(handle())
    entity_writer(type(response))(io.BytesIO(), response)  # must encode at this version
    return response


def test_handlers_cover_the_group_apis() -> None:
    keys = {ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
            ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT,
            ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
            ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE, ApiKey.CONSUMER_GROUP_HEARTBEAT,
            ApiKey.CONSUMER_GROUP_DESCRIBE}
    assert set(HANDLERS) == keys and keys <= set(SUPPORTED)


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator(env, version: int) -> None:
    broker = make_services(env.coordinator)
    fk = ApiKey.FIND_COORDINATOR
    if version >= 4:
        r = call(broker, fk, version, request(fk, version, key_type=0, coordinator_keys=("a", "b")))
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in r.coordinators] == [
            ("a", 7, "h", 9092, ErrorCode.none), ("b", 7, "h", 9092, ErrorCode.none)]
        r = call(broker, fk, version, request(fk, version, key_type=1, coordinator_keys=("t",)))
        assert [(c.key, c.node_id, c.error_code) for c in r.coordinators] == [
            ("t", 7, ErrorCode.none)]
        r = call(broker, fk, version, request(fk, version, key_type=5, coordinator_keys=("t",)))
        assert r.coordinators[0].error_code is ErrorCode.invalid_request
    else:
        r = call(broker, fk, version, request(fk, version, key="a", key_type=0))
        assert (r.error_code, r.node_id, r.host, r.port) == (ErrorCode.none, 7, "h", 9092)
        if version >= 1:
            r = call(broker, fk, version, request(fk, version, key="t", key_type=1))
            assert (r.error_code, r.node_id, r.port) == (ErrorCode.none, 7, 9092)


def _join(broker: Services, version: int, group: str, member_id: str) -> Any:
    jk = ApiKey.JOIN_GROUP
    proto = nested(jk, version, "JoinGroupRequestProtocol", name="range", metadata=b"meta")
    td = datetime.timedelta
    return call(broker, jk, version, request(
        jk, version, group_id=group, session_timeout=td(seconds=10),
        rebalance_timeout=td(seconds=30), member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocols=(proto,), reason=None))


@pytest.mark.parametrize("version", range(10))
def test_group_lifecycle_at_each_version(env, version: int) -> None:
    env.logs.create_topic("t", 2, internal=False)
    broker = make_services(env.coordinator)
    group = f"g{version}"
    r = _join(broker, version, group, "")
    if version >= 4:
        assert r.error_code is ErrorCode.member_id_required
        r = _join(broker, version, group, r.member_id)
    assert r.error_code is ErrorCode.none and r.leader == r.member_id
    member, gen = r.member_id, r.generation_id
    assert [m.metadata for m in r.members] == [b"meta"]

    sv = min(version, 5)
    sk = ApiKey.SYNC_GROUP
    assignment = nested(sk, sv, "SyncGroupRequestAssignment", member_id=member, assignment=b"A")
    r = call(broker, sk, sv, request(sk, sv, group_id=group, generation_id=gen, member_id=member,
                                     group_instance_id=None, protocol_type="consumer",
                                     protocol_name="range", assignments=(assignment,)))
    assert r.error_code is ErrorCode.none and r.assignment == b"A"

    hv = min(version, 4)
    hk = ApiKey.HEARTBEAT
    r = call(broker, hk, hv, request(hk, hv, group_id=group, generation_id=gen, member_id=member,
                                     group_instance_id=None))
    assert r.error_code is ErrorCode.none

    cv = 2 + version % 8
    ck = ApiKey.OFFSET_COMMIT
    parts = tuple(nested(ck, cv, "OffsetCommitRequestPartition", partition_index=p,
                         committed_offset=10 + p, committed_leader_epoch=1, committed_metadata="m",
                         commit_timestamp=-1) for p in (0, 1, 5))
    topic = nested(ck, cv, "OffsetCommitRequestTopic", name="t", partitions=parts)
    r = call(broker, ck, cv, request(
        ck, cv, group_id=group, generation_id_or_member_epoch=gen, member_id=member,
        group_instance_id=None, retention_time=datetime.timedelta(milliseconds=-1),
        topics=(topic,)))
    assert [(p.partition_index, p.error_code) for p in r.topics[0].partitions] == [
        (0, ErrorCode.none), (1, ErrorCode.none), (5, ErrorCode.unknown_topic_or_partition)]
    assert broker.synced == [env.coordinator.log_for(group)]

    fv = 1 + version % 9
    fk = ApiKey.OFFSET_FETCH
    if fv >= 8:
        ft = nested(fk, fv, "OffsetFetchRequestTopics", name="t", partition_indexes=(0, 1))
        groups = (nested(fk, fv, "OffsetFetchRequestGroup", group_id=group, topics=(ft,)),
                  nested(fk, fv, "OffsetFetchRequestGroup", group_id="none", topics=None))
        r = call(broker, fk, fv, request(fk, fv, groups=groups))
        got = [(p.partition_index, p.committed_offset) for p in r.groups[0].topics[0].partitions]
        assert r.groups[1].topics == ()
    else:
        ft = nested(fk, fv, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 1))
        r = call(broker, fk, fv, request(fk, fv, group_id=group, topics=(ft,)))
        got = [(p.partition_index, p.committed_offset) for p in r.topics[0].partitions]
        if fv >= 2:
            r = call(broker, fk, fv, request(fk, fv, group_id=group, topics=None))
            assert len(r.topics[0].partitions) == 2
    assert got == [(0, 10), (1, 11)]

    dv = min(version, 5)
    dk = ApiKey.DESCRIBE_GROUPS
    r = call(broker, dk, dv, request(dk, dv, groups=(group, "none"),
                                     include_authorized_operations=False))
    assert [(g.group_state, len(g.members)) for g in r.groups] == [("Stable", 1), ("Dead", 0)]
    assert r.groups[0].members[0].member_assignment == b"A"

    lk = ApiKey.LIST_GROUPS
    r = call(broker, lk, dv, request(lk, dv, states_filter=("Stable",), types_filter=()))
    assert group in [g.group_id for g in r.groups]

    xk = ApiKey.DELETE_GROUPS
    xv = min(version, 2)
    r = call(broker, xk, xv, request(xk, xv, groups_names=(group,)))
    assert r.results[0].error_code is ErrorCode.non_empty_group

    lv = min(version, 5)
    leave = ApiKey.LEAVE_GROUP
    if lv >= 3:
        ident = nested(leave, lv, "MemberIdentity", member_id=member, group_instance_id=None)
        r = call(broker, leave, lv, request(leave, lv, group_id=group, members=(ident,)))
        assert r.members[0].error_code is ErrorCode.none
    else:
        r = call(broker, leave, lv, request(leave, lv, group_id=group, member_id=member))
        assert r.error_code is ErrorCode.none
    r = call(broker, xk, xv, request(xk, xv, groups_names=(group, "none")))
    assert [x.error_code for x in r.results] == [ErrorCode.none, ErrorCode.group_id_not_found]


def test_join_waits_for_other_members(make_env) -> None:
    """A parked JoinGroup is answered when tick() completes the rebalance."""
    env = make_env(initial_rebalance_delay_ms=50)
    broker = make_services(env.coordinator)

    async def scenario() -> Any:
        jk, v = ApiKey.JOIN_GROUP, 3
        ctx = RequestContext(broker, jk, v, 1, "cli", "/h", session())  # type: ignore[arg-type]
        proto = nested(jk, v, "JoinGroupRequestProtocol", name="range", metadata=b"")
        req = request(jk, v, group_id="w", session_timeout=datetime.timedelta(seconds=10),
                      rebalance_timeout=datetime.timedelta(seconds=30), member_id="",
                      protocol_type="consumer", protocols=(proto,))
        task = asyncio.ensure_future(HANDLERS[jk](ctx, req))
        await asyncio.sleep(0.01)
        assert not task.done()
        env.coordinator.tick(T0 + 50)
        return await asyncio.wait_for(task, 1)

    r = asyncio.run(scenario())
    assert r.error_code is ErrorCode.none and r.generation_id == 1
