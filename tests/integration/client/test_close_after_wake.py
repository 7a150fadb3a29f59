"""A consumer's close() stops its group membership task and leaves the group at once, even when
the task was just woken, over TCP with Exactly's client: ShareConsumer and Consumer.

The membership tasks wait for their next heartbeat on an event that subscribe() (and a rejoin:
UNKNOWN_MEMBER_ID, a rebalance) sets. They waited with asyncio.wait_for, which on Python 3.11
returns instead of raising when the task is cancelled just as the event is set: close() cancelled
the task at that moment, the task went on heartbeating, and close() waited for it: forever with
timeout=None, else until its bound (30 s by default). Each test wakes the task with subscribe()
and closes at once with timeout=None: close() returns at once and the member is gone from the
group.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from exactly.client.admin import ConsumerGroupDescription
from exactly.client.aio import Admin, Consumer, ShareConsumer
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS, create_topic
from tests.helpers.share.raw import describe_share_group


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=SETTINGS) as b:
        create_topic(b, "wake")
        yield b


async def _close_at_once(consumer: Consumer | ShareConsumer, topic: str) -> None:
    """Once `consumer` has its partitions: wake its membership task and close right away."""
    deadline = time.monotonic() + 20
    while not consumer.assignment():  # joined; no poll, so close() goes straight to leaving
        assert time.monotonic() < deadline, "the consumer was never assigned a partition"
        await asyncio.sleep(0.05)
    consumer.subscribe([topic])  # wakes the membership task: close() cancels it in this step
    closing: asyncio.Task[None] = asyncio.create_task(consumer.close(timeout=None))
    done, _ = await asyncio.wait({closing}, timeout=20)
    assert done, "close() did not return in 20 s: the membership task outlived its cancellation"
    await closing


def test_share_consumer_close_just_after_a_wake(broker: EmbeddedBroker) -> None:
    async def main() -> None:
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "wake-share",
                                  "fetch.max.wait.ms": 200})
        consumer.subscribe(["wake"])
        await _close_at_once(consumer, "wake")

    asyncio.run(main())
    assert list(describe_share_group(broker, "wake-share").members) == []  # it left


def test_consumer_close_just_after_a_wake(broker: EmbeddedBroker) -> None:
    async def main() -> ConsumerGroupDescription:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wake-classic"})
        consumer.subscribe(["wake"])
        await _close_at_once(consumer, "wake")
        async with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            return (await admin.describe_consumer_groups(["wake-classic"]))["wake-classic"]

    group = asyncio.run(main())
    assert (group.state, group.members) == ("Empty", [])  # it left
