"""Exactly's Kafka client: TransactionSession, Producer, Consumer, ShareConsumer, Admin.

These are the blocking classes; `exactly.client.aio` has the asyncio ones under the same names.
The client depends on `exactly.protocol` only, so it works against any Kafka-protocol broker.
Its plain values (records, group metadata, the admin client's results) are in
`exactly.client.types`, the bottom of the client.
"""

from exactly.client.admin import Admin
from exactly.client.config import ClientConfig
from exactly.client.consumer import Consumer
from exactly.client.errors import (
    AdminError,
    AuthenticationError,
    ConfigError,
    IllegalStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    TransactionFatalError,
    UnsupportedVersionError,
)
from exactly.client.prepared import PreparedTxnState
from exactly.client.producer import Producer
from exactly.client.session import TransactionSession
from exactly.client.session_state import State
from exactly.client.share_consumer import ShareConsumer
from exactly.client.types import (
    AcknowledgeType,
    ConfigEntry,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupMetadata,
    ConsumerRecord,
    ListOffsetsResultInfo,
    MemberDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    RecordMetadata,
    ShareAcknowledgements,
    ShareGroupMetadata,
    ShareRecord,
)

__all__ = [
    "AcknowledgeType",
    "Admin",
    "AdminError",
    "AuthenticationError",
    "ClientConfig",
    "ConfigEntry",
    "ConfigError",
    "Consumer",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "IllegalStateError",
    "KafkaError",
    "ListOffsetsResultInfo",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PreparedTxnState",
    "Producer",
    "ProducerFencedError",
    "RecordMetadata",
    "ShareAcknowledgements",
    "ShareConsumer",
    "ShareGroupMetadata",
    "ShareRecord",
    "State",
    "TransactionAbortableError",
    "TransactionError",
    "TransactionFatalError",
    "TransactionSession",
    "UnsupportedVersionError",
]
