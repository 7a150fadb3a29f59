"""Admin: topics, configs, the cluster, and Kafka's transaction tools (KIP-664): list and describe
transactions, describe a partition's producers, abort a hanging transaction by writing its
marker, and force-terminate a transactional id's open (or prepared 2PC) transaction (KIP-939). `AsyncAdmin` is the asyncio client; `Admin` runs the same calls on the client's loop.

Consumer groups as Kafka's Admin shapes them: list, describe (DescribeGroups for classic groups,
ConsumerGroupDescribe for KIP-848 ones), their committed offsets (OffsetFetch), alter them as an
admin commit that only an empty group takes, delete groups and offsets (KIP-496), and
ListOffsets by OffsetSpec with an isolation level.

A call that fails for some of its items raises AdminError (a KafkaError carrying the first
failure's code) once the whole request is answered, with every failure in `errors`."""

from __future__ import annotations

import asyncio
import datetime
import enum
import hashlib
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from exactly.client._loop import Blocking, LoopThread
from exactly.client.assignors import ProtocolError, decode_assignment
from exactly.client.cluster import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    Cluster,
    make_request,
    request_module,
)
from exactly.client.config import ClientConfig, as_config
from exactly.client.connection import BrokerConnection
from exactly.client.errors import KafkaConnectionError, KafkaError, UnsupportedVersionError
from exactly.client.group import CommitFailedError, GroupCoordinatorClient
from exactly.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition

_TOPIC_RESOURCE, _GROUP_RESOURCE = 2, 32  # ConfigResource types
_BROKER_RESOURCE = 4  # a broker's id, or "" for the cluster-wide default (KIP-226)
_SET, _DELETE = 0, 1
_CONFIG_SOURCES = {1: "TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                   4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                   8: "GROUP_CONFIG"}
_COORDINATOR_MOVED = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                      ErrorCode.coordinator_load_in_progress}
_ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


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


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One partition's replica in a log directory (DescribeLogDirs)."""
    size: int  # bytes of the partition's segments
    offset_lag: int  # 0 on a leader
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """A broker's log directory: where it is, its partitions, and its disk's space (-1 when the
    broker does not say)."""
    path: str
    error: int
    replicas: dict[TopicPartition, ReplicaLogInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupListing:
    """A consumer group as ListGroups names it. `type` is "classic" or "consumer" (KIP-848);
    `protocol_type` is "consumer", or "" for a group that only has committed offsets."""

    group_id: str
    state: str  # Kafka's names: Stable, Empty, PreparingRebalance, Assigning, Reconciling, ...
    type: str
    protocol_type: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]
    target_assignment: list[TopicPartition] | None = None  # consumer groups (KIP-848) only
    member_epoch: int | None = None  # consumer groups (KIP-848) only


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """A group from DescribeGroups (type "classic") or ConsumerGroupDescribe (type "consumer",
    KIP-848). `coordinator` is the broker that answered; `partition_assignor` is the classic
    group's protocol (range, roundrobin, ...) or the consumer group's server-side assignor."""

    group_id: str
    type: str
    state: str
    protocol_type: str
    partition_assignor: str
    members: list[MemberDescription]
    coordinator: BrokerInfo
    group_epoch: int | None = None  # consumer groups only
    target_assignment_epoch: int | None = None  # consumer groups only


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str | None = None
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """What list_offsets looks up, as Kafka's OffsetSpec: earliest(), latest(), max_timestamp(),
    or for_timestamp(ms), the first offset whose timestamp is at or after `ms`."""

    timestamp: int

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(-2)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(-1)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(-3)

    @classmethod
    def for_timestamp(cls, ms: int) -> OffsetSpec:
        if ms < 0:
            raise ValueError(f"timestamp {ms} is before the epoch: give milliseconds since 1970")
        return cls(ms)


@dataclass(frozen=True, slots=True)
class ListOffsetsResultInfo:
    """offset is -1 when a for_timestamp spec finds no record at or after the timestamp."""

    offset: int
    timestamp: int
    leader_epoch: int | None


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


