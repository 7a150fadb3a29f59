"""A share session ends with the connection that opened it (KAFKA-19015), as Kafka 4.4 does:
what the member acquired on the session's partitions is released at once (delivery count kept:
the next delivery is the second), whether or not the member left the group first, and the
session is gone (SHARE_SESSION_NOT_FOUND on any other connection). A session re-opened
(ShareSessionEpoch 0) on another connection belongs to that one: the first connection's close
leaves it alone (KAFKA-19950). Records a transaction holds (KIP-1289's TX_PENDING) stay held
until the transaction ends. Raw requests, locks (60 s) that outlast each test: what comes back
was released, not expired."""

from __future__ import annotations

import datetime
import socket
import struct
import time
import uuid
from typing import Any

import pytest
from kio.schema.share_acknowledge.v1.request import (
    AcknowledgementBatch,
    AcknowledgePartition,
    AcknowledgeTopic,
)
from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic

from exactly.client import Producer, TransactionSession
from exactly.protocol.apis import ApiKey, request_class
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS, create_topic, produce, set_group_configs
from tests.helpers.share.raw import connect, start_offset, topic_id
from tests.integration.share.test_txn_acks_tcp import _txn_share_ack
from tests.rawclient import RawConnection

pytestmark = pytest.mark.broker_settings(SETTINGS)

ACCEPT = 1


def heartbeat(conn: RawConnection, group: str, member: str, epoch: int) -> Any:
    return conn.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=member,
                        member_epoch=epoch, rack_id=None,
                        subscribed_topic_names=(group,) if epoch == 0 else None)


def fetch_request(group: str, member: str, epoch: int, topic_id: uuid.UUID, *,
                  max_wait_ms: int = 50, min_bytes: int = 1) -> dict[str, Any]:
    return {"group_id": group, "member_id": member, "share_session_epoch": epoch,
            "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
            "topics": (FetchTopic(topic_id=topic_id, partitions=(
                FetchPartition(partition_index=0, acknowledgement_batches=()),)),),
            "forgotten_topics_data": ()}


def share_fetch(conn: RawConnection, group: str, member: str, epoch: int,
                topic_id: uuid.UUID, **kw: Any) -> Any:
    return conn.request(ApiKey.SHARE_FETCH, 1, **fetch_request(group, member, epoch, topic_id,
                                                               **kw))


def share_acknowledge(conn: RawConnection, group: str, member: str, epoch: int,
                      topic_id: uuid.UUID, accept: tuple[int, int] | None = None) -> Any:
    topics = () if accept is None else (AcknowledgeTopic(topic_id=topic_id, partitions=(
        AcknowledgePartition(partition_index=0, acknowledgement_batches=(AcknowledgementBatch(
            first_offset=accept[0], last_offset=accept[1], acknowledge_types=(ACCEPT,)),)),)),)
    return conn.request(ApiKey.SHARE_ACKNOWLEDGE, 1, group_id=group, member_id=member,
                        share_session_epoch=epoch, topics=topics)


def acquired(r: Any) -> list[tuple[int, int]]:
    """(offset, delivery count) of each record a ShareFetch answer acquired."""
    assert r.error_code is ErrorCode.none, r
    return [(o, a.delivery_count) for t in r.responses for p in t.partitions
            for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)]


class Member:
    """A share-group member with its share session on one connection."""

    def __init__(self, b: EmbeddedBroker, group: str, topic_id: uuid.UUID) -> None:
        self.b, self.group, self.topic_id = b, group, topic_id
        self.id = str(uuid.uuid4())
        self.conn = connect(b)
        self.epoch = 0  # the share session's next epoch
        joined = heartbeat(self.conn, group, self.id, 0)
        assert joined.error_code is ErrorCode.none
        self.member_epoch = joined.member_epoch

    def fetch(self, **kw: Any) -> list[tuple[int, int]]:
        got = acquired(share_fetch(self.conn, self.group, self.id, self.epoch, self.topic_id,
                                   **kw))
        self.epoch += 1
        return got

    def fetch_until(self, want: int, seconds: float = 5.0) -> list[tuple[int, int]]:
        """Fetch until `want` records are acquired (all of them: a test's records are few)."""
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + seconds
        while len(got) < want and time.monotonic() < deadline:
            got += self.fetch(max_wait_ms=200)
        return got

    def close(self) -> None:
        self.conn.close()


