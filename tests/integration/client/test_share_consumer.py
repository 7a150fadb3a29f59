"""Exactly's own ShareConsumer (KIP-932) against the broker over TCP: members sharing one
partition, implicit and explicit acknowledgement, release (redelivered, delivery count 2),
reject (archived), a closed member's records going to another member; close() against a broker
that does not answer (SIGSTOP) ends within its timeout and leaves nothing running."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.client import (
    AcknowledgeType,
    IllegalStateError,
    Producer,
    ShareConsumer,
    ShareRecord,
)
from exactly.client.aio import ShareConsumer as AsyncShareConsumer
from exactly.client.share_consumer import ack_batches
from exactly.testing import EmbeddedBroker, make_test_certificates
from tests.helpers.share.helpers import SETTINGS, create_topic, set_group_configs
from tests.helpers.share.raw import describe_share_group


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings=SETTINGS) as b:
        yield b


def _queue(b: EmbeddedBroker, topic: str, group: str, count: int) -> None:
    """A topic with `count` records (values = offsets), each a batch of its own (a share fetch
    acquires whole batches, KIP-932 as Kafka 4.2+ does it), and a share group reading from the
    start."""
    create_topic(b, topic)
    set_group_configs(b, group, share_auto_offset_reset="earliest")
    with Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0}) as p:
        for i in range(count):
            p.send(topic, value=b"%d" % i, partition=0)
            p.flush()


def _consumer(b: EmbeddedBroker, group: str, topic: str, **conf: object) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                       "fetch.max.wait.ms": 200,
                       **{k.replace("_", "."): v for k, v in conf.items()}})
    c.subscribe([topic])
    return c


def _poll_until(c: ShareConsumer, count: int, timeout: float = 20) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {len(got)} of {count} records"
        got += c.poll(200)
    return got


def test_ack_batches_make_ranges_with_one_or_per_offset_types() -> None:
    A, R = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE
    assert ack_batches({3: A, 1: A, 2: A, 7: R}) == [(1, 3, (1,)), (7, 7, (2,))]
    assert ack_batches({5: A, 6: R, 7: A}) == [(5, 7, (1, 2, 1))]
    assert ack_batches({}) == []


def test_two_members_share_a_partition_each_record_accepted_once(broker: EmbeddedBroker) -> None:
    _queue(broker, "sc-shared", "sc-g1", 60)
    consumers = [_consumer(broker, "sc-g1", "sc-shared", max_poll_records=7) for _ in range(2)]
    delivered: Counter[int] = Counter()
    by_member: Counter[int] = Counter()
    try:
        deadline = time.monotonic() + 30
        while len(delivered) < 60:
            assert time.monotonic() < deadline, f"{len(delivered)} of 60 delivered"
            for i, c in enumerate(consumers):
                for r in c.poll(200):  # implicit mode: the next poll accepts these
                    assert r.value == b"%d" % r.offset and r.delivery_count == 1
                    delivered[r.offset] += 1
                    by_member[i] += 1
        for c in consumers:
            assert all(e is None for e in c.commit_sync().values())
        metas = [c.group_metadata() for c in consumers]
        assert all(c.poll(300) == [] for c in consumers)  # everything was accepted
    finally:
        for c in consumers:
            c.close()
    assert set(delivered) == set(range(60)) and set(delivered.values()) == {1}
    assert len(by_member) == 2, by_member  # both took part
    assert metas[0].member_id != metas[1].member_id
    assert all(m.group_id == "sc-g1" and m.member_epoch > 0 for m in metas)


def test_release_redelivers_with_count_2_and_reject_archives(broker: EmbeddedBroker) -> None:
    _queue(broker, "sc-explicit", "sc-g2", 4)
    c = _consumer(broker, "sc-g2", "sc-explicit", share_acknowledgement_mode="explicit")
    try:
        first = sorted(_poll_until(c, 4), key=lambda r: r.offset)
        assert [r.offset for r in first] == [0, 1, 2, 3]
        c.acknowledge(first[0], AcknowledgeType.RELEASE)
        c.acknowledge(first[1], AcknowledgeType.REJECT)
        with pytest.raises(IllegalStateError, match="not acknowledged"):
            c.poll(100)  # explicit mode: 2 and 3 still need a type
        c.acknowledge(first[2])
        c.acknowledge(first[3], AcknowledgeType.ACCEPT)
        with pytest.raises(IllegalStateError, match="acknowledge each record once"):
            c.acknowledge(first[3])
        assert c.commit_sync() == {("sc-explicit", 0): None}
        again = _poll_until(c, 1)
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 2)]  # released: again
        c.acknowledge(again[0])
        assert c.poll(500) == []  # 1 rejected (archived), 2 and 3 accepted, 0 accepted now
    finally:
        c.close()


def test_implicit_mode_refuses_acknowledge(broker: EmbeddedBroker) -> None:
    _queue(broker, "sc-implicit", "sc-g3", 1)
    c = _consumer(broker, "sc-g3", "sc-implicit")
    try:
        (record,) = _poll_until(c, 1)
        with pytest.raises(IllegalStateError, match="explicit"):
            c.acknowledge(record)
    finally:
        c.close()


def test_closed_member_releases_its_records_to_the_other(broker: EmbeddedBroker) -> None:
    _queue(broker, "sc-close", "sc-g4", 5)
    first = _consumer(broker, "sc-g4", "sc-close", share_acknowledgement_mode="explicit")
    second = _consumer(broker, "sc-g4", "sc-close")
    try:
        held = _poll_until(first, 5)  # acquired by `first`, locked for the lock duration
        assert second.poll(300) == []
        first.close()  # unacknowledged records go back: the share session closes
        taken = sorted(_poll_until(second, 5), key=lambda r: r.offset)
        assert [r.offset for r in taken] == sorted(r.offset for r in held)
        assert {r.delivery_count for r in taken} == {2}
    finally:
        first.close()
        second.close()


def test_member_rejoins_and_opens_a_new_session_after_a_broker_crash() -> None:
    """kill -9 of the broker: members and share sessions are gone after the restart (as in
    Kafka), so the consumer's heartbeat gets UNKNOWN_MEMBER_ID and rejoins, its ShareFetch gets
    SHARE_SESSION_NOT_FOUND (or UNKNOWN_MEMBER_ID) and opens a new session; the records it held
    unacknowledged come again, and accepted ones do not."""
    with EmbeddedBroker(settings=SETTINGS) as b:
        _queue(b, "sc-crash", "sc-g5", 6)
        c = _consumer(b, "sc-g5", "sc-crash", share_acknowledgement_mode="explicit")
        try:
            first = sorted(_poll_until(c, 6), key=lambda r: r.offset)
            for r in first[:3]:
                c.acknowledge(r)
            c.commit_sync()  # 0-2 accepted, durable before the answer
            for r in first[3:]:
                c.acknowledge(r, AcknowledgeType.RELEASE)  # never sent: the broker dies first
            b.restart()
            again = sorted(_poll_until(c, 3, timeout=30), key=lambda r: r.offset)
            assert [r.offset for r in again] == [3, 4, 5]
            for r in again:
                c.acknowledge(r)
            assert c.commit_sync() == {("sc-crash", 0): None}
            assert c.poll(300) == []
        finally:
            c.close()


def test_close_cut_short_by_its_timeout_stops_heartbeating() -> None:
    """close(timeout=2) with the broker stopped (SIGSTOP) cuts its goodbyes short; the
    membership task still ends with it. It used to outlive close(): it heartbeat on, reconnecting,
    for a consumer that was closed, which stayed a member of its group for good."""
    with EmbeddedBroker(settings=SETTINGS) as b:
        _queue(b, "sc-bound", "sc-g6", 3)
        pid = b.process.pid  # type: ignore[union-attr]

        async def main() -> tuple[list[str], list[str]]:
            c = AsyncShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": "sc-g6",
                                    "fetch.max.wait.ms": 200})
            c.subscribe(["sc-bound"])
            got: list[ShareRecord] = []
            deadline = time.monotonic() + 20
            while len(got) < 3:
                assert time.monotonic() < deadline, f"got {len(got)} of 3 records"
                got += await c.poll(200)
            os.kill(pid, signal.SIGSTOP)
            try:
                await c.close(timeout=2)  # the acknowledgements get no answer
            finally:
                os.kill(pid, signal.SIGCONT)
            running = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            # The member, not heartbeating any more, times out (share.session.timeout.ms 6 s).
            members: list[str] = ["?"]
            deadline = time.monotonic() + 20
            while members and time.monotonic() < deadline:
                group = await asyncio.to_thread(describe_share_group, b, "sc-g6")
                members = [m.member_id for m in group.members]
                await asyncio.sleep(0.5)
            return running, members

        running, members = asyncio.run(main())
    # (tasks still running after close(), members of the group a while after)
    assert (running, members) == ([], [])


def test_close_is_bounded_over_tls(tmp_path: Path) -> None:
    """Over TLS, closing a connection waits for the peer's close_notify (30 s, asyncio's and
    uvloop's ssl_shutdown_timeout): with the broker stopped, close(timeout=2) took 2 s of
    goodbyes and then 30 s for each connection, one after the other (62 s)."""
    certs = make_test_certificates(tmp_path / "certs")
    settings = {**SETTINGS, "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                "ssl.keystore.location": str(certs.server),
                "ssl.truststore.location": str(certs.ca)}
    with EmbeddedBroker(settings=settings) as b:
        _queue(b, "sc-tls", "sc-g7", 3)
        c = ShareConsumer({"bootstrap.servers": b.address("SSL"), "security.protocol": "SSL",
                           "ssl.ca.location": str(certs.ca), "group.id": "sc-g7",
                           "fetch.max.wait.ms": 200})
        c.subscribe(["sc-tls"])
        assert len(_poll_until(c, 3)) == 3  # held: close() would acknowledge them
        pid = b.process.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            c.close(timeout=2)
            took = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
    assert took < 10, f"close(timeout=2) took {took:.1f} s"
