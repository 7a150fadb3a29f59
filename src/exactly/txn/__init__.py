"""The transaction coordinator (KIP-98, KIP-890, KIP-939) as a sans-IO state machine kept in
`__transaction_state`, and producer id allocation."""

from exactly.txn.config import TxnConfig
from exactly.txn.coordinator import TransactionCoordinator, TxnStateError
from exactly.txn.producer_ids import ProducerIdManager
from exactly.txn.state import (
    EndResult,
    IllegalTransitionError,
    InitResult,
    TxnMarkers,
    TxnMetadata,
    TxnState,
)
from exactly.txn.state_manager import TransactionStateManager
from exactly.txn.store import TXN_TOPIC

__all__ = [
    "TXN_TOPIC",
    "EndResult",
    "IllegalTransitionError",
    "InitResult",
    "ProducerIdManager",
    "TransactionCoordinator",
    "TransactionStateManager",
    "TxnConfig",
    "TxnMarkers",
    "TxnMetadata",
    "TxnState",
    "TxnStateError",
]
