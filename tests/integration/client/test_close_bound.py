"""A consumer's close() says goodbye (last acknowledgements or commits, leaving the group) for
at most its timeout, as Kafka's close(Duration), default 30 s: with a broker that accepts
connections but never answers (SIGSTOP), close(timeout=2) returns long before its requests
would time out (20 s each here; several of them before the bound), with a warning."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator

import pytest

from exactly.client import Consumer, Producer, ShareConsumer
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS, create_topic, set_group_configs
from tests.integration.client.test_share_consumer import _poll_until

REQUEST_TIMEOUT_MS = 20_000


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=SETTINGS) as b:
        create_topic(b, "bye")
        set_group_configs(b, "bye-share", share_auto_offset_reset="earliest")
        with Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0}) as p:
            for i in range(3):
                p.send("bye", value=b"%d" % i, partition=0)
            p.flush()
        yield b


def _frozen_close(broker: EmbeddedBroker, close: object) -> float:
    pid = broker.process.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        close()  # type: ignore[operator]
        return time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)


def test_share_consumer_close_is_bounded(broker: EmbeddedBroker,
                                         caplog: pytest.LogCaptureFixture) -> None:
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "bye-share",
                              "fetch.max.wait.ms": 200, "request.timeout.ms": REQUEST_TIMEOUT_MS})
    consumer.subscribe(["bye"])
    assert len(_poll_until(consumer, 3)) == 3  # held: close() would acknowledge them
    with caplog.at_level(logging.WARNING, logger="exactly.client"):
        took = _frozen_close(broker, lambda: consumer.close(timeout=2))
    assert took < REQUEST_TIMEOUT_MS / 1000, took  # unbounded: 2 requests x 20 s
    assert any("close_timed_out" in r.getMessage() for r in caplog.records)


def test_consumer_close_is_bounded(broker: EmbeddedBroker,
                                   caplog: pytest.LogCaptureFixture) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bye-classic",
                         "auto.offset.reset": "earliest", "enable.auto.commit": True,
                         "request.timeout.ms": REQUEST_TIMEOUT_MS})
    consumer.subscribe(["bye"])
    got: list[object] = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        got += consumer.poll(200)
    assert len(got) == 3
    with caplog.at_level(logging.WARNING, logger="exactly.client"):
        took = _frozen_close(broker, lambda: consumer.close(timeout=2))
    assert took < REQUEST_TIMEOUT_MS / 1000, took  # unbounded: the commit, then LeaveGroup
    assert any("close_timed_out" in r.getMessage() for r in caplog.records)
