"""TxnHeartbeat v0, the RPC of KIP-1309 ("Improve transaction liveness checking", a draft).

A transactional client sends it to its transaction coordinator every
`transaction.heartbeat.interval.ms` while a transaction is open; a coordinator that hears nothing
from the producer for its session timeout (3 x the interval, announced with InitProducerId v7)
aborts the transaction long before `transaction.timeout.ms`. It needs WRITE on the
TRANSACTIONAL_ID, as EndTxn does.

The KIP's draft gives no schema text; this one follows EndTxn's (the request names the
transaction and the identity it holds, the response carries an error only), flexible from v0 as
every new API is. Errors: NONE, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS (markers being written),
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_PRODUCER_ID_MAPPING (unknown id), PRODUCER_FENCED
(an older epoch), INVALID_TXN_STATE (no transaction open), INVALID_REQUEST (empty id).

    {"apiKey": 1309 (provisional), "type": "request", "name": "TxnHeartbeatRequest",
     "validVersions": "0", "flexibleVersions": "0+", "fields": [
       {"name": "TransactionalId", "type": "string", "versions": "0+"},
       {"name": "ProducerId", "type": "int64", "versions": "0+"},
       {"name": "ProducerEpoch", "type": "int16", "versions": "0+"}]}
    {"apiKey": 1309, "type": "response", "name": "TxnHeartbeatResponse", "validVersions": "0",
     "flexibleVersions": "0+", "fields": [
       {"name": "ThrottleTimeMs", "type": "int32", "versions": "0+"},
       {"name": "ErrorCode", "type": "int16", "versions": "0+"}]}
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta

API_KEY = 1309  # provisional: see exactly.protocol.drafts


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnHeartbeatRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    """The transactional id of the open transaction."""
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    """The producer id the client holds."""
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    """The producer epoch the client holds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnHeartbeatResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled, or zero."""
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The error code, or 0 if there was no error."""
