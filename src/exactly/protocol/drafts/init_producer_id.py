"""InitProducerId v7, the version KIP-1309 ("Improve transaction liveness checking", a draft)
adds: "version 7 (or version 6 if this KIP is adopted before KIP-939's APIs are marked as
stable)". KIP-939's v6 is what kio has, so the heartbeat version is 7.

v7 is v6 plus TransactionSessionTimeoutMs: how long the coordinator may go without hearing from
the producer (a TxnHeartbeat, or AddPartitionsToTxn/AddOffsetsToTxn) while a transaction is open
before it aborts it; -1 (the default, and what older versions mean) for no session. The KIP's
client announces its `transaction.heartbeat.interval.ms` and the coordinator aborts after 3 x
that; here the client sends the product, its `transaction.session.timeout.ms` (seed 004), so the
coordinator keeps a plain deadline and a client may pick another ratio. The response is v6's.
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta

API_KEY = 22


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: TransactionalId | None = field(metadata={"kafka_type": "string"})
    """The transactional id, or null if the producer is not transactional."""
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The time in ms to wait before aborting idle transactions sent by this producer."""
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"}, default=ProducerId(-1))
    """The producer id, to disambiguate requests if a transactional id is reused."""
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"}, default=i16(-1))
    """The producer's current epoch, checked against the coordinator's."""
    enable2_pc: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """True if the client wants two-phase commit (KIP-939)."""
    keep_prepared_txn: bool = field(metadata={"kafka_type": "bool"}, default=False)
    """True if the client wants to keep the ongoing transaction instead of aborting it."""
    transaction_session_timeout_ms: i32 = field(metadata={"kafka_type": "int32"},
                                                default=i32(-1))
    """KIP-1309: abort an open transaction when nothing was heard from the producer for this
    long (ms); -1: no session, only the transaction timeout applies."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InitProducerIdResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(7)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled, or zero."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The error code, or 0 if there was no error."""
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"}, default=ProducerId(-1))
    """The current producer id."""
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    """The current epoch associated with the producer id."""
    ongoing_txn_producer_id: ProducerId = field(metadata={"kafka_type": "int64"},
                                                default=ProducerId(-1))
    """The kept transaction's producer id (KeepPreparedTxn), -1 if none."""
    ongoing_txn_producer_epoch: i16 = field(metadata={"kafka_type": "int16"}, default=i16(-1))
    """The kept transaction's producer epoch (KeepPreparedTxn), -1 if none."""
