"""The admin client's topics and cluster: create and delete topics, grow their partitions,
list and describe them (Metadata), and describe the cluster's brokers (DescribeCluster, or
Metadata from a broker without it). Topic changes go to the controller, which any broker of a
KRaft cluster forwards them to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exactly.client.admin.base import AdminBase, item_error, raise_failures
from exactly.client.cluster import make_request, request_module
from exactly.client.types import (
    BrokerInfo,
    ClusterDescription,
    NewTopic,
    PartitionInfo,
    TopicDescription,
)
from exactly.protocol.apis import ApiKey, build


class TopicsAdmin(AdminBase):
    """Topics and the cluster."""

    async def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False) -> None:
        conn = await self._controller()
        module = request_module(conn, ApiKey.CREATE_TOPICS)
        wanted = tuple(build(module.CreatableTopic, name=t.name, num_partitions=t.num_partitions,
                             replication_factor=t.replication_factor, assignments=(),
                             configs=tuple(build(module.CreatableTopicConfig, name=k, value=str(v))
                                           for k, v in t.config.items()))
                       for t in topics)
        response = await conn.send(make_request(conn, ApiKey.CREATE_TOPICS, topics=wanted,
                                                timeout=self._timeout, validate_only=validate_only))
        raise_failures({r.name: e for r in response.topics
                         if (e := item_error(f"create topic {r.name!r}", r.error_code,
                                              getattr(r, "error_message", None)))})

    async def delete_topics(self, names: Iterable[str]) -> None:
        conn = await self._controller()
        response = await conn.send(make_request(conn, ApiKey.DELETE_TOPICS, topic_names=tuple(names),
                                                timeout=self._timeout))
        raise_failures({r.name: e for r in response.responses
                         if (e := item_error(f"delete topic {r.name!r}", r.error_code,
                                              getattr(r, "error_message", None)))})

    async def create_partitions(self, new_totals: Mapping[str, int], *,
                                validate_only: bool = False) -> None:
        """Grow each topic to the given total partition count."""
        conn = await self._controller()
        module = request_module(conn, ApiKey.CREATE_PARTITIONS)
        wanted = tuple(build(module.CreatePartitionsTopic, name=name, count=count, assignments=None)
                       for name, count in new_totals.items())
        response = await conn.send(make_request(conn, ApiKey.CREATE_PARTITIONS, topics=wanted,
                                                timeout=self._timeout, validate_only=validate_only))
        raise_failures({r.name: e for r in response.results
                         if (e := item_error(f"create partitions of {r.name!r}", r.error_code,
                                              r.error_message))})

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        response = await self._metadata(None)
        return sorted(t.name for t in response.topics
                      if t.name is not None and (include_internal or not t.is_internal))

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        response = await self._metadata(list(names))
        out, failures = {}, {}
        for t in response.topics:
            if (e := item_error(f"describe topic {t.name!r}", t.error_code)) is not None:
                failures[t.name] = e
                continue
            parts = sorted((PartitionInfo(p.partition_index, p.leader_id, list(p.replica_nodes),
                                          list(p.isr_nodes)) for p in t.partitions),
                           key=lambda p: p.partition)
            out[t.name] = TopicDescription(t.name, getattr(t, "topic_id", None), parts, t.is_internal)
        raise_failures(failures)
        return out

    async def describe_cluster(self) -> ClusterDescription:
        conn = await self.cluster.any_connection()
        if conn.supports(ApiKey.DESCRIBE_CLUSTER):
            response = await conn.send(make_request(conn, ApiKey.DESCRIBE_CLUSTER,
                                                    include_cluster_authorized_operations=False,
                                                    endpoint_type=1))
            if (e := item_error("describe cluster", response.error_code, response.error_message)):
                raise e
            brokers = [BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
        else:  # older brokers (and librdkafka's mock): the same facts from Metadata
            response = await self._metadata([])
            brokers = [BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
        return ClusterDescription(response.cluster_id, response.controller_id,
                                  sorted(brokers, key=lambda b: b.node_id))
