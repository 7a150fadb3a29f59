"""Shared pieces of the share-group tests: broker settings with short timeouts, a topic with
data, group configs, share consumers, and raw requests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from exactly.testing import EmbeddedBroker

LOCK_MS = 1500
# Short timeouts (the broker's min bounds lowered to allow them) so that lock expiries and
# session timeouts happen within a test.
SETTINGS = {
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": LOCK_MS,
    "group.share.min.session.timeout.ms": 2000,
    "group.share.session.timeout.ms": 6000,
    "group.share.min.heartbeat.interval.ms": 200,
    "group.share.heartbeat.interval.ms": 300,
    # Fewer partitions of the internal topics: quicker starts and stops of the test brokers.
    "share.coordinator.state.topic.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}


def create_topic(b: EmbeddedBroker, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(10)


def produce(b: EmbeddedBroker, topic: str, values: Iterable[bytes], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(10) == 0


def set_group_configs(b: EmbeddedBroker, group: str, **configs: str) -> None:
    """Group configs by Kafka's names, with '.' written '_' (share_auto_offset_reset=...)."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(10)


def share_consumer(b: EmbeddedBroker, group: str, topic: str, **conf: Any) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                       **{k.replace("_", "."): v for k, v in conf.items()}})
    c.subscribe([topic])
    return c


def poll_until(consumers: list[ShareConsumer], done: Callable[[], bool], timeout: float = 30.0,
               on_message: Callable[[int, Any], None] | None = None) -> None:
    """Poll the consumers in turn (one thread: each instance is used by one thread only) until
    `done()`; `on_message(index of the consumer, message)` for each record."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for records"
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                if on_message is not None:
                    on_message(i, m)


def close_all(consumers: Iterable[ShareConsumer]) -> None:
    for c in consumers:
        c.close()
