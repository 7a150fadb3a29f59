"""What the client knows of the cluster: brokers, topics and their leaders, coordinators; and a
connection per broker, made on first use."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from exactly.client.config import ClientConfig
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    COORDINATOR_UNSETTLED,
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
)
from exactly.client.security import security_from_config
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode, error_name

log = logging.getLogger("exactly.client")

COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1


@dataclass(slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    partitions: dict[int, int]  # partition -> leader node id (-1: none)
    error: int = 0
    internal: bool = False


@dataclass(slots=True)
class ClusterMetadata:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    fetched_at: float = 0.0


def request_module(conn: BrokerConnection, api_key: int, *, max_version: int | None = None) -> Any:
    """The kio module of the request version `conn` will use: build nested entities from it."""
    return sys.modules[request_class(api_key, conn.version(api_key,
                                                           max_version=max_version)).__module__]


def make_request(conn: BrokerConnection, api_key: int, *, max_version: int | None = None,
                 **fields: Any) -> Any:
    """A request entity at the negotiated version, from fields (those the version lacks dropped)."""
    return build(request_class(api_key, conn.version(api_key, max_version=max_version)), **fields)


class Cluster:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.metadata = ClusterMetadata()
        self._connections: dict[int, BrokerConnection] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()
        self._coordinators: dict[tuple[int, str], int] = {}
        self.security = security_from_config(config)  # TLS/SASL settings, checked once

    # -- connections ----------------------------------------------------------------------

    async def _open(self, host: str, port: int) -> BrokerConnection:
        return await BrokerConnection.connect(
            host, port, client_id=self.config["client.id"],
            request_timeout_ms=self.config["request.timeout.ms"],
            connect_timeout_ms=self.config["socket.connection.setup.timeout.ms"],
            security=self.security)

    async def any_connection(self) -> BrokerConnection:
        """A live connection to some broker: one already open, else one to a broker the
        metadata names (the bootstrap servers may be the nodes of a cluster that died), else
        one to a bootstrap server."""
        async with self._lock:  # concurrent first uses share one bootstrap connection
            return await self._any_connection()

    async def _any_connection(self) -> BrokerConnection:
        for conn in self._connections.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        errors = []
        known = list(self.metadata.brokers)
        random.shuffle(known)
        for node_id in known:
            try:
                return await self.connection(node_id)
            except AuthenticationError:
                raise  # the same credentials go to every broker
            except KafkaError as exc:
                errors.append(str(exc))
        refused: AuthenticationError | None = None
        servers = list(self.config.bootstrap)
        random.shuffle(servers)
        for host, port in servers:
            try:
                self._bootstrap_conn = await self._open(host, port)
                return self._bootstrap_conn
            except AuthenticationError as exc:
                refused = refused or exc
                errors.append(str(exc))
            except KafkaError as exc:
                errors.append(str(exc))
        if refused is not None:  # wrong credentials or certificate: retrying will not help
            raise refused
        raise KafkaConnectionError(f"no bootstrap server reachable: {'; '.join(errors)}")

    def live_connection(self, node_id: int) -> BrokerConnection | None:
        """The open connection to broker `node_id`, if there is one (no I/O, no lock)."""
        conn = self._connections.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node_id: int) -> BrokerConnection:
        conn = self.live_connection(node_id)
        if conn is not None:
            return conn
        if node_id not in self.metadata.brokers:
            await self.refresh()
        if node_id not in self.metadata.brokers:
            raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        host, port = self.metadata.brokers[node_id]
        conn = await self._open(host, port)
        conn.node_id = node_id
        self._connections[node_id] = conn
        return conn

    # -- metadata -------------------------------------------------------------------------

    async def refresh(self, topics: list[str] | None = None, *, allow_auto_create: bool = False
                      ) -> ClusterMetadata:
        """Fetch metadata (all topics when `topics` is None) and merge it into the cache."""
        conn = await self.any_connection()
        module = request_module(conn, ApiKey.METADATA)
        wanted = None if topics is None else tuple(
            build(module.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        response = await conn.send(make_request(
            conn, ApiKey.METADATA, topics=wanted, allow_auto_topic_creation=allow_auto_create,
            include_topic_authorized_operations=False, include_cluster_authorized_operations=False))
        md = self.metadata
        md.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        md.cluster_id = getattr(response, "cluster_id", None)
        md.controller_id = getattr(response, "controller_id", -1)
        for t in response.topics:
            if t.name is None:
                continue
            md.topics[t.name] = TopicMetadata(
                t.name, getattr(t, "topic_id", None),
                {p.partition_index: p.leader_id for p in t.partitions if p.error_code in (0, 5)},
                t.error_code, getattr(t, "is_internal", False))
        md.fetched_at = time.monotonic()
        return md

    async def topic(self, name: str, *, allow_auto_create: bool = True) -> TopicMetadata:
        """Metadata of one topic, fetched if unknown or stale; KafkaError if it has an error."""
        md = self.metadata.topics.get(name)
        stale = time.monotonic() - self.metadata.fetched_at > self.config["metadata.max.age.ms"] / 1000
        if md is None or stale or md.error:
            await self.refresh([name], allow_auto_create=allow_auto_create)
            md = self.metadata.topics.get(name)
        if md is None:
            raise KafkaError(f"topic {name!r} not in metadata", ErrorCode.unknown_topic_or_partition)
        if md.error and md.error != ErrorCode.leader_not_available:
            raise KafkaError(f"topic {name!r}: {error_name(md.error)}", md.error)
        return md

    async def leader(self, topic: str, partition: int) -> BrokerConnection:
        md = await self.topic(topic)
        leader = md.partitions.get(partition, -1)
        if leader < 0:
            md = await self.topic(topic)  # one refresh: a leader may just have been elected
            leader = md.partitions.get(partition, -1)
        if leader < 0:
            raise KafkaError(f"{topic}-{partition} has no leader", ErrorCode.leader_not_available)
        return await self.connection(leader)

    # -- coordinators ---------------------------------------------------------------------

    async def coordinator(self, key_type: int, key: str, *, retries: int = 20) -> BrokerConnection:
        """The group (0) or transaction (1) coordinator of `key`, found with FindCoordinator."""
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            with contextlib.suppress(KafkaError):
                return await self.connection(cached)
        for attempt in range(retries):
            conn = await self.any_connection()
            version = conn.version(ApiKey.FIND_COORDINATOR)
            response = await conn.send(make_request(
                conn, ApiKey.FIND_COORDINATOR, key=key, key_type=key_type, coordinator_keys=(key,)))
            if version >= 4:
                entry = response.coordinators[0]
            else:
                entry = response
            if entry.error_code == ErrorCode.none:
                self.metadata.brokers.setdefault(entry.node_id, (entry.host, entry.port))
                self._coordinators[(key_type, key)] = entry.node_id
                return await self.connection(entry.node_id)
            if entry.error_code not in COORDINATOR_UNSETTLED:  # FindCoordinator retries these
                raise KafkaError(f"FindCoordinator for {key!r}: {error_name(entry.error_code)}",
                                 entry.error_code)
            await asyncio.sleep(min(0.05 * (attempt + 1), 1.0))
        raise KafkaError(f"no coordinator found for {key!r}", ErrorCode.coordinator_not_available)

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    async def close(self) -> None:
        conns = list(self._connections.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._connections.clear()
        self._bootstrap_conn = None
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
