"""Share-group requests with bad input over the wire: each gets Kafka's error code, the
connection stays usable, and nothing is delivered that should not be. And the order a closing
consumer's requests can take: the leave before its last acknowledgements, answered as Kafka 4.4
answers it."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer
from kio.schema.share_acknowledge.v1.request import (
    AcknowledgementBatch as AckBatchV1,
)
from kio.schema.share_acknowledge.v1.request import (
    AcknowledgePartition,
    AcknowledgeTopic,
)
from kio.schema.share_fetch.v1.request import (
    AcknowledgementBatch,
    FetchPartition,
    FetchTopic,
)

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import LOCK_MS, SETTINGS, create_topic, produce, set_group_configs
from tests.helpers.share.raw import connect, start_offset, topic_id

pytestmark = pytest.mark.broker_settings(SETTINGS)

WAIT = datetime.timedelta(milliseconds=50)


def heartbeat(conn, group: str, member: str, epoch: int, topics=("q",)):  # type: ignore[no-untyped-def]
    return conn.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, group_id=group, member_id=member,
                        member_epoch=epoch, rack_id=None, subscribed_topic_names=topics)


def share_fetch(conn, group: str, member: str, epoch: int, topic_id, *, acks=(),  # type: ignore[no-untyped-def]
                max_records: int = 100):
    parts = (FetchPartition(partition_index=0, acknowledgement_batches=tuple(acks)),)
    return conn.request(ApiKey.SHARE_FETCH, 1, group_id=group, member_id=member,
                        share_session_epoch=epoch, max_wait=WAIT, min_bytes=1,
                        max_bytes=1 << 20, max_records=max_records, batch_size=100,
                        topics=(FetchTopic(topic_id=topic_id, partitions=parts),),
                        forgotten_topics_data=())


def share_acknowledge(conn, group: str, member: str, epoch: int, topic_id,  # type: ignore[no-untyped-def]
                      acks=()):
    topics = (AcknowledgeTopic(topic_id=topic_id, partitions=(AcknowledgePartition(
        partition_index=0, acknowledgement_batches=tuple(acks)),)),) if acks else ()
    return conn.request(ApiKey.SHARE_ACKNOWLEDGE, 1, group_id=group, member_id=member,
                        share_session_epoch=epoch, topics=topics)


def acquired(r) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """(offset, delivery count) of each record a ShareFetch answer acquired."""
    return [(o, a.delivery_count) for t in r.responses for p in t.partitions
            for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)]


def test_share_fetch_bad_sessions_members_and_topics(broker: EmbeddedBroker) -> None:
    create_topic(broker, "q")
    set_group_configs(broker, "g", share_auto_offset_reset="earliest")
    produce(broker, "q", [b"a", b"b"])
    tid = topic_id(broker, "q")
    conn = connect(broker)
    try:
        hb = heartbeat(conn, "g", "m1", 0)
        assert hb.error_code is ErrorCode.none and hb.member_epoch > 0
        assert [tuple(tp.partitions) for tp in hb.assignment.topic_partitions] == [(0,)]
        # a session that was never opened
        r = share_fetch(conn, "g", "m1", 3, tid)
        assert r.error_code is ErrorCode.share_session_not_found
        # acknowledgements cannot open a session
        r = share_fetch(conn, "g", "m1", 0, tid, acks=[AcknowledgementBatch(
            first_offset=0, last_offset=0, acknowledge_types=(1,))])
        assert r.error_code is ErrorCode.invalid_request
        r = share_fetch(conn, "g", "m1", 0, tid)
        assert r.error_code is ErrorCode.none
        (part,) = r.responses[0].partitions
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in part.acquired_records] == [(0, 1, 1)]
        # a wrong epoch (1 is next) changes nothing and delivers nothing
        r = share_fetch(conn, "g", "m1", 5, tid)
        assert r.error_code is ErrorCode.invalid_share_session_epoch and r.responses == ()
        # acknowledging what another member holds, or what nobody holds
        r = share_fetch(conn, "g", "m1", 1, tid, acks=[AcknowledgementBatch(
            first_offset=7, last_offset=7, acknowledge_types=(1,))], max_records=0)
        assert r.error_code is ErrorCode.none
        assert r.responses[0].partitions[0].acknowledge_error_code == ErrorCode.invalid_record_state
        # a bad acknowledge type
        r = share_fetch(conn, "g", "m1", 2, tid, acks=[AcknowledgementBatch(
            first_offset=0, last_offset=0, acknowledge_types=(9,))], max_records=0)
        assert r.responses[0].partitions[0].acknowledge_error_code == ErrorCode.invalid_request
        # a topic id that does not exist
        r = share_fetch(conn, "g", "m1", 3, uuid.uuid4())
        assert r.error_code is ErrorCode.none
        assert r.responses[0].partitions[0].error_code is ErrorCode.unknown_topic_id
        # the good acknowledgement still works on the same connection and session
        r = share_fetch(conn, "g", "m1", 4, tid, acks=[AcknowledgementBatch(
            first_offset=0, last_offset=1, acknowledge_types=(1,))], max_records=0)
        assert r.responses[0].partitions[0].acknowledge_error_code == ErrorCode.none
        # ShareAcknowledge: the session must be open and the epoch right
        ack = (AcknowledgeTopic(topic_id=tid, partitions=(AcknowledgePartition(
            partition_index=0, acknowledgement_batches=(AckBatchV1(
                first_offset=0, last_offset=0, acknowledge_types=(1,)),)),)),)
        r = conn.request(ApiKey.SHARE_ACKNOWLEDGE, 1, group_id="g", member_id="m1",
                         share_session_epoch=9, topics=ack)
        assert r.error_code is ErrorCode.invalid_share_session_epoch
        r = conn.request(ApiKey.SHARE_ACKNOWLEDGE, 1, group_id="g", member_id="m1",
                         share_session_epoch=5, topics=ack)
        # acknowledged already (below the start offset): ignored, as Kafka 4.4 answers it
        assert r.error_code is ErrorCode.none
        assert r.responses[0].partitions[0].error_code is ErrorCode.none
        # an empty member id, an unknown member's heartbeat, a stale epoch
        r = share_fetch(conn, "g", "", 0, tid)
        assert r.error_code is ErrorCode.invalid_request
        assert heartbeat(conn, "g", "ghost", 4).error_code is ErrorCode.unknown_member_id
        assert heartbeat(conn, "g", "m1", hb.member_epoch + 7).error_code is \
            ErrorCode.fenced_member_epoch
        assert heartbeat(conn, "g", "m2", 0, topics=()).error_code is ErrorCode.invalid_request
        # closing the session
        r = share_fetch(conn, "g", "m1", -1, tid, max_records=0)
        assert r.error_code is ErrorCode.none
        assert share_fetch(conn, "g", "m1", 6, tid).error_code is \
            ErrorCode.share_session_not_found
        # not a member: as Kafka 4.4, a share session needs the share group, not membership
        assert share_fetch(conn, "g", "stranger", 0, tid).error_code is ErrorCode.none
        assert share_fetch(conn, "nogroup", "stranger", 0, tid).error_code is \
            ErrorCode.unknown_member_id
    finally:
        conn.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_share_and_consumer_groups_share_the_group_id_namespace(broker: EmbeddedBroker,
                                                                protocol: str) -> None:
    create_topic(broker, "q")
    extra = {"session.timeout.ms": 6000} if protocol == "classic" else {}
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic",
                        "group.protocol": protocol, **extra})
    classic.subscribe(["q"])
    try:
        deadline = time.monotonic() + 20
        while not classic.assignment():  # joined
            assert time.monotonic() < deadline, "the classic consumer never joined"
            classic.poll(0.1)
        conn = connect(broker)
        try:
            r = heartbeat(conn, "classic", "m", 0)
            assert r.error_code is ErrorCode.group_id_not_found
            assert "not a share group" in (r.error_message or "")
            r = conn.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, group_ids=("classic", "nope"),
                             include_authorized_operations=False)
            assert [(g.group_id, g.error_code) for g in r.groups] == [
                ("classic", ErrorCode.group_id_not_found), ("nope", ErrorCode.group_id_not_found)]
            assert "not a share group" in (r.groups[0].error_message or "")
        finally:
            conn.close()
    finally:
        classic.close()


def test_share_session_limit(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory(settings={**SETTINGS, "group.share.max.share.sessions": 1})
    create_topic(b, "q")
    tid = topic_id(b, "q")
    conn = connect(b)
    try:
        for member in ("m1", "m2"):
            assert heartbeat(conn, "g", member, 0).error_code is ErrorCode.none
        assert share_fetch(conn, "g", "m1", 0, tid).error_code is ErrorCode.none
        assert share_fetch(conn, "g", "m2", 0, tid).error_code is \
            ErrorCode.share_session_limit_reached
    finally:
        conn.close()


def test_share_fetch_waits_for_min_bytes_and_keeps_what_it_acquired(
        broker: EmbeddedBroker) -> None:
    import threading

    from exactly.protocol.records import iter_batches
    create_topic(broker, "q")
    set_group_configs(broker, "g", share_auto_offset_reset="earliest")
    produce(broker, "q", [b"first"])
    tid = topic_id(broker, "q")
    conn = connect(broker)
    try:
        assert heartbeat(conn, "g", "m1", 0).error_code is ErrorCode.none
        later = threading.Timer(0.3, produce, (broker, "q", [b"second"]))
        later.start()
        parts = (FetchPartition(partition_index=0, acknowledgement_batches=()),)
        started = time.monotonic()
        r = conn.request(ApiKey.SHARE_FETCH, 1, group_id="g", member_id="m1",
                         share_session_epoch=0, max_wait=datetime.timedelta(seconds=5),
                         min_bytes=100_000, max_bytes=1 << 20, max_records=100, batch_size=100,
                         topics=(FetchTopic(topic_id=tid, partitions=parts),),
                         forgotten_topics_data=())
        later.join()
        waited = time.monotonic() - started
    finally:
        conn.close()
    (part,) = r.responses[0].partitions
    # min_bytes was never reached: the answer came before the first record's lock could expire
    # (after half the lock duration, not max_wait), with both records acquired once
    assert LOCK_MS / 2000 - 0.1 <= waited < 3
    assert [(a.first_offset, a.last_offset) for a in part.acquired_records] == [(0, 0), (1, 1)]
    assert [b.base_offset for b in iter_batches(part.records)] == [0, 1]


def test_acknowledgements_sent_after_the_leave_still_apply(broker: EmbeddedBroker) -> None:
    """librdkafka 2.16's close() sends its last ShareAcknowledge (to the partition leader) and
    the leave (ShareGroupHeartbeat epoch -1, to the coordinator, on another connection) at
    once, and the leave is often answered first. As Kafka 4.4 answers that sequence: leaving
    does not close the member's share session, so the ShareAcknowledge applies (the REJECTed
    record is not delivered again); what the member holds unacknowledged is not released by
    the leave either, but when its share session closes (epoch -1). Exactly used to close the
    session at the leave: the ShareAcknowledge got SHARE_SESSION_NOT_FOUND and all three
    records came back."""
    create_topic(broker, "lv")
    # locks that outlast the test: what comes back is released, not expired
    set_group_configs(broker, "lv", share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="60000")
    produce(broker, "lv", [b"a", b"b", b"c"])
    tid = topic_id(broker, "lv")
    fetching, coordinator, other = connect(broker), connect(broker), connect(broker)
    try:
        assert heartbeat(coordinator, "lv", "m1", 0, topics=("lv",)).error_code is ErrorCode.none
        r = share_fetch(fetching, "lv", "m1", 0, tid)
        assert r.error_code is ErrorCode.none and acquired(r) == [(0, 1), (1, 1), (2, 1)]
        left = heartbeat(coordinator, "lv", "m1", -1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        # the leave released nothing: another member finds nothing to acquire
        assert heartbeat(other, "lv", "m2", 0, topics=("lv",)).error_code is ErrorCode.none
        r = share_fetch(other, "lv", "m2", 0, tid)
        assert r.error_code is ErrorCode.none and acquired(r) == []
        # the last acknowledgements, after the leave, on the session's connection
        r = share_acknowledge(fetching, "lv", "m1", 1, tid, acks=[
            AckBatchV1(first_offset=0, last_offset=0, acknowledge_types=(3,)),   # REJECT
            AckBatchV1(first_offset=1, last_offset=1, acknowledge_types=(1,))])  # ACCEPT
        assert r.error_code is ErrorCode.none
        assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none]
        assert start_offset(broker, "lv", "lv", 0) == 2
        # closing the session releases the record left unacknowledged, and only that one
        assert share_acknowledge(fetching, "lv", "m1", -1, tid).error_code is ErrorCode.none
        r = share_fetch(other, "lv", "m2", 1, tid)
        assert r.error_code is ErrorCode.none and acquired(r) == [(2, 2)]
    finally:
        for conn in (fetching, coordinator, other):
            conn.close()
