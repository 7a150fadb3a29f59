"""The client's plain values, at the bottom of the client: what it hands to applications and
takes from them (records, group and share-group identities, the transaction states Kafka
names, the admin client's results and requests), in one module, as aiokafka's `structs.py`
holds its own. Frozen dataclasses, NamedTuples and enums, with nothing to send or wait for:
every other module of the client imports its values from here, and this one imports nothing of
the client (tests/unit/test_imports.py holds it to that).

Also here: the small helpers these values need (a ShareAcknowledgements' AcknowledgementBatch
layout, a SCRAM credential's salted password, an enum read off the wire), the conversions of
durations that request builders and answers share (`duration`, `milliseconds`) and `by_topic`,
the grouping of partitions every request with topics needs.

`TransactionState` is Kafka's TransactionState by the names DescribeTransactions and
ListTransactions answer with (KIP-664), for code that reads them (the admin client, the web
console, the CLI): open is Ongoing, PrepareCommit, PrepareAbort and PrepareEpochFence, the
states in which a transaction holds partitions whose markers are not all written, so that its
data keeps their last stable offset back (KIP-98). A prepared 2PC transaction (KIP-939) is
Ongoing at its coordinator (preparing is client-side), so it is open. PrepareEpochFence is the
instant an InitProducerId fences an open transaction, which is then aborted: still open. Empty,
CompleteCommit and CompleteAbort are idle (a new transaction may begin); Dead is an expired
transactional id; none of these is open.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from exactly.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.protocol.structs import TopicPartition

__all__ = [
    "NO_TIMEOUT_MS",
    "AcknowledgeType",
    "AclBinding",
    "AclBindingFilter",
    "BrokerInfo",
    "ClusterDescription",
    "ConfigEntry",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "ListOffsetsResultInfo",
    "LogDirDescription",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "ProducerState",
    "RecordMetadata",
    "ReplicaLogInfo",
    "ScramCredentialInfo",
    "ScramMechanism",
    "ShareAcknowledgements",
    "ShareGroupMetadata",
    "ShareRecord",
    "TopicDescription",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "TransactionState",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "ack_batches",
    "by_topic",
    "duration",
    "milliseconds",
    "wire_enum",
]


# -- records ----------------------------------------------------------------------------------

class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: int  # 0: CreateTime, 1: LogAppendTime


class ShareRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: int
    delivery_count: int  # 1 on the first delivery


class AcknowledgeType(enum.IntEnum):
    """Kafka's AcknowledgeType ids, as ShareFetch and ShareAcknowledge carry them."""

    GAP = 0      # an acquired offset without a record (the client sends these itself)
    ACCEPT = 1   # processed: never delivered again
    RELEASE = 2  # give it back: delivered again (its delivery count goes up)
    REJECT = 3   # unprocessable: archived, never delivered again
    RENEW = 4    # extend the lock (KIP-1222, ShareAcknowledge v2: not offered yet)


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written. `offset` is -1 when it is not known (acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


# -- group memberships and transactions -------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What TxnOffsetCommit needs of a consumer's group membership (Consumer.group_metadata())."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class ShareGroupMetadata:
    """The member's identity in its share group (KIP-1289's ShareGroupMetadata)."""

    group_id: str
    member_id: str
    member_epoch: int


@dataclass(frozen=True, slots=True)
class ShareAcknowledgements:
    """Acknowledgements for a transaction: offset -> type per partition, and the member that
    holds the records (TxnShareAcknowledge names it; the broker fences a stale epoch)."""

    group: ShareGroupMetadata
    acks: Mapping[TopicPartition, Mapping[int, AcknowledgeType]]

    def offsets(self) -> dict[TopicPartition, set[int]]:
        return {tp: set(by_offset) for tp, by_offset in self.acks.items()}


def ack_batches(acks: Mapping[int, int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """(first offset, last offset, types) ranges of contiguous offsets: one type for a range
    of one type, else a type per offset (the AcknowledgementBatch layout)."""
    out: list[tuple[int, int, tuple[int, ...]]] = []
    run: list[int] = []
    for offset in sorted(acks):
        if run and offset != run[-1] + 1:
            out.append(_batch(run, acks))
            run = []
        run.append(offset)
    if run:
        out.append(_batch(run, acks))
    return out


def _batch(run: list[int], acks: Mapping[int, int]) -> tuple[int, int, tuple[int, ...]]:
    types = tuple(int(acks[o]) for o in run)
    return run[0], run[-1], types[:1] if len(set(types)) == 1 else types


class TransactionState(enum.StrEnum):
    """Kafka's transaction states by the names its admin APIs answer with (see the module doc
    for which are open)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @classmethod
    def parse(cls, name: str) -> TransactionState | None:
        """The state of a name a broker answered; None for one this client does not know."""
        try:
            return cls(name)
        except ValueError:
            return None

    @property
    def is_open(self) -> bool:
        """Begun and not ended: its partitions' markers are not all written, and its data
        keeps their last stable offset back."""
        return self in _OPEN

    @property
    def is_idle(self) -> bool:
        """No transaction in progress: a new one may begin (Empty, CompleteCommit,
        CompleteAbort)."""
        return self in _IDLE


_OPEN = frozenset({TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
                   TransactionState.PREPARE_ABORT, TransactionState.PREPARE_EPOCH_FENCE})
_IDLE = frozenset({TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                   TransactionState.COMPLETE_ABORT})
NO_TIMEOUT_MS = -1  # the transaction timeout of a 2PC transaction (KIP-939): it never times out


# -- the admin client's values ----------------------------------------------------------------

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
    coordinator_id: int = -1  # the broker that answered: the transaction's coordinator


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



# -- helpers ----------------------------------------------------------------------------------

_IntEnumT = TypeVar("_IntEnumT", bound=enum.IntEnum)


def wire_enum(kind: type[_IntEnumT], value: int) -> _IntEnumT:
    """A wire value as the enum, UNKNOWN (0) for a value this client does not know."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


def duration(ms: float) -> datetime.timedelta:
    """A number of milliseconds (a config value, a wait) as the duration a request field takes;
    whole milliseconds, as the wire carries them."""
    return datetime.timedelta(milliseconds=int(ms))


def milliseconds(value: datetime.timedelta | datetime.datetime | int) -> int:
    """A duration or a point in time of an answer, in milliseconds; a time at or before the
    epoch is Kafka's -1, "none"."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        ms = round(value.timestamp() * 1000)
        return ms if ms > 0 else -1
    return int(value)


def by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Partitions grouped by topic, in the order given, as requests list them."""
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return out
