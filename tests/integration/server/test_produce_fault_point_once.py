"""The Produce handler reads its fault point (`produce.before_append`) once per process, not
once per request (issue 19: an environment lookup per Produce was 1.4% of its CPU). That the
point still fires when a broker starts with it set is shown by
tests/integration/server/test_request_memory.py and
tests/integration/server/test_produce_in_place.py (pauses there, in a real broker process)."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from exactly import failpoints
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.records import Record, build_batch
from exactly.server.auth import AuthSession, ListenerRuntime
from exactly.server.context import RequestContext
from exactly.server.handlers import HANDLERS
from exactly.server.handlers import produce as produce_handler
from exactly.testing import broker_in_process


def _produce_request(records: bytes) -> object:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    module = load_payload_module(ApiKey.PRODUCE, 9, EntityType.request)
    partition = build(module.PartitionProduceData, index=0, records=records)
    topic = build(module.TopicProduceData, name="t", partition_data=(partition,))
    return build(request_class(ApiKey.PRODUCE, 9), transactional_id=None, acks=1,
                 timeout=datetime.timedelta(seconds=5), topic_data=(topic,))


async def _produce_twice() -> int:
    async with broker_in_process({"log.flush.policy": "os"}) as services:
        services.logs.create_topic("t", 1)
        session = AuthSession(ListenerRuntime("PLAINTEXT", "127.0.0.1", 0), mechanisms=(),
                              plain_users={}, scram_store=None)  # type: ignore[arg-type]
        for i in range(2):
            ctx = RequestContext(services, ApiKey.PRODUCE, 9, i, "test", "127.0.0.1",
                                 session=session, principal=session.principal)
            await HANDLERS[ApiKey.PRODUCE](ctx, _produce_request(
                build_batch([Record(b"k", b"v")], timestamp=1)))
        return services.logs.get_log("t", 0).log_end_offset


def test_produce_does_not_look_its_fault_point_up_per_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert not produce_handler._BEFORE_APPEND  # this process started without the variable
    looked_up: list[str] = []
    fire = failpoints._fire

    def counting(point: str, *args: object, **kwargs: object) -> float:
        looked_up.append(point)
        return fire(point, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(failpoints, "_fire", counting)
    assert asyncio.run(_produce_twice()) == 2
    assert "produce.before_append" not in looked_up


def test_listed_names_the_points_the_variable_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "produce.before_append=pause:0.5")
    assert failpoints.listed("produce.before_append")
    assert not failpoints.listed("txn.after_prepare")
    monkeypatch.delenv(failpoints.ENV)
    assert not failpoints.listed("produce.before_append")
    with pytest.raises(ValueError, match="in neither exactly.failpoints.CATALOGUE nor SKIPS"):
        failpoints.listed("produce.no_such_point")
