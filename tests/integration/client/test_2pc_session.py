"""TransactionSession's KIP-939 side against a broker without 2PC: librdkafka's mock cluster
(InitProducerId below v6) and Exactly's broker with transaction.two.phase.commit.enable off
(the module broker of tests/integration/client)."""

from __future__ import annotations

from typing import Any

import pytest

from exactly.client import (
    KafkaError,
    PreparedTxnState,
    Producer,
    State,
    TransactionSession,
    UnsupportedVersionError,
)
from exactly.protocol.errors import ErrorCode
from tests.support import create_topic
from tests.system.interop.test_transactions import read_all


def config(bootstrap: str, txn_id: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra}


def test_kip_939_needs_init_producer_id_v6(mock_bootstrap: str) -> None:
    s = TransactionSession(config(mock_bootstrap, "kip939"))
    with pytest.raises(UnsupportedVersionError, match="does not support KIP-939 two-phase commit"):
        s.initialize(keep_prepared_txn=True)
    assert s.state is State.UNINITIALIZED
    s.close()
    two_pc = TransactionSession(config(mock_bootstrap, "kip939-2pc",
                                       **{"transaction.two.phase.commit.enable": True}))
    with pytest.raises(UnsupportedVersionError, match="InitProducerId v6"):
        two_pc.initialize()
    two_pc.close()


def test_enable_2pc_is_refused_when_the_broker_setting_is_off(exactly_broker: Any) -> None:
    s = TransactionSession(config(exactly_broker.bootstrap, "no-2pc",
                                  **{"transaction.two.phase.commit.enable": True}))
    with pytest.raises(KafkaError) as raised:
        s.initialize()
    assert raised.value.code == ErrorCode.transactional_id_authorization_failed
    s.close()


def test_keep_prepared_txn_without_2pc_takes_over_the_transaction(exactly_broker: Any) -> None:
    """The seed's rejected alternative: KeepPreparedTxn is allowed without 2PC (Flink)."""
    bootstrap = exactly_broker.bootstrap
    topic = "keep-without-2pc"
    create_topic(bootstrap, topic, partitions=1)
    a = TransactionSession(config(bootstrap, "keeper"))
    a.initialize()
    a.begin_transaction()
    with Producer({"bootstrap.servers": bootstrap}, session=a) as producer:
        producer.send(topic, "kept", partition=0)
        stored = a.prepare_transaction()
    a.close()  # as if it crashed: the transaction stays open
    b = TransactionSession(config(bootstrap, "keeper"))
    b.initialize(keep_prepared_txn=True)
    assert b.state is State.PREPARED
    assert b.prepared_state == stored
    assert (b.producer_id, b.producer_epoch) == (stored.producer_id, stored.epoch + 1)
    b.complete_transaction(PreparedTxnState(str(stored)))
    b.close()
    assert read_all(bootstrap, topic) == ["kept"]


def test_keep_prepared_txn_with_nothing_open(exactly_broker: Any) -> None:
    s = TransactionSession(config(exactly_broker.bootstrap, "keep-idle"))
    s.initialize(keep_prepared_txn=True)
    assert s.state is State.READY and s.prepared_state == PreparedTxnState()
    s.complete_transaction(PreparedTxnState("5:5"))  # nothing prepared: does nothing
    assert s.state is State.READY
    s.close()
