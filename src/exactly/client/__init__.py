"""Exactly's Kafka client: TransactionSession, Producer, Consumer, ShareConsumer, Admin.

These are the blocking classes; `exactly.client.aio` has the asyncio ones under the same names.
The client depends on `exactly.protocol` only, so it works against any Kafka-protocol broker.
"""

from exactly.client.admin import (
    Admin,
    AdminError,
    ConfigEntry,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListOffsetsResultInfo,
    MemberDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
)
from exactly.client.config import ClientConfig
from exactly.client.consumer import Consumer, ConsumerRecord
from exactly.client.errors import (
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
from exactly.client.producer import Producer, RecordMetadata
from exactly.client.session import ConsumerGroupMetadata, TransactionSession
from exactly.client.session_state import State
from exactly.client.share_consumer import (
    AcknowledgeType,
    ShareAcknowledgements,
    ShareConsumer,
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
