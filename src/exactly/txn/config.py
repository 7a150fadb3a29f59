"""The broker keys of transactions and idempotent producers, declared here as Kafka's
`TransactionLogConfig` and `TransactionStateManagerConfig` declare them; the broker's config
(exactly/server/config.py) gathers `TXN_KEYS` and builds a TxnConfig with `txn_config`.

`producer.id.expiration.*` (KIP-854) are here with the transaction keys, where Kafka's
TransactionLogConfig has them: they set how long a producer id, the identity of KIP-98's
idempotent and transactional producers, is remembered by the partitions it wrote to (the broker
passes them to the log's producer-state expiry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactly.configdef import Key, int_range, parse_bool
from exactly.txn.state import TxnConfig

TXN_KEYS: tuple[Key, ...] = (
    Key(
        "transaction.state.log.num.partitions",
        "INT",
        50,
        int_range(1),
        "Partitions of __transaction_state (fixed once the topic exists).",
    ),
    Key(
        "transaction.state.log.segment.bytes",
        "INT",
        262144,
        int_range(1),
        "segment.bytes of __transaction_state, set when the topic is created: the log cleaner "
        "compacts the segments before the active one.",
    ),
    Key(
        "transaction.max.timeout.ms",
        "INT",
        900000,
        int_range(1),
        "Largest transaction timeout a producer may ask for.",
    ),
    Key(
        "transactional.id.expiration.ms",
        "INT",
        604800000,
        int_range(1),
        "How long an idle transactional id is remembered.",
    ),
    Key(
        "producer.id.expiration.ms",
        "INT",
        86400000,
        int_range(1),
        "How long an idle idempotent producer's state is kept.",
    ),
    Key(
        "producer.id.expiration.check.interval.ms",
        "INT",
        600000,
        int_range(1),
        "How often idle producer ids are looked for.",
    ),
    Key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "INT",
        10000,
        int_range(1),
        "How often transactions past their timeout are looked for and aborted.",
    ),
    Key(
        "transaction.partition.verification.enable",
        "BOOLEAN",
        True,
        parse_bool,
        "KIP-890: check with the coordinator that a transaction is ongoing and holds the partition "
        "before writing an older client's transactional batch to it.",
    ),
    Key(
        "transaction.two.phase.commit.enable",
        "BOOLEAN",
        False,
        parse_bool,
        "KIP-939: let transactional producers take part in two-phase commit (InitProducerId with "
        "Enable2Pc: their transactions never time out). When false such a request gets "
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED.",
    ),
    Key(
        "transaction.version",
        "SHORT",
        2,
        int_range(0, 2),
        "Exactly's key for Kafka's transaction.version feature (KIP-890), finalized at this level: "
        "2 bumps the epoch on every commit/abort and adds partitions implicitly on produce for "
        "clients that support it; 0 and 1 keep the original protocol.",
    ),
)


def txn_config(values: Mapping[str, Any]) -> TxnConfig:
    """The coordinator's TxnConfig of the typed values of the keys above."""
    return TxnConfig(
        num_partitions=values["transaction.state.log.num.partitions"],
        segment_bytes=values["transaction.state.log.segment.bytes"],
        max_timeout_ms=values["transaction.max.timeout.ms"],
        transactional_id_expiration_ms=values["transactional.id.expiration.ms"],
    )
