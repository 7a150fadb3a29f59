"""A session whose transactional id expired on the coordinator (transactional.id.expiration.ms)
gets INVALID_PRODUCER_ID_MAPPING when it adds to its next transaction.

Under transaction version 1 that is abortable (KIP-360: abort, and go on with a new epoch). Under
version 2 it is fatal (KAFKA-18019, after KIP-890): the id may meanwhile belong to another
session that processed the same input, and a session that aborted and went on could process it
again. Kafka's Java producer decides the same way.
"""

from __future__ import annotations

import time

import pytest

from exactly.client.errors import TransactionAbortableError, TransactionFatalError
from exactly.client.session import State, TransactionSession
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.integration.client.test_session import config
from tests.support import create_topic

EXPIRING = {"log.flush.policy": "os", "transactional.id.expiration.ms": "1000",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.mark.parametrize(("version", "error", "state"), [
    ("2", TransactionFatalError, State.FATAL_ERROR),
    ("0", TransactionAbortableError, State.ABORTABLE_ERROR),
])
def test_an_expired_transactional_id_is_fatal_under_version_2_only(version, error, state):
    with EmbeddedBroker(settings={**EXPIRING, "transaction.version": version}) as b:
        create_topic(b.bootstrap, "expiring", partitions=1)
        s = TransactionSession(config(b.bootstrap, "expiring-id"))
        try:
            s.initialize()
            assert s.uses_transaction_v2 is (version == "2")
            time.sleep(2.5)  # idle past the expiration; the coordinator forgets the id
            s.begin_transaction()
            with pytest.raises(error) as raised:
                s.send_offsets_to_transaction({("expiring", 0): 1}, "expiring-group")
            assert raised.value.code == ErrorCode.invalid_producer_id_mapping
            assert s.state is state
        finally:
            s.close()
