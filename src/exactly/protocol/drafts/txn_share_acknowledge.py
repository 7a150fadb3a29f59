"""TxnShareAcknowledge v0, the RPC of KIP-1289 ("Support Transactional Acknowledgments for Share
Groups", a draft): a share consumer's acknowledgements staged in a producer's transaction,
applied when it commits and released when it aborts.

Which draft: Kafka's code in progress (apache/kafka#22357, branch
Shekharrajak/kafka:kip-1289-txn-ack-share-groups) has two versions of the schema. The PR's first
commit (as stored in apache/kafka) numbers it 93 and carries one `AcknowledgeType` (int8) per
batch; the branch's later commit numbers it 95 and carries `AcknowledgeTypes` ([]int8) per batch,
as ShareFetch and ShareAcknowledge do: one type per offset, or one for the whole range, with 0
(GAP) for an acquired offset that holds no record. This module follows the later one: it is the
draft's latest word, and it lets a consumer acknowledge exactly what ShareAcknowledge would
(gaps included) without splitting batches at every change of type. Inside a transaction only
ACCEPT (1), REJECT (3) and GAP (0) are valid; RELEASE stays outside transactions.

The API key is provisional, as every draft's here (see exactly.protocol.drafts): the KIP's
number, 1289, instead of the draft's 95 (93 before): Kafka gives out its keys in order and the
draft has already had to move once, so a low number could be taken by another KIP's API on a
released broker; 1289 cannot.

The flow. The draft's client (TransactionManager.sendShareAcknowledgementsToTransaction, "same
implementation as sendOffsetsToTransaction()" in its author's words) first names the group to
the transaction coordinator, then sends TxnShareAcknowledge; its broker side was left to a
follow-up PR, with the share-partition holding the records as TX_PENDING under the producer id
and epoch until the transaction's markers resolve them. Exactly does the same:
- the client (TransactionSession.add_share_acks_to_transaction) sends AddOffsetsToTxn with the
  share group's id once per group and transaction, in every transaction version: the
  transaction is then Ongoing at the coordinator even if nothing else was written yet (a
  TxnShareAcknowledge needs an Ongoing transaction), then TxnShareAcknowledge to the leader of
  each share-partition, naming the member (group, member id, member epoch);
- the broker checks the member, adds the group's `__share_group_state` partition to the
  transaction (as KIP-890 adds a Produce's partition) and writes the staged acknowledgements
  there in a transactional batch; EndTxn's COMMIT/ABORT marker in that partition resolves them:
  ACCEPT -> ACKNOWLEDGED and REJECT -> ARCHIVED on commit, AVAILABLE again (delivered again) on
  abort.
Authorization: WRITE on the TRANSACTIONAL_ID, READ on the GROUP (KIP-1310 §6).

    {"apiKey": 1289 (draft: 95), "type": "request", "listeners": ["broker"],
     "name": "TxnShareAcknowledgeRequest", "validVersions": "0", "flexibleVersions": "0+",
     "fields": [
       {"name": "TransactionalId", "type": "string", "versions": "0+", "nullableVersions": "0+"},
       {"name": "GroupId", "type": "string", "versions": "0+"},
       {"name": "ProducerId", "type": "int64", "versions": "0+"},
       {"name": "ProducerEpoch", "type": "int16", "versions": "0+"},
       {"name": "MemberId", "type": "string", "versions": "0+"},
       {"name": "MemberEpoch", "type": "int32", "versions": "0+"},
       {"name": "Topics", "type": "[]TxnShareAcknowledgeTopic", "versions": "0+", "fields": [
         {"name": "TopicId", "type": "uuid", "versions": "0+"},
         {"name": "Partitions", "type": "[]TxnShareAcknowledgePartition", "versions": "0+",
          "fields": [
           {"name": "PartitionIndex", "type": "int32", "versions": "0+"},
           {"name": "AcknowledgementBatches", "type": "[]TxnShareAcknowledgeBatch",
            "versions": "0+", "fields": [
             {"name": "FirstOffset", "type": "int64", "versions": "0+"},
             {"name": "LastOffset", "type": "int64", "versions": "0+"},
             {"name": "AcknowledgeTypes", "type": "[]int8", "versions": "0+"}]}]}]}]}
    {"apiKey": 1289, "type": "response", "name": "TxnShareAcknowledgeResponse",
     "validVersions": "0", "flexibleVersions": "0+", "fields": [
       {"name": "ThrottleTimeMs", "type": "int32", "versions": "0+"},
       {"name": "ErrorCode", "type": "int16", "versions": "0+"},
       {"name": "Responses", "type": "[]TxnShareAcknowledgeTopicResponse", "versions": "0+",
        "fields": [
         {"name": "TopicId", "type": "uuid", "versions": "0+"},
         {"name": "Partitions", "type": "[]TxnShareAcknowledgePartitionResponse",
          "versions": "0+", "fields": [
           {"name": "PartitionIndex", "type": "int32", "versions": "0+"},
           {"name": "ErrorCode", "type": "int16", "versions": "0+"},
           {"name": "ErrorMessage", "type": "string", "versions": "0+",
            "nullableVersions": "0+", "default": "null"}]}]}]}
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import GroupId, ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

API_KEY = 1289  # provisional: see above and exactly.protocol.drafts


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgeBatch:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    first_offset: i64 = field(metadata={"kafka_type": "int64"})
    """First offset of the batch (inclusive)."""
    last_offset: i64 = field(metadata={"kafka_type": "int64"})
    """Last offset of the batch (inclusive)."""
    acknowledge_types: tuple[i8, ...] = field(metadata={"kafka_type": "int8"}, default=())
    """Per-offset types (1 ACCEPT, 3 REJECT, 0 GAP); one element: the type of the whole range."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgePartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    acknowledgement_batches: tuple[TxnShareAcknowledgeBatch, ...]
    """Record ranges to acknowledge."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgeTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The unique topic ID."""
    partitions: tuple[TxnShareAcknowledgePartition, ...]
    """The partitions to acknowledge."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgeRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: TransactionalId | None = field(metadata={"kafka_type": "string"})
    """The transactional ID of the producer."""
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    """The share group ID."""
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    """The producer ID."""
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    """The producer epoch."""
    member_id: str = field(metadata={"kafka_type": "string"})
    """The share group member ID."""
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    """The share group member epoch, for fencing."""
    topics: tuple[TxnShareAcknowledgeTopic, ...]
    """The topics and partitions to acknowledge."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgePartitionResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    """The partition index."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The error code, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The error message, or null if there was no error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgeTopicResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    """The unique topic ID."""
    partitions: tuple[TxnShareAcknowledgePartitionResponse, ...]
    """The results for each partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgeResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled, or zero."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code, or 0 if there was no error."""
    responses: tuple[TxnShareAcknowledgeTopicResponse, ...]
    """The results for each topic."""
