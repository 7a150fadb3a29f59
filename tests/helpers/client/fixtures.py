"""Brokers for the client tests: Exactly's own, and librdkafka's mock cluster (a second,
independent implementation of the protocol, used for wire compatibility only)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from exactly.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def exactly_broker():
    with EmbeddedBroker(settings={"log.flush.policy": "os",
                                  "transaction.two.phase.commit.enable": "false",
                                  "group.initial.rebalance.delay.ms": "0",
                                  "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}) as b:
        yield b


@pytest.fixture(scope="module")
def mock_bootstrap():
    """bootstrap.servers of a librdkafka mock cluster, alive for the module."""
    holder = Producer({"test.mock.num.brokers": 1})
    (meta,) = holder.list_topics(timeout=10).brokers.values()
    yield f"{meta.host}:{meta.port}"
    del holder
