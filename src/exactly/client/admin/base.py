"""The admin client's connection machinery, which each API family (topics.py, configs.py, ...)
builds on: the cluster and its config, where a request goes (the controller, every broker, a
partition's leader, a group's coordinator), and how per-item failures are gathered into one
AdminError. A call that fails for some of its items raises AdminError (a KafkaError carrying the
first failure's code) once the whole request is answered, with every failure in `errors`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

from exactly.client.cluster import COORDINATOR_GROUP, Cluster, make_request, request_module
from exactly.client.config import ClientConfig, as_config
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    COORDINATOR_UNSETTLED,
    AdminError,
    KafkaError,
    Verdict,
    classify,
)
from exactly.client.requests import (
    Backoff,
    ClusterCoordinator,
    Decision,
    Retry,
    call,
    coordinator_unreachable,
)
from exactly.client.types import by_topic
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition


def item_error(what: str, code: int, message: str | None = None) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    detail = f" ({message})" if message else ""
    return KafkaError(f"{what}: {error_name(code)}{detail}", int(code))


def raise_failures(failures: Mapping[Any, KafkaError]) -> None:
    if not failures:
        return
    errors = list(failures.values())
    if len(errors) == 1:
        raise AdminError(str(errors[0]), errors[0].code, failures)
    raise AdminError(f"{len(errors)} items failed: " + "; ".join(map(str, errors)),
                     errors[0].code, failures)


class AdminBase:
    """What every API family of the admin client uses; `AsyncAdmin` is all of them."""

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self.config = as_config(config)
        self.cluster = Cluster(self.config)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.cluster.close()

    @property
    def _timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.config["request.timeout.ms"])

    async def _controller(self) -> BrokerConnection:
        """Topic changes go to the controller (any broker forwards them in KRaft)."""
        md = await self.cluster.refresh([])
        if md.controller_id in md.brokers:
            return await self.cluster.connection(md.controller_id)
        return await self.cluster.any_connection()

    async def _metadata(self, topics: list[str] | None) -> Any:
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.METADATA)
        wanted = None if topics is None else tuple(
            build(module.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        return await conn.send(make_request(
            conn, ApiKey.METADATA, topics=wanted, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False, include_cluster_authorized_operations=False))

    async def _brokers(self) -> list[BrokerConnection]:
        md = await self.cluster.refresh([])
        return [await self.cluster.connection(node) for node in sorted(md.brokers)]

    async def _by_leader(self, partitions: Iterable[tuple[str, int]], what: str
                         ) -> tuple[list[tuple[BrokerConnection, dict[str, list[int]]]],
                                    dict[TopicPartition, KafkaError]]:
        """Partitions grouped by leader (from fresh metadata that never creates a topic), and
        the partitions that have none."""
        wanted = list(dict.fromkeys(partitions))
        md = await self.cluster.refresh(sorted({t for t, _ in wanted}), allow_auto_create=False)
        groups: dict[int, tuple[BrokerConnection, list[TopicPartition]]] = {}
        failures: dict[TopicPartition, KafkaError] = {}
        for topic, partition in wanted:
            info = md.topics.get(topic)
            leader = -1 if info is None or info.error else info.partitions.get(partition, -1)
            if leader >= 0:
                conn = await self.cluster.connection(leader)
                groups.setdefault(leader, (conn, []))[1].append(TopicPartition(topic, partition))
                continue
            if info is not None and info.error:
                code = int(info.error)
            elif info is not None and partition in info.partitions:
                code = ErrorCode.leader_not_available
            else:
                code = ErrorCode.unknown_topic_or_partition
            failures[TopicPartition(topic, partition)] = KafkaError(
                f"{what} {topic}-{partition}: {error_name(code)}", code)
        return [(conn, by_topic(tps)) for conn, tps in groups.values()], failures

    async def _group_request(self, group: str, what: str, api_key: int,
                             error_of: Callable[[Any], int],
                             nested: Callable[[Any], dict[str, Any]] | None = None,
                             **fields: Any) -> tuple[BrokerConnection, Any]:
        """Send a request to `group`'s coordinator (FindCoordinator), again while the
        coordinator moves or loads, up to request.timeout.ms. `nested(module)` gives the fields
        built from the negotiated version's kio module; `error_of(response)` the code that
        says whether the coordinator moved. Any other code is the caller's to read."""
        timeout_ms = self.config["request.timeout.ms"]

        def request(conn: BrokerConnection) -> Any:
            more = nested(request_module(conn, api_key)) if nested is not None else {}
            return make_request(conn, api_key, **fields, **more)

        def decide(response: Any) -> Decision:
            code = error_of(response)
            return Decision(classify(code, moved=COORDINATOR_UNSETTLED, otherwise=Verdict.DONE),
                            code)

        return await call(
            ClusterCoordinator(self.cluster, COORDINATOR_GROUP, group), request, decide,
            Retry(Backoff(max(self.config["retry.backoff.ms"], 1) / 1000),
                  timeout=timeout_ms / 1000),
            on_error=coordinator_unreachable,
            give_up=lambda answer, code: KafkaError(
                f"{what}: the coordinator is still unreachable after request.timeout.ms="
                f"{timeout_ms} ({answer}); try again" if isinstance(answer, KafkaError) else
                f"{what}: the coordinator still answers {error_name(code)} after "
                f"request.timeout.ms={timeout_ms}; try again", int(code)))

