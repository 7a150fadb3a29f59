"""Admin: topics, configs, the cluster, and Kafka's transaction tools (KIP-664): list and describe
transactions, describe a partition's producers, abort a hanging transaction by writing its
marker, and force-terminate a transactional id's open (or prepared 2PC) transaction (KIP-939). `AsyncAdmin` is the asyncio client; `Admin` runs the same calls on the client's loop.

A call that fails for some of its items raises AdminError (a KafkaError carrying the first
failure's code) once the whole request is answered, with every failure in `errors`."""

from __future__ import annotations

import asyncio
import datetime
import enum
import hashlib
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from exactly.client._loop import Blocking, LoopThread
from exactly.client.cluster import COORDINATOR_TRANSACTION, Cluster, make_request, request_module
from exactly.client.config import ClientConfig, as_config
from exactly.client.connection import BrokerConnection
from exactly.client.errors import KafkaError, UnsupportedVersionError
from exactly.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition

_TOPIC_RESOURCE, _GROUP_RESOURCE = 2, 32  # ConfigResource types
_SET, _DELETE = 0, 1
_CONFIG_SOURCES = {1: "TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                   4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
_COORDINATOR_MOVED = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                      ErrorCode.coordinator_load_in_progress}


class ScramMechanism(enum.IntEnum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """SASL's name for it: SCRAM-SHA-256, SCRAM-SHA-512."""
        return self.name.replace("_", "-")

    @classmethod
    def parse(cls, name: str | ScramMechanism) -> ScramMechanism:
        if isinstance(name, ScramMechanism):
            return name
        try:
            mechanism = cls[name.strip().upper().replace("-", "_")]
        except KeyError:
            mechanism = cls.UNKNOWN
        if mechanism is cls.UNKNOWN:
            raise ValueError(f"unknown SCRAM mechanism {name!r}: SCRAM-SHA-256 or SCRAM-SHA-512")
        return mechanism


_SCRAM_HASHES = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: `principal` (User:name) from `host` ("*" for any) is allowed or denied
    `operation` on the resources the pattern names."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Matches ACLs for describe_acls/delete_acls; None (or ANY) matches everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set `user`'s credential for `mechanism`. The password never leaves the client: it is
    salted and hashed here (KIP-554), with a random salt unless one is given."""

    user: str
    mechanism: ScramMechanism
    password: str
    iterations: int = 4096
    salt: bytes | None = None

    def salted_password(self, salt: bytes) -> bytes:
        """SCRAM's SaltedPassword = Hi(password, salt, i): PBKDF2 with the mechanism's HMAC."""
        return hashlib.pbkdf2_hmac(_SCRAM_HASHES[ScramMechanism.parse(self.mechanism)],
                                   self.password.encode(), salt, self.iterations)


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: ScramMechanism


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[PartitionInfo]
    internal: bool = False


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    is_default: bool
    is_sensitive: bool


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Ongoing, PrepareCommit, CompleteAbort, Empty, ...


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1 when no transaction is open
    partitions: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1 when the producer has no open transaction here


class AdminError(KafkaError):
    """Some items of an admin call failed; `errors` maps each failed item to its error."""

    def __init__(self, message: str, code: int, errors: Mapping[Any, KafkaError]) -> None:
        super().__init__(message, code)
        self.errors = dict(errors)


def _item_error(what: str, code: int, message: str | None = None) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    detail = f" ({message})" if message else ""
    return KafkaError(f"{what}: {error_name(code)}{detail}", int(code))


def _raise_failures(failures: Mapping[Any, KafkaError]) -> None:
    if not failures:
        return
    errors = list(failures.values())
    if len(errors) == 1:
        raise AdminError(str(errors[0]), errors[0].code, failures)
    raise AdminError(f"{len(errors)} items failed: " + "; ".join(map(str, errors)),
                     errors[0].code, failures)


def _ms(value: datetime.timedelta | datetime.datetime | int) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):  # at or before the epoch: Kafka's -1, "none"
        ms = round(value.timestamp() * 1000)
        return ms if ms > 0 else -1
    return int(value)


_IntEnumT = TypeVar("_IntEnumT", bound=enum.IntEnum)


def _enum(kind: type[_IntEnumT], value: int) -> _IntEnumT:
    """A wire value as the enum, UNKNOWN for a value this client does not know."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


def _acl_text(a: AclBinding) -> str:
    return (f"{a.permission_type.name} {a.principal} from {a.host} {a.operation.name} on "
            f"{a.resource_type.name}:{a.pattern_type.name}:{a.resource_name}")


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return out


class AsyncAdmin:
    """The asyncio admin client. `AsyncAdmin(config)` with at least bootstrap.servers."""

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self.config = as_config(config)
        self.cluster = Cluster(self.config)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.config["request.timeout.ms"])

    async def _controller(self) -> BrokerConnection:
        """Topic changes go to the controller (any broker forwards them in KRaft)."""
        md = await self.cluster.refresh([])
        if md.controller_id in md.brokers:
            return await self.cluster.connection(md.controller_id)
        return await self.cluster.any_connection()

    # -- topics ---------------------------------------------------------------------------

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
        _raise_failures({r.name: e for r in response.topics
                         if (e := _item_error(f"create topic {r.name!r}", r.error_code,
                                              getattr(r, "error_message", None)))})

    async def delete_topics(self, names: Iterable[str]) -> None:
        conn = await self._controller()
        response = await conn.send(make_request(conn, ApiKey.DELETE_TOPICS, topic_names=tuple(names),
                                                timeout=self._timeout))
        _raise_failures({r.name: e for r in response.responses
                         if (e := _item_error(f"delete topic {r.name!r}", r.error_code,
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
        _raise_failures({r.name: e for r in response.results
                         if (e := _item_error(f"create partitions of {r.name!r}", r.error_code,
                                              r.error_message))})

    async def _metadata(self, topics: list[str] | None) -> Any:
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.METADATA)
        wanted = None if topics is None else tuple(
            build(module.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        return await conn.send(make_request(
            conn, ApiKey.METADATA, topics=wanted, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False, include_cluster_authorized_operations=False))

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        response = await self._metadata(None)
        return sorted(t.name for t in response.topics
                      if t.name is not None and (include_internal or not t.is_internal))

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        response = await self._metadata(list(names))
        out, failures = {}, {}
        for t in response.topics:
            if (e := _item_error(f"describe topic {t.name!r}", t.error_code)) is not None:
                failures[t.name] = e
                continue
            parts = sorted((PartitionInfo(p.partition_index, p.leader_id, list(p.replica_nodes),
                                          list(p.isr_nodes)) for p in t.partitions),
                           key=lambda p: p.partition)
            out[t.name] = TopicDescription(t.name, getattr(t, "topic_id", None), parts, t.is_internal)
        _raise_failures(failures)
        return out

    async def describe_configs(self, topic: str) -> dict[str, ConfigEntry]:
        return await self._describe_configs(_TOPIC_RESOURCE, topic)

    async def describe_group_configs(self, group_id: str) -> dict[str, ConfigEntry]:
        """The group's configs (resource type GROUP, KIP-848/KIP-932), e.g. share groups'
        `share.auto.offset.reset`."""
        return await self._describe_configs(_GROUP_RESOURCE, group_id)

    async def _describe_configs(self, resource_type: int, name: str) -> dict[str, ConfigEntry]:
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.DESCRIBE_CONFIGS)
        resource = build(module.DescribeConfigsResource, resource_type=resource_type,
                         resource_name=name, configuration_keys=None)
        response = await conn.send(make_request(conn, ApiKey.DESCRIBE_CONFIGS, resources=(resource,),
                                                include_synonyms=False, include_documentation=False))
        (result,) = response.results
        if (e := _item_error(f"describe configs of {name!r}", result.error_code,
                             result.error_message)) is not None:
            _raise_failures({name: e})
        return {c.name: ConfigEntry(c.name, c.value, _CONFIG_SOURCES.get(c.config_source, "UNKNOWN"),
                                    c.read_only, c.config_source == 5, c.is_sensitive)
                for c in result.configs}

    async def alter_topic_configs(self, topic: str, *, set: Mapping[str, str] | None = None,
                                  delete: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: set some keys, return others to their defaults."""
        await self._alter_configs(_TOPIC_RESOURCE, topic, set, delete, validate_only)

    async def alter_group_configs(self, group_id: str, *, set: Mapping[str, str] | None = None,
                                  delete: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs of a group (resource type GROUP), e.g.
        set={"share.auto.offset.reset": "earliest"} for a share group."""
        await self._alter_configs(_GROUP_RESOURCE, group_id, set, delete, validate_only)

    async def _alter_configs(self, resource_type: int, name: str, set: Mapping[str, str] | None,
                             delete: Iterable[str], validate_only: bool) -> None:
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.INCREMENTAL_ALTER_CONFIGS)
        changes = [build(module.AlterableConfig, name=k, config_operation=_SET, value=str(v))
                   for k, v in (set or {}).items()]
        changes += [build(module.AlterableConfig, name=k, config_operation=_DELETE, value=None)
                    for k in delete]
        resource = build(module.AlterConfigsResource, resource_type=resource_type,
                         resource_name=name, configs=tuple(changes))
        response = await conn.send(make_request(conn, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                                resources=(resource,), validate_only=validate_only))
        (result,) = response.responses
        if (e := _item_error(f"alter configs of {name!r}", result.error_code,
                             result.error_message)) is not None:
            _raise_failures({name: e})

    async def describe_cluster(self) -> ClusterDescription:
        conn = await self.cluster.any_connection()
        if conn.supports(ApiKey.DESCRIBE_CLUSTER):
            response = await conn.send(make_request(conn, ApiKey.DESCRIBE_CLUSTER,
                                                    include_cluster_authorized_operations=False,
                                                    endpoint_type=1))
            if (e := _item_error("describe cluster", response.error_code, response.error_message)):
                raise e
            brokers = [BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
        else:  # older brokers (and librdkafka's mock): the same facts from Metadata
            response = await self._metadata([])
            brokers = [BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
        return ClusterDescription(response.cluster_id, response.controller_id,
                                  sorted(brokers, key=lambda b: b.node_id))

    # -- transactions ---------------------------------------------------------------------

    async def _brokers(self) -> list[BrokerConnection]:
        md = await self.cluster.refresh([])
        return [await self.cluster.connection(node) for node in sorted(md.brokers)]

    async def list_transactions(self, *, states: Iterable[str] | None = None,
                                producer_ids: Iterable[int] | None = None,
                                running_longer_than_ms: int | None = None) -> list[TransactionListing]:
        """Transactions known to every broker's coordinator, filtered as asked."""
        out: list[TransactionListing] = []
        for conn in await self._brokers():
            if running_longer_than_ms is not None and conn.version(ApiKey.LIST_TRANSACTIONS) < 1:
                raise UnsupportedVersionError(
                    f"broker {conn.host}:{conn.port} speaks ListTransactions v"
                    f"{conn.broker_max_version(ApiKey.LIST_TRANSACTIONS)}; running_longer_than_ms "
                    "needs v1 (KIP-994, Kafka 3.8+): list without it and filter on describe_transactions")
            response = await conn.send(make_request(
                conn, ApiKey.LIST_TRANSACTIONS, state_filters=tuple(states or ()),
                producer_id_filters=tuple(producer_ids or ()),
                duration_filter=-1 if running_longer_than_ms is None else running_longer_than_ms))
            if (e := _item_error(f"list transactions on broker {conn.node_id}", response.error_code)):
                raise e
            out.extend(TransactionListing(s.transactional_id, s.producer_id, s.transaction_state)
                       for s in response.transaction_states)
        return sorted(out, key=lambda t: t.transactional_id)

    async def describe_transactions(self, transactional_ids: Iterable[str]
                                    ) -> dict[str, TransactionDescription]:
        """Each id is asked of its transaction coordinator."""
        ids = list(dict.fromkeys(transactional_ids))
        out: dict[str, TransactionDescription] = {}
        failures: dict[str, KafkaError] = {}
        for attempt in range(3):
            by_node: dict[int, tuple[BrokerConnection, list[str]]] = {}
            for txn_id in ids:
                conn = await self.cluster.coordinator(COORDINATOR_TRANSACTION, txn_id)
                by_node.setdefault(id(conn), (conn, []))[1].append(txn_id)
            moved: list[str] = []
            for conn, wanted in by_node.values():
                response = await conn.send(make_request(conn, ApiKey.DESCRIBE_TRANSACTIONS,
                                                        transactional_ids=tuple(wanted)))
                for s in response.transaction_states:
                    if s.error_code in _COORDINATOR_MOVED and attempt < 2:
                        self.cluster.forget_coordinator(COORDINATOR_TRANSACTION, s.transactional_id)
                        moved.append(s.transactional_id)
                    elif (e := _item_error(f"describe transaction {s.transactional_id!r}",
                                           s.error_code)) is not None:
                        failures[s.transactional_id] = e
                    else:
                        out[s.transactional_id] = TransactionDescription(
                            s.transaction_state, s.producer_id, s.producer_epoch,
                            _ms(s.transaction_timeout), _ms(s.transaction_start_time),
                            sorted(TopicPartition(t.topic, p)
                                   for t in s.topics for p in t.partitions))
            if not moved:
                break
            ids = moved
            await asyncio.sleep(0.1 * (attempt + 1))
        _raise_failures(failures)
        return out

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
        return [(conn, _by_topic(tps)) for conn, tps in groups.values()], failures

    async def describe_producers(self, partitions: Iterable[tuple[str, int]]
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers of each partition, as its leader's log knows them."""
        out: dict[TopicPartition, list[ProducerState]] = {}
        leaders, failures = await self._by_leader(partitions, "describe producers of")
        for conn, topics in leaders:
            module = request_module(conn, ApiKey.DESCRIBE_PRODUCERS)
            response = await conn.send(make_request(conn, ApiKey.DESCRIBE_PRODUCERS, topics=tuple(
                build(module.TopicRequest, name=t, partition_indexes=tuple(ps))
                for t, ps in topics.items())))
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if (e := _item_error(f"describe producers of {t.name}-{p.partition_index}",
                                         p.error_code, p.error_message)) is not None:
                        failures[tp] = e
                        continue
                    out[tp] = [ProducerState(s.producer_id, s.producer_epoch, s.last_sequence,
                                             s.last_timestamp, s.coordinator_epoch,
                                             s.current_txn_start_offset)
                               for s in p.active_producers]
        _raise_failures(failures)
        return out

    async def abort_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int) -> None:
        """End a hanging transaction on one partition: write its ABORT marker there (sent to the
        partition's leader, as Kafka's Admin.abortTransaction does). Take the producer id, epoch
        and coordinator epoch from describe_producers."""
        what = f"abort transaction of producer {producer_id} on"
        leaders, failures = await self._by_leader([(topic, partition)], what)
        _raise_failures(failures)
        ((conn, _),) = leaders
        module = request_module(conn, ApiKey.WRITE_TXN_MARKERS)
        marker = build(module.WritableTxnMarker, producer_id=producer_id,
                       producer_epoch=producer_epoch, transaction_result=False,
                       coordinator_epoch=coordinator_epoch,
                       topics=(build(module.WritableTxnMarkerTopic, name=topic,
                                     partition_indexes=(partition,)),))
        response = await conn.send(make_request(conn, ApiKey.WRITE_TXN_MARKERS, markers=(marker,)))
        failures = {TopicPartition(t.name, p.partition_index): e
                    for r in response.markers for t in r.topics for p in t.partitions
                    if (e := _item_error(f"{what} {t.name}-{p.partition_index}", p.error_code))}
        _raise_failures(failures)

    async def force_terminate_transaction(self, transactional_id: str) -> None:
        """Abort whatever transaction `transactional_id` has open, a prepared 2PC one included
        (KIP-939 forceTerminateTransaction), and fence its producer: InitProducerId with
        keepPreparedTxn=false at the id's transaction coordinator, as Kafka does. For a
        well-formed transaction that no client will end; a hanging one (unknown to the
        coordinator) needs abort_transaction. The application must initialize again.

        TransactionTimeoutMs is 1: the identity this call gets is discarded, so no transaction
        ever runs under it, and 1 ms is valid under any transaction.max.timeout.ms."""
        if not transactional_id:
            raise ValueError("force_terminate_transaction needs a transactional id")
        timeout_ms = self.config["request.timeout.ms"]
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        backoff = max(self.config["retry.backoff.ms"], 1) / 1000
        while True:
            conn = await self.cluster.coordinator(COORDINATOR_TRANSACTION, transactional_id)
            response = await conn.send(make_request(
                conn, ApiKey.INIT_PRODUCER_ID, transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(milliseconds=1), producer_id=-1,
                producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False))
            code = response.error_code
            if code == ErrorCode.none:
                return
            if code in _COORDINATOR_MOVED:
                self.cluster.forget_coordinator(COORDINATOR_TRANSACTION, transactional_id)
            elif code != ErrorCode.concurrent_transactions:  # markers still being written
                raise KafkaError(f"force terminate transaction {transactional_id!r}: "
                                 f"{error_name(code)}", int(code))
            if asyncio.get_running_loop().time() + backoff > deadline:
                raise KafkaError(f"force terminate transaction {transactional_id!r}: still "
                                 f"{error_name(code)} after request.timeout.ms={timeout_ms}; "
                                 "call again to retry", int(code))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    # -- ACLs and SCRAM credentials --------------------------------------------------------

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        acls = list(acls)
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.CREATE_ACLS)
        response = await conn.send(make_request(conn, ApiKey.CREATE_ACLS, creations=tuple(
            build(module.AclCreation, resource_type=a.resource_type, resource_name=a.resource_name,
                  resource_pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                  operation=a.operation, permission_type=a.permission_type) for a in acls)))
        _raise_failures({a: e for a, r in zip(acls, response.results, strict=False)
                         if (e := _item_error(f"create ACL {_acl_text(a)}", r.error_code,
                                              r.error_message))})

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        wanted = acl_filter or AclBindingFilter()
        conn = await self.cluster.any_connection()
        response = await conn.send(make_request(
            conn, ApiKey.DESCRIBE_ACLS, resource_type_filter=wanted.resource_type,
            resource_name_filter=wanted.resource_name, pattern_type_filter=wanted.pattern_type,
            principal_filter=wanted.principal, host_filter=wanted.host, operation=wanted.operation,
            permission_type=wanted.permission_type))
        if (e := _item_error("describe ACLs", response.error_code, response.error_message)):
            raise e
        return [AclBinding(_enum(ResourceType, r.resource_type), r.resource_name,
                           _enum(PatternType, r.pattern_type), a.principal, a.host,
                           _enum(AclOperation, a.operation),
                           _enum(AclPermissionType, a.permission_type))
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL that matches one of the filters; returns the ACLs deleted."""
        filters = list(filters)
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.DELETE_ACLS)
        response = await conn.send(make_request(conn, ApiKey.DELETE_ACLS, filters=tuple(
            build(module.DeleteAclsFilter, resource_type_filter=f.resource_type,
                  resource_name_filter=f.resource_name, pattern_type_filter=f.pattern_type,
                  principal_filter=f.principal, host_filter=f.host, operation=f.operation,
                  permission_type=f.permission_type) for f in filters)))
        deleted: list[AclBinding] = []
        failures: dict[Any, KafkaError] = {}
        for i, r in enumerate(response.filter_results):
            if (e := _item_error("delete ACLs", r.error_code, r.error_message)) is not None:
                failures[i] = e
                continue
            for a in r.matching_acls:
                binding = AclBinding(_enum(ResourceType, a.resource_type), a.resource_name,
                                     _enum(PatternType, a.pattern_type), a.principal, a.host,
                                     _enum(AclOperation, a.operation),
                                     _enum(AclPermissionType, a.permission_type))
                if (e := _item_error(f"delete ACL {_acl_text(binding)}", a.error_code,
                                     a.error_message)) is not None:
                    failures[binding] = e
                else:
                    deleted.append(binding)
        _raise_failures(failures)
        return deleted

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                              ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iteration counts (never the credentials); every
        user that has one when `users` is None."""
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
        wanted = None if users is None else tuple(build(module.UserName, name=u) for u in users)
        response = await conn.send(make_request(conn, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                                                users=wanted))
        if (e := _item_error("describe SCRAM credentials", response.error_code,
                             response.error_message)):
            raise e
        out: dict[str, list[ScramCredentialInfo]] = {}
        failures: dict[str, KafkaError] = {}
        for r in response.results:
            if (e := _item_error(f"describe SCRAM credentials of {r.user!r}", r.error_code,
                                 r.error_message)) is not None:
                failures[r.user] = e
                continue
            out[r.user] = [ScramCredentialInfo(_enum(ScramMechanism, c.mechanism), c.iterations)
                           for c in r.credential_infos]
        _raise_failures(failures)
        return out

    async def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> None:
        conn = await self.cluster.any_connection()
        module = request_module(conn, ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
        upsertions, deletions = [], []
        for a in alterations:
            mechanism = ScramMechanism.parse(a.mechanism)
            if isinstance(a, UserScramCredentialDeletion):
                deletions.append(build(module.ScramCredentialDeletion, name=a.user,
                                       mechanism=mechanism))
                continue
            salt = a.salt if a.salt is not None else os.urandom(32)
            upsertions.append(build(module.ScramCredentialUpsertion, name=a.user,
                                    mechanism=mechanism, iterations=a.iterations, salt=salt,
                                    salted_password=a.salted_password(salt)))
        response = await conn.send(make_request(conn, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                                                deletions=tuple(deletions),
                                                upsertions=tuple(upsertions)))
        _raise_failures({r.user: e for r in response.results
                         if (e := _item_error(f"alter SCRAM credentials of {r.user!r}",
                                              r.error_code, r.error_message))})

    async def close(self) -> None:
        await self.cluster.close()


class Admin(Blocking):
    """The blocking admin client: AsyncAdmin's calls, run on the client's own loop thread."""

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self._loop = LoopThread.shared()
        self._admin = AsyncAdmin(config)
        self.config = self._admin.config
        self._watch(self._admin.close)

    def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False) -> None:
        self._loop.run(self._admin.create_topics(list(topics), validate_only=validate_only))

    def delete_topics(self, names: Iterable[str]) -> None:
        self._loop.run(self._admin.delete_topics(list(names)))

    def create_partitions(self, new_totals: Mapping[str, int], *, validate_only: bool = False) -> None:
        self._loop.run(self._admin.create_partitions(new_totals, validate_only=validate_only))

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._loop.run(self._admin.list_topics(include_internal=include_internal))

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        return self._loop.run(self._admin.describe_topics(list(names)))

    def describe_configs(self, topic: str) -> dict[str, ConfigEntry]:
        return self._loop.run(self._admin.describe_configs(topic))

    def alter_topic_configs(self, topic: str, *, set: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), validate_only: bool = False) -> None:
        self._loop.run(self._admin.alter_topic_configs(topic, set=set, delete=list(delete),
                                                       validate_only=validate_only))

    def describe_group_configs(self, group_id: str) -> dict[str, ConfigEntry]:
        return self._loop.run(self._admin.describe_group_configs(group_id))

    def alter_group_configs(self, group_id: str, *, set: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), validate_only: bool = False) -> None:
        self._loop.run(self._admin.alter_group_configs(group_id, set=set, delete=list(delete),
                                                       validate_only=validate_only))

    def describe_cluster(self) -> ClusterDescription:
        return self._loop.run(self._admin.describe_cluster())

    def list_transactions(self, *, states: Iterable[str] | None = None,
                          producer_ids: Iterable[int] | None = None,
                          running_longer_than_ms: int | None = None) -> list[TransactionListing]:
        return self._loop.run(self._admin.list_transactions(
            states=None if states is None else list(states),
            producer_ids=None if producer_ids is None else list(producer_ids),
            running_longer_than_ms=running_longer_than_ms))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        return self._loop.run(self._admin.describe_transactions(list(transactional_ids)))

    def describe_producers(self, partitions: Iterable[tuple[str, int]]
                           ) -> dict[TopicPartition, list[ProducerState]]:
        return self._loop.run(self._admin.describe_producers(list(partitions)))

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        self._loop.run(self._admin.abort_transaction(topic, partition, producer_id, producer_epoch,
                                                     coordinator_epoch))

    def force_terminate_transaction(self, transactional_id: str) -> None:
        self._loop.run(self._admin.force_terminate_transaction(transactional_id))

    def create_acls(self, acls: Iterable[AclBinding]) -> None:
        self._loop.run(self._admin.create_acls(list(acls)))

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        return self._loop.run(self._admin.describe_acls(acl_filter))

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        return self._loop.run(self._admin.delete_acls(list(filters)))

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                        ) -> dict[str, list[ScramCredentialInfo]]:
        return self._loop.run(self._admin.describe_user_scram_credentials(
            None if users is None else list(users)))

    def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> None:
        self._loop.run(self._admin.alter_user_scram_credentials(list(alterations)))

    def close(self) -> None:
        self._close(self._admin.close())