def queue(b: EmbeddedBroker, name: str, count: int = 3) -> uuid.UUID:
    """Topic and share group `name`: `count` records, delivered from the start, locked 60 s."""
    create_topic(b, name)
    set_group_configs(b, name, share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="60000")
    produce(b, name, [b"%d" % i for i in range(count)])
    return topic_id(b, name)


@pytest.mark.parametrize("left_first", [False, True], ids=["member", "left"])
def test_closing_the_connection_closes_the_session_and_releases(broker: EmbeddedBroker,
                                                                left_first: bool) -> None:
    name = f"cc-{int(left_first)}"
    tid = queue(broker, name)
    m, other, ack = Member(broker, name, tid), Member(broker, name, tid), connect(broker)
    try:
        assert m.fetch_until(3) == [(0, 1), (1, 1), (2, 1)]
        if left_first:  # leaving does not close the session: its records stay held
            assert heartbeat(ack, name, m.id, -1).error_code is ErrorCode.none
            assert other.fetch(max_wait_ms=300) == []
        m.close()
        # at once, not at the lock's expiry (60 s): delivered a second time
        assert other.fetch_until(3) == [(0, 2), (1, 2), (2, 2)]
        r = share_acknowledge(ack, name, m.id, 1, tid, accept=(0, 0))
        assert (r.error_code, r.responses) == (ErrorCode.share_session_not_found, ())
        r = share_fetch(ack, name, m.id, -1, tid)
        assert r.error_code is ErrorCode.share_session_not_found
    finally:
        for c in (m, other):
            c.close()
        ack.close()


def test_a_session_reopened_on_another_connection_belongs_to_it(broker: EmbeddedBroker) -> None:
    """KAFKA-19950: the session re-opened (epoch 0) on connection Y is not closed by the close
    of X, which opened it first; Y's close closes it."""
    tid = queue(broker, "ro")
    m, other = Member(broker, "ro", tid), Member(broker, "ro", tid)
    y = connect(broker)
    try:
        assert m.fetch_until(3) == [(0, 1), (1, 1), (2, 1)]
        first = m.conn
        m.conn, m.epoch = y, 0
        assert m.fetch() == []  # re-opened on Y: the member still holds all three
        first.close()
        assert other.fetch(max_wait_ms=500) == []  # nothing released
        r = share_acknowledge(y, "ro", m.id, m.epoch, tid, accept=(0, 0))
        assert r.error_code is ErrorCode.none
        assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none]
        y.close()
        assert other.fetch_until(2) == [(1, 2), (2, 2)]
    finally:
        for c in (m, other):
            c.close()


def test_a_session_continued_on_another_connection_ends_with_the_first(
        broker: EmbeddedBroker) -> None:
    """Only a re-open (epoch 0) moves the session: later ShareFetch/ShareAcknowledge requests
    on another connection do not, as Kafka 4.4."""
    tid = queue(broker, "co")
    m, other = Member(broker, "co", tid), Member(broker, "co", tid)
    y = connect(broker)
    try:
        assert m.fetch_until(3) == [(0, 1), (1, 1), (2, 1)]
        first = m.conn
        m.conn = y
        assert m.fetch() == []
        first.close()
        assert other.fetch_until(3) == [(0, 2), (1, 2), (2, 2)]
        assert share_acknowledge(y, "co", m.id, m.epoch, tid).error_code is \
            ErrorCode.share_session_not_found
    finally:
        for c in (m, other):
            c.close()