def _resource_text(name: str) -> str:
    """A config resource's name in an error; "" is the brokers' cluster-wide default."""
    return repr(name) if name else "the brokers' cluster-wide default"


def _acl_text(a: AclBinding) -> str:
    return (f"{a.permission_type.name} {a.principal} from {a.host} {a.operation.name} on "
            f"{a.resource_type.name}:{a.pattern_type.name}:{a.resource_name}")


def _assigned(assignment: Any) -> list[TopicPartition]:
    """A ConsumerGroupDescribe assignment as sorted (topic, partition)s."""
    return sorted(TopicPartition(t.topic_name, p) for t in assignment.topic_partitions
                  for p in t.partitions)


def _first_result_error(response: Any) -> int:
    return int(response.results[0].error_code)


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

    async def _describe_configs(self, resource_type: int, name: str,
                                node: int | None = None) -> dict[str, ConfigEntry]:
        """`node`: the broker to ask (a broker's own configs are its to tell); None for any."""
        conn = await (self.cluster.any_connection() if node is None
                      else self.cluster.connection(node))
        module = request_module(conn, ApiKey.DESCRIBE_CONFIGS)
        resource = build(module.DescribeConfigsResource, resource_type=resource_type,
                         resource_name=name, configuration_keys=None)
        response = await conn.send(make_request(conn, ApiKey.DESCRIBE_CONFIGS, resources=(resource,),
                                                include_synonyms=False, include_documentation=False))
        (result,) = response.results
        if (e := _item_error(f"describe configs of {_resource_text(name)}", result.error_code,
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

    async def describe_broker_configs(self, broker_id: int | None = None) -> dict[str, ConfigEntry]:
        """A broker's configs, each with its source (dynamic, static, default), asked of that
        broker; with `broker_id` None, the cluster-wide dynamic defaults (KIP-226)."""
        if broker_id is None:
            return await self._describe_configs(_BROKER_RESOURCE, "")
        return await self._describe_configs(_BROKER_RESOURCE, str(broker_id), broker_id)

    async def alter_broker_configs(self, broker_id: int | None = None, *,
                                   set: Mapping[str, str] | None = None,
                                   delete: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs of a broker's dynamic configs (KIP-226), or of the
        cluster-wide default with `broker_id` None. The broker refuses keys it cannot change
        at run time."""
        if broker_id is None:
            await self._alter_configs(_BROKER_RESOURCE, "", set, delete, validate_only)
        else:
            await self._alter_configs(_BROKER_RESOURCE, str(broker_id), set, delete,
                                      validate_only, broker_id)

    async def _alter_configs(self, resource_type: int, name: str, set: Mapping[str, str] | None,
                             delete: Iterable[str], validate_only: bool,
                             node: int | None = None) -> None:
        conn = await (self.cluster.any_connection() if node is None
                      else self.cluster.connection(node))
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
        if (e := _item_error(f"alter configs of {_resource_text(name)}", result.error_code,
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

    async def delete_records(self, before: Mapping[tuple[str, int], int], *, partial: bool = False
                             ) -> dict[TopicPartition, Any]:
        """Move each partition's log start offset up to the given offset (-1: its high
        watermark), as kafka-delete-records.sh does (KIP-107); the new low watermarks. With
        `partial`, a partition that failed maps to its KafkaError instead of raising AdminError,
        so that the others' results are not lost."""
        out: dict[TopicPartition, Any] = {}
        wanted = {TopicPartition(*tp): offset for tp, offset in before.items()}
        leaders, failures = await self._by_leader(wanted, "delete records of")
        for conn, topics in leaders:
            module = request_module(conn, ApiKey.DELETE_RECORDS)
            response = await conn.send(make_request(
                conn, ApiKey.DELETE_RECORDS, timeout=self._timeout, topics=tuple(
                    build(module.DeleteRecordsTopic, name=t, partitions=tuple(
                        build(module.DeleteRecordsPartition, partition_index=p,
                              offset=wanted[TopicPartition(t, p)]) for p in ps))
                    for t, ps in topics.items())))
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if (e := _item_error(f"delete records of {tp.topic}-{tp.partition}",
                                         p.error_code)) is not None:
                        failures[tp] = e
                    else:
                        out[tp] = p.low_watermark
        if partial:
            return {**out, **failures}
        _raise_failures(failures)
        return out

    async def describe_log_dirs(self, topics: Iterable[str] | None = None
                                ) -> dict[int, list[LogDirDescription]]:
        """Each broker's log directories with the partitions in them (of `topics`, or all),
        per broker id, as kafka-log-dirs.sh --describe shows them (KIP-113)."""
        # The request names partitions, not topics: every partition of each topic asked for.
        names = None if topics is None else list(topics)
        md = await self.cluster.refresh([] if names is None else names)
        wanted = None if names is None else {
            t: tuple(sorted(md.topics[t].partitions)) if t in md.topics else () for t in names}
        out: dict[int, list[LogDirDescription]] = {}
        for broker_id in sorted(md.brokers):
            conn = await self.cluster.connection(broker_id)
            module = request_module(conn, ApiKey.DESCRIBE_LOG_DIRS)
            response = await conn.send(make_request(
                conn, ApiKey.DESCRIBE_LOG_DIRS, topics=None if wanted is None else tuple(
                    build(module.DescribableLogDirTopic, topic=t, partitions=ps)
                    for t, ps in wanted.items())))
            if (e := _item_error(f"describe log dirs of broker {broker_id}",
                                 getattr(response, "error_code", 0))) is not None:
                raise e
            out[broker_id] = [LogDirDescription(
                r.log_dir, int(r.error_code),
                {TopicPartition(t.name, p.partition_index):
                     ReplicaLogInfo(p.partition_size, p.offset_lag, p.is_future_key)
                 for t in r.topics for p in t.partitions},
                getattr(r, "total_bytes", -1), getattr(r, "usable_bytes", -1))
                for r in response.results]
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

    # -- consumer groups (as Kafka's Admin: listConsumerGroups, describeConsumerGroups, ...) ---

    async def _group_request(self, group: str, what: str, api_key: int,
                             error_of: Callable[[Any], int],
                             nested: Callable[[Any], dict[str, Any]] | None = None,
                             **fields: Any) -> tuple[BrokerConnection, Any]:
        """Send a request to `group`'s coordinator (FindCoordinator), again while the
        coordinator moves or loads, up to request.timeout.ms. `nested(module)` gives the fields
        built from the negotiated version's kio module; `error_of(response)` the code that
        says whether the coordinator moved."""
        timeout_ms = self.config["request.timeout.ms"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        backoff = max(self.config["retry.backoff.ms"], 1) / 1000
        while True:
            conn = await self.cluster.coordinator(COORDINATOR_GROUP, group)
            more = nested(request_module(conn, api_key)) if nested is not None else {}
            response = await conn.send(make_request(conn, api_key, **fields, **more))
            code = error_of(response)
            if code not in _COORDINATOR_MOVED:
                return conn, response
            self.cluster.forget_coordinator(COORDINATOR_GROUP, group)
            if loop.time() + backoff > deadline:
                raise KafkaError(f"{what}: the coordinator still answers {error_name(code)} "
                                 f"after request.timeout.ms={timeout_ms}; try again", int(code))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def list_consumer_groups(self, *, states: Iterable[str] | None = None,
                                   types: Iterable[str] | None = None) -> list[ConsumerGroupListing]:
        """The consumer groups of every broker (ListGroups): classic ones and KIP-848 "consumer"
        ones; share groups are not consumer groups. `states` (Stable, Empty, ...) needs
        ListGroups v4+, `types` (classic, consumer) v5+ (KIP-848); both match any case."""
        states, types = list(states or ()), list(types or ())
        out: list[ConsumerGroupListing] = []
        for conn in await self._brokers():
            version = conn.version(ApiKey.LIST_GROUPS)
            for asked, needs in ((states, 4), (types, 5)):
                if asked and version < needs:
                    raise UnsupportedVersionError(
                        f"broker {conn.host}:{conn.port} speaks ListGroups v{version}; filtering "
                        f"by {'state' if asked is states else 'type'} needs v{needs}: list "
                        "without the filter")
            response = await conn.send(make_request(conn, ApiKey.LIST_GROUPS,
                                                    states_filter=tuple(states),
                                                    types_filter=tuple(types)))
            if (e := _item_error(f"list consumer groups on broker {conn.node_id}",
                                 response.error_code)):
                raise e
            out.extend(ConsumerGroupListing(g.group_id, getattr(g, "group_state", ""),
                                            getattr(g, "group_type", "") or "classic",
                                            g.protocol_type)
                       for g in response.groups if g.protocol_type in ("consumer", ""))
        return sorted(out, key=lambda g: g.group_id)

    async def describe_consumer_groups(self, group_ids: Iterable[str]
                                       ) -> dict[str, ConsumerGroupDescription]:
        """Each group as its coordinator describes it: ConsumerGroupDescribe for a KIP-848
        group, DescribeGroups for a classic one, as Kafka's Admin does. A group that does not
        exist fails with GROUP_ID_NOT_FOUND."""
        out: dict[str, ConsumerGroupDescription] = {}
        failures: dict[str, KafkaError] = {}
        for group_id in dict.fromkeys(group_ids):
            try:
                out[group_id] = await self._describe_consumer_group(group_id)
            except KafkaError as exc:
                if isinstance(exc, KafkaConnectionError):
                    raise
                failures[group_id] = exc
        _raise_failures(failures)
        return out

    async def _describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        what = f"describe consumer group {group_id!r}"
        conn = await self.cluster.coordinator(COORDINATOR_GROUP, group_id)
        if conn.supports(ApiKey.CONSUMER_GROUP_DESCRIBE):
            conn, response = await self._group_request(
                group_id, what, ApiKey.CONSUMER_GROUP_DESCRIBE, lambda r: r.groups[0].error_code,
                group_ids=(group_id,), include_authorized_operations=False)
            (g,) = response.groups
            if g.error_code == ErrorCode.none:
                return ConsumerGroupDescription(
                    group_id, "consumer", g.group_state, "consumer", g.assignor_name,
                    [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                       _assigned(m.assignment), _assigned(m.target_assignment),
                                       m.member_epoch) for m in g.members],
                    BrokerInfo(conn.node_id or -1, conn.host, conn.port), g.group_epoch,
                    g.assignment_epoch)
            if g.error_code != ErrorCode.group_id_not_found:  # not found: maybe a classic one
                raise _item_error(what, g.error_code, g.error_message) or KafkaError(what)
        conn, response = await self._group_request(
            group_id, what, ApiKey.DESCRIBE_GROUPS, lambda r: r.groups[0].error_code,
            groups=(group_id,), include_authorized_operations=False)
        (d,) = response.groups
        if (e := _item_error(what, d.error_code, getattr(d, "error_message", None))):
            raise e
        if d.group_state == "Dead":
            raise KafkaError(f"consumer group {group_id!r} does not exist",
                             ErrorCode.group_id_not_found)
        if d.protocol_type not in ("consumer", ""):
            raise KafkaError(f"{what}: it is a group of protocol type {d.protocol_type!r}, not "
                             "a consumer group", ErrorCode.group_id_not_found)
        members = []
        for m in d.members:
            try:
                assigned = decode_assignment(m.member_assignment).partitions
            except ProtocolError:  # a client's own bytes: shown as no assignment
                assigned = {}
            members.append(MemberDescription(
                m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host,
                sorted(TopicPartition(t, p) for t, ps in assigned.items() for p in ps)))
        return ConsumerGroupDescription(group_id, "classic", d.group_state, d.protocol_type,
                                        d.protocol_data, members,
                                        BrokerInfo(conn.node_id or -1, conn.host, conn.port))

    async def list_consumer_group_offsets(
            self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (OffsetFetch): all of them, or those of `partitions`;
        a partition with no committed offset is left out."""
        what = f"list offsets of consumer group {group_id!r}"
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        if wanted == []:
            return {}

        def topics(module: Any) -> dict[str, Any]:
            return {"topics": None if wanted is None else tuple(
                build(module.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                for t, ps in _by_topic(wanted).items())}

        _conn, response = await self._group_request(
            group_id, what, ApiKey.OFFSET_FETCH, lambda r: getattr(r, "error_code", 0), topics,
            group_id=group_id, require_stable=False)
        if (e := _item_error(what, getattr(response, "error_code", 0))):
            raise e
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        failures: dict[TopicPartition, KafkaError] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if (e := _item_error(f"{what} on {tp.topic}-{tp.partition}", p.error_code)):
                    failures[tp] = e
                elif p.committed_offset >= 0:
                    epoch = getattr(p, "committed_leader_epoch", -1)
                    out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata,
                                                epoch if epoch >= 0 else None)
        _raise_failures(failures)
        return out

    async def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata]
    ) -> None:
        """Commit `offsets` for the group as Kafka's Admin does (OffsetCommit with generation
        -1 and no member id), which the coordinator accepts only while the group has no
        members: stop its consumers first."""
        committed = {TopicPartition(*tp): o.offset if isinstance(o, OffsetAndMetadata) else int(o)
                     for tp, o in offsets.items()}
        if not committed:
            return
        coordinator = GroupCoordinatorClient(self.cluster, self.config, group_id)
        try:
            await coordinator.commit(committed)
        except CommitFailedError as exc:
            raise KafkaError(
                f"alter offsets of consumer group {group_id!r}: {exc.name}: the group has "
                "active members, and offsets can only be altered while it has none; stop its "
                "consumers and try again", exc.code) from None
        finally:
            await coordinator.close()

    async def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """DeleteGroups: each group must be empty (NON_EMPTY_GROUP otherwise); its committed
        offsets go with it."""
        failures: dict[str, KafkaError] = {}
        for group_id in dict.fromkeys(group_ids):
            what = f"delete consumer group {group_id!r}"
            _conn, response = await self._group_request(
                group_id, what, ApiKey.DELETE_GROUPS, _first_result_error,
                groups_names=(group_id,))
            if (e := _item_error(what, _first_result_error(response))):
                failures[group_id] = e
        _raise_failures(failures)

    async def delete_consumer_group_offsets(self, group_id: str,
                                            partitions: Iterable[tuple[str, int]]) -> None:
        """OffsetDelete (KIP-496): forget the group's committed offsets of `partitions`. Refused
        per partition (GROUP_SUBSCRIBED_TO_TOPIC) while a member is subscribed to its topic."""
        what = f"delete offsets of consumer group {group_id!r}"
        wanted = list(dict.fromkeys(partitions))

        def topics(module: Any) -> dict[str, Any]:
            return {"topics": tuple(
                build(module.OffsetDeleteRequestTopic, name=t, partitions=tuple(
                    build(module.OffsetDeleteRequestPartition, partition_index=p) for p in ps))
                for t, ps in _by_topic(wanted).items())}

        _conn, response = await self._group_request(
            group_id, what, ApiKey.OFFSET_DELETE, lambda r: r.error_code, topics,
            group_id=group_id)
        if (e := _item_error(what, response.error_code)):
            raise e
        _raise_failures({TopicPartition(t.name, p.partition_index): e
                         for t in response.topics for p in t.partitions
                         if (e := _item_error(f"{what} on {t.name}-{p.partition_index}",
                                              p.error_code))})

    async def list_offsets(self, specs: Mapping[tuple[str, int], OffsetSpec], *,
                           isolation_level: str = "read_uncommitted"
                           ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """ListOffsets at each partition's leader: the earliest or latest offset, the offset
        of the record with the largest timestamp, or the first at or after a timestamp.
        read_committed makes "latest" the last stable offset (KIP-98)."""
        isolation = _ISOLATION_LEVELS.get(isolation_level)
        if isolation is None:
            raise ValueError(f"isolation_level {isolation_level!r}: read_uncommitted or "
                             "read_committed")
        wanted = {TopicPartition(*tp): spec for tp, spec in specs.items()}
        leaders, failures = await self._by_leader(wanted, "list offsets of")
        out: dict[TopicPartition, ListOffsetsResultInfo] = {}
        for conn, topics in leaders:
            module = request_module(conn, ApiKey.LIST_OFFSETS)
            response = await conn.send(make_request(
                conn, ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=isolation,
                topics=tuple(build(module.ListOffsetsTopic, name=t, partitions=tuple(
                    build(module.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                          timestamp=wanted[TopicPartition(t, p)].timestamp, max_num_offsets=1)
                    for p in ps)) for t, ps in topics.items())))
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if (e := _item_error(f"list offsets of {t.name}-{p.partition_index}",
                                         p.error_code)):
                        failures[tp] = e
                        continue
                    epoch = getattr(p, "leader_epoch", -1)
                    out[tp] = ListOffsetsResultInfo(p.offset, p.timestamp,
                                                    epoch if epoch >= 0 else None)
        _raise_failures(failures)
        return out

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

    def describe_broker_configs(self, broker_id: int | None = None) -> dict[str, ConfigEntry]:
        return self._loop.run(self._admin.describe_broker_configs(broker_id))

    def alter_broker_configs(self, broker_id: int | None = None, *,
                             set: Mapping[str, str] | None = None, delete: Iterable[str] = (),
                             validate_only: bool = False) -> None:
        self._loop.run(self._admin.alter_broker_configs(broker_id, set=set, delete=list(delete),
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

    def delete_records(self, before: Mapping[tuple[str, int], int], *, partial: bool = False
                       ) -> dict[TopicPartition, Any]:
        return self._loop.run(self._admin.delete_records(dict(before), partial=partial))

    def describe_log_dirs(self, topics: Iterable[str] | None = None
                          ) -> dict[int, list[LogDirDescription]]:
        return self._loop.run(self._admin.describe_log_dirs(None if topics is None else list(topics)))

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        self._loop.run(self._admin.abort_transaction(topic, partition, producer_id, producer_epoch,
                                                     coordinator_epoch))

    def force_terminate_transaction(self, transactional_id: str) -> None:
        self._loop.run(self._admin.force_terminate_transaction(transactional_id))

    def list_consumer_groups(self, *, states: Iterable[str] | None = None,
                             types: Iterable[str] | None = None) -> list[ConsumerGroupListing]:
        return self._loop.run(self._admin.list_consumer_groups(states=states, types=types))

    def describe_consumer_groups(self, group_ids: Iterable[str]
                                 ) -> dict[str, ConsumerGroupDescription]:
        return self._loop.run(self._admin.describe_consumer_groups(list(group_ids)))

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._loop.run(self._admin.list_consumer_group_offsets(
            group_id, None if partitions is None else list(partitions)))

    def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata]
    ) -> None:
        self._loop.run(self._admin.alter_consumer_group_offsets(group_id, offsets))

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        self._loop.run(self._admin.delete_consumer_groups(list(group_ids)))

    def delete_consumer_group_offsets(self, group_id: str,
                                      partitions: Iterable[tuple[str, int]]) -> None:
        self._loop.run(self._admin.delete_consumer_group_offsets(group_id, list(partitions)))

    def list_offsets(self, specs: Mapping[tuple[str, int], OffsetSpec], *,
                     isolation_level: str = "read_uncommitted"
                     ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        return self._loop.run(self._admin.list_offsets(specs, isolation_level=isolation_level))

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