@pytest.mark.broker_settings({**SETTINGS, "group.share.max.share.sessions": 1})
def test_a_vanished_member_does_not_keep_its_session_slot(broker: EmbeddedBroker) -> None:
    """A member that left and then died without closing its session (killed after the leave)
    no longer counts toward group.share.max.share.sessions once its connection is gone."""
    tid = queue(broker, "vs")
    m = Member(broker, "vs", tid)
    try:
        assert m.fetch_until(3) == [(0, 1), (1, 1), (2, 1)]
        assert heartbeat(m.conn, "vs", m.id, -1).error_code is ErrorCode.none
    finally:
        m.close()
    other = Member(broker, "vs", tid)
    try:
        deadline = time.monotonic() + 5
        while True:  # the broker sees the close a moment later
            r = share_fetch(other.conn, "vs", other.id, 0, tid)
            if r.error_code is not ErrorCode.share_session_limit_reached or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert acquired(r) == [(0, 2), (1, 2), (2, 2)]
    finally:
        other.close()


def test_a_share_fetch_waiting_when_the_connection_dies_acquires_nothing(
        broker: EmbeddedBroker) -> None:
    """A ShareFetch waiting for records (max_wait) on a connection reset meanwhile: the session
    is closed at the reset, and the waiting fetch acquires nothing more for the member (whose
    answer could never arrive): new records go to the next member at once."""
    tid = queue(broker, "wf")
    m, other = Member(broker, "wf", tid), Member(broker, "wf", tid)
    try:
        assert m.fetch_until(3) == [(0, 1), (1, 1), (2, 1)]
        request = fetch_request("wf", m.id, m.epoch, tid, max_wait_ms=10_000, min_bytes=1)
        m.conn.send_bytes(m.conn.frame(ApiKey.SHARE_FETCH, 1,
                                       request_class(ApiKey.SHARE_FETCH, 1)(**request)))
        time.sleep(0.3)  # the fetch waits: the member holds everything there is
        # a reset (SO_LINGER 0), as a killed client's kernel may send: no answer is waited for
        m.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        m.close()
        time.sleep(0.3)
        produce(broker, "wf", [b"3", b"4"])
        assert sorted(other.fetch_until(5)) == [(0, 2), (1, 2), (2, 2), (3, 1), (4, 1)]
    finally:
        for c in (m, other):
            c.close()


def test_records_a_transaction_holds_stay_held_when_the_connection_closes(
        broker: EmbeddedBroker) -> None:
    """KIP-1289: records acknowledged inside a transaction (TX_PENDING) are the transaction's,
    not the session's: closing the connection releases only what the member still holds
    otherwise, and the commit applies the rest."""
    tid = queue(broker, "tx")
    create_topic(broker, "tx-out")
    m, other = Member(broker, "tx", tid), Member(broker, "tx", tid)
    session = TransactionSession({"bootstrap.servers": broker.bootstrap,
                                  "transactional.id": "tx-worker"})
    try:
        assert m.fetch_until(3) == [(0, 1), (1, 1), (2, 1)]
        session.initialize()
        session.begin_transaction()
        with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0},
                      session=session) as p:
            p.send("tx-out", value=b"out", partition=0)
            p.flush()
        assert _txn_share_ack(broker, txn_id="tx-worker", group="tx", pid=session.producer_id,
                              epoch=session.producer_epoch, member=m.id,
                              member_epoch=m.member_epoch, topic_id=tid,
                              batches=((0, 1, (ACCEPT,)),)) == (0, 0)
        m.close()
        # only offset 2 is released; 0 and 1 are the open transaction's
        assert other.fetch_until(1) == [(2, 2)]
        assert other.fetch(max_wait_ms=300) == []
        session.commit_transaction()
        deadline = time.monotonic() + 10
        while start_offset(broker, "tx", "tx", 0) != 2:
            assert time.monotonic() < deadline, "the commit was not applied"
            time.sleep(0.1)
    finally:
        for c in (m, other):
            c.close()
        session.close()
