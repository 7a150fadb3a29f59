"""Fetch's size rules, as Kafka applies them (issue 17; KIP-74), over TCP against a real broker.

The bug this guards: a Fetch with max_bytes=1000000 and a 20 MB partition limit got a 19 MB
answer, which librdkafka rejects ("Invalid response size") and then reconnects forever. Kafka
reads each partition with min(partition_max_bytes, what is left of max_bytes); only the first
batch of the answer may exceed the limits. The table tests below send exact Fetch requests over
batches of known sizes; the client tests show unchanged confluent-kafka, kafka-python and aiokafka
consumers reading everything through small fetch limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.static.primitive import i8, i16, i32, i64

from exactly.protocol.apis import SUPPORTED, ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch, iter_batches
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic

CAP = 1 << 20  # the broker's fetch.max.bytes in this module
CUTS = "cuts"  # 3 partitions of small (S) and big (B) batches
CAPPED = "capped"  # 1 partition of 30 batches of ~100 kB, 3 MB in all
TXN = "txn"  # 1 partition of committed, aborted and open transactions
LATEST = SUPPORTED[ApiKey.FETCH][1]
NOW_MS = 1_700_000_000_000


def _batch(payload_size: int) -> bytes:
    return build_batch([Record(None, b"x" * payload_size)], timestamp=NOW_MS)


S = len(_batch(1000))  # a small batch's size on the wire and in the log
B = len(_batch(50_000))
# What each partition of CUTS holds, in batch sizes.
LAYOUT = {0: [S] * 5, 1: [B, S, S, S], 2: [S] * 5}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(settings={"log.flush.policy": "os", "fetch.max.bytes": CAP}) as b:
        create_topic(b.bootstrap, CUTS, partitions=3)
        create_topic(b.bootstrap, CAPPED)
        create_topic(b.bootstrap, TXN)
        with contextlib.closing(RawConnection(b.host, b.port)) as conn:
            for partition, sizes in LAYOUT.items():
                for size in sizes:
                    _produce(conn, CUTS, partition, _batch(1000 if size == S else 50_000))
            for _ in range(30):
                _produce(conn, CAPPED, 0, _batch(100_000))
        yield b


@pytest.fixture(scope="module")
def conn(broker: EmbeddedBroker) -> Iterator[RawConnection]:
    """The module's connection for its requests, one at a time."""
    with contextlib.closing(RawConnection(broker.host, broker.port)) as c:
        yield c


def _produce(conn: RawConnection, topic: str, partition: int, batch: bytes) -> None:
    m = __import__("kio.schema.produce.v9.request", fromlist=["_"])
    request = build(request_class(ApiKey.PRODUCE, 9), transactional_id=None, acks=i16(-1),
                    timeout=datetime.timedelta(seconds=10),
                    topic_data=(m.TopicProduceData(name=topic, partition_data=(
                        m.PartitionProduceData(index=i32(partition), records=batch),)),))
    conn.send_bytes(conn.frame(ApiKey.PRODUCE, 9, request))
    answer = conn.read_response(ApiKey.PRODUCE, 9)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def _topic_id(conn: RawConnection, topic: str) -> uuid.UUID:
    m = __import__("kio.schema.metadata.v12.request", fromlist=["_"])
    answer = conn.request(ApiKey.METADATA, 12, topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
                          allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return answer.topics[0].topic_id


def fetch(conn: RawConnection, topic: str, wanted: list[tuple[int, int]], *, max_bytes: int,
          partition_max_bytes: int, version: int = LATEST, min_bytes: int = 0,
          max_wait_ms: int = 0, read_committed: bool = False) -> dict[int, Any]:
    """One Fetch of `wanted` [(partition, offset)] in that order; the answer's partitions by index."""
    m = __import__(request_class(ApiKey.FETCH, version).__module__, fromlist=["_"])
    topic_id = _topic_id(conn, topic) if version >= 13 else None
    request = build(
        request_class(ApiKey.FETCH, version), replica_id=i32(-1),
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes), isolation_level=i8(1 if read_committed else 0),
        session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
        topics=(build(m.FetchTopic, topic=topic, topic_id=topic_id, partitions=tuple(
            build(m.FetchPartition, partition=i32(p), fetch_offset=i64(offset), log_start_offset=i64(-1),
                  partition_max_bytes=i32(partition_max_bytes))
            for p, offset in wanted)),))
    conn.send_bytes(conn.frame(ApiKey.FETCH, version, request))
    answer = conn.read_response(ApiKey.FETCH, version)
    assert getattr(answer, "error_code", ErrorCode.none) == ErrorCode.none  # v7+
    return {p.partition_index: p for p in answer.responses[0].partitions}


def batch_sizes(records: bytes | None) -> list[int]:
    return [h.size for h in iter_batches(records or b"")]


def check_limits(answer: dict[int, Any], max_bytes: int, partition_max_bytes: int) -> None:
    """Kafka's rules on any answer: only the answer's first batch may go past a limit."""
    sizes = [batch_sizes(p.records) for p in answer.values()]
    first_index = next((i for i, s in enumerate(sizes) if s), None)
    if first_index is None:
        return
    first = sizes[first_index][0]
    assert sum(map(sum, sizes)) - first <= max(0, max_bytes - first)
    for i, s in enumerate(sizes):
        assert sum(s) <= partition_max_bytes or (i == first_index and len(s) == 1)


# (partitions and offsets in request order, max_bytes, partition_max_bytes, batches expected per
# partition in that order)
CASES = {
    "no limit reached": ([(0, 0), (1, 0), (2, 0)], 10**6, 10**6, [5, 4, 5]),
    "max_bytes cuts the first partition": ([(0, 0), (1, 0), (2, 0)], 2 * S + 10, 10**6, [2, 0, 0]),
    "max_bytes smaller than the first batch": ([(0, 0), (1, 0), (2, 0)], 1, 10**6, [1, 0, 0]),
    "first batch bigger than both limits": ([(1, 0), (0, 0), (2, 0)], 1, 1, [1, 0, 0]),
    "partition limit of one small batch": ([(0, 0), (1, 0), (2, 0)], 10**6, S, [1, 0, 1]),
    "partition limit then what is left": ([(0, 0), (1, 0), (2, 0)], 3 * S + 20, 2 * S + 10, [2, 0, 1]),
    "first partition with data is the exception": ([(0, 5), (1, 0), (2, 0)], 1, 1, [0, 1, 0]),
    "later partition gets only what is left": ([(1, 1), (0, 0), (2, 0)], 4 * S, 10**6, [3, 1, 0]),
    # p1's big batch does not fit what is left: p1 returns nothing (no fragment of it, as Kafka
    # returns none when a partition's first batch is incomplete) and p2 gets what is left.
    "a batch larger than what is left": ([(0, 3), (1, 0), (2, 0)], 2 * S + B - 1, 10**6, [2, 0, 5]),
}


@pytest.mark.parametrize("version", sorted({SUPPORTED[ApiKey.FETCH][0], 12, LATEST}))
@pytest.mark.parametrize("case", CASES)
def test_cuts(conn, case, version):
    wanted, max_bytes, partition_max_bytes, expected = CASES[case]
    answer = fetch(conn, CUTS, wanted, max_bytes=max_bytes, partition_max_bytes=partition_max_bytes,
                   version=version)
    got = [batch_sizes(answer[p].records) for p, _ in wanted]
    # Whole batches, in the log's order from the fetch offset.
    assert got == [LAYOUT[p][offset:offset + n] for (p, offset), n in zip(wanted, expected, strict=True)]
    check_limits(answer, max_bytes, partition_max_bytes)


def test_every_version_keeps_max_bytes_for_the_first_partition(conn):
    # The request: a total far below the partition limit.
    for version in range(SUPPORTED[ApiKey.FETCH][0], LATEST + 1):
        answer = fetch(conn, CAPPED, [(0, 0)], max_bytes=250_000, partition_max_bytes=20 << 20,
                       version=version)
        assert len(batch_sizes(answer[0].records)) == 2, version


def test_broker_fetch_max_bytes_caps_the_request(conn):
    answer = fetch(conn, CAPPED, [(0, 0)], max_bytes=50 << 20, partition_max_bytes=50 << 20)
    sizes = batch_sizes(answer[0].records)
    assert sum(sizes) <= CAP < sum(sizes) + sizes[0]  # as many whole batches as fit the cap


def test_min_bytes_is_capped_by_max_bytes(conn):
    # min_bytes the answer could never carry: Kafka caps it by max_bytes and answers at once.
    started = time.monotonic()
    answer = fetch(conn, CUTS, [(2, 0)], max_bytes=2 * S, partition_max_bytes=10**6,
                   min_bytes=10 * S, max_wait_ms=20_000)
    assert time.monotonic() - started < 10  # not the 20 s max_wait
    assert batch_sizes(answer[2].records) == [S, S]


def test_partition_cut_by_its_limit_counts_as_full(conn):
    # Partition 0 has 5 S of data; its limit lets one batch out. Kafka's long poll counts the
    # partition as min(available, partition_max_bytes), which reaches min_bytes: no wait.
    started = time.monotonic()
    answer = fetch(conn, CUTS, [(0, 0)], max_bytes=10**6, partition_max_bytes=S + 10,
                   min_bytes=S + 10, max_wait_ms=20_000)
    assert time.monotonic() - started < 10
    assert batch_sizes(answer[0].records) == [S]


def test_long_poll_waits_when_everything_is_returned(conn):
    # All of partition 2 is 5 S; min_bytes asks for more, so the answer waits for max_wait.
    started = time.monotonic()
    answer = fetch(conn, CUTS, [(2, 0)], max_bytes=10**6, partition_max_bytes=10**6,
                   min_bytes=6 * S, max_wait_ms=300)
    assert time.monotonic() - started >= 0.25
    assert batch_sizes(answer[2].records) == [S] * 5


def test_long_poll_answers_when_an_append_reaches_min_bytes(broker, conn):
    create_topic(broker.bootstrap, "poll")
    _produce(conn, "poll", 0, _batch(1000))
    answers: list[dict[int, Any]] = []
    other = RawConnection(broker.host, broker.port)
    reader = threading.Thread(target=lambda: answers.append(fetch(
        other, "poll", [(0, 0)], max_bytes=10**6, partition_max_bytes=10**6, min_bytes=2 * S,
        max_wait_ms=20_000)))
    started = time.monotonic()
    reader.start()
    time.sleep(0.3)  # let the Fetch start waiting: one batch is below min_bytes
    assert not answers
    _produce(conn, "poll", 0, _batch(1000))
    reader.join(15)
    other.close()
    assert answers and time.monotonic() - started < 10
    assert batch_sizes(answers[0][0].records) == [S, S]


def test_a_failed_read_answers_at_once(conn):
    started = time.monotonic()
    answer = fetch(conn, CUTS, [(0, 999), (2, 0)], max_bytes=10**6, partition_max_bytes=10**6,
                   min_bytes=10**6, max_wait_ms=20_000)
    assert time.monotonic() - started < 10
    assert answer[0].error_code == ErrorCode.offset_out_of_range
    assert batch_sizes(answer[2].records) == [S] * 5


def test_out_of_range_reported_with_nothing_left(conn):
    # The budget is spent on partition 0; partition 1's bad offset is still reported, as Kafka does.
    answer = fetch(conn, CUTS, [(0, 0), (1, 999)], max_bytes=1, partition_max_bytes=10**6)
    assert batch_sizes(answer[0].records) == [S]
    assert answer[1].error_code == ErrorCode.offset_out_of_range


# -- read_committed: the aborted-transactions list covers exactly what is returned --------------


def _wait_stable(conn: RawConnection, end: int) -> None:
    """Until the markers of the transactions ended so far are written: LSO at `end`."""
    deadline = time.monotonic() + 10
    while fetch(conn, TXN, [(0, 0)], max_bytes=1, partition_max_bytes=1,
                read_committed=True)[0].last_stable_offset != end:
        assert time.monotonic() < deadline, "the transaction markers were not written"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def txn_log(broker, conn):
    """TXN's offsets: 0 plain, 1-2 aborted (t1) + marker 3, 4 plain, 5 committed (t2) + marker 6,
    7 aborted (t1) + marker 8, 9 open (t2). Returns (t1's producer id, batch size by offset)."""
    from confluent_kafka import Producer

    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    t1, t2 = (Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name,
                        "linger.ms": 0}) for name in ("fetch-limits-t1", "fetch-limits-t2"))
    for p in (t1, t2):
        p.init_transactions(10)

    def write(producer: Any, *values: bytes) -> None:
        for value in values:  # one batch each
            producer.produce(TXN, value=value, partition=0)
            assert producer.flush(10) == 0

    write(plain, b"n0")
    t1.begin_transaction()
    write(t1, b"a1", b"a2")
    t1.abort_transaction(10)
    _wait_stable(conn, 4)
    write(plain, b"n1")
    t2.begin_transaction()
    write(t2, b"c1")
    t2.commit_transaction(10)
    _wait_stable(conn, 7)
    t1.begin_transaction()
    write(t1, b"a3")
    t1.abort_transaction(10)
    _wait_stable(conn, 9)
    t2.begin_transaction()
    write(t2, b"o1")  # left open: the LSO stays at 9
    everything = fetch(conn, TXN, [(0, 0)], max_bytes=10**6, partition_max_bytes=10**6)[0]
    batches = list(iter_batches(everything.records))
    assert [h.base_offset for h in batches] == list(range(10))
    yield batches[1].producer_id, {h.base_offset: h.size for h in batches}
    t2.abort_transaction(10)


def test_read_committed_lists_only_aborted_transactions_in_the_returned_range(conn, txn_log):
    t1, size = txn_log
    up_to = {end: sum(size[o] for o in range(end)) for end in range(10)}  # bytes of offsets < end
    # (fetch offset, max_bytes, offsets returned, aborted transactions listed)
    cases = [
        (0, 1, range(1), []),  # the first aborted transaction starts after the cut
        (0, up_to[2], range(2), [(t1, 1)]),  # cut inside it: a1 in, a2 and its marker out
        (0, up_to[4] - 1, range(3), [(t1, 1)]),  # its data in, its marker out
        (4, 10**6, range(4, 9), [(t1, 7)]),  # from after the first one: the second only
        (0, 10**6, range(9), [(t1, 1), (t1, 7)]),  # stops at the LSO (9): not the open one
        (9, 10**6, range(0), []),  # at the LSO: nothing yet
    ]
    for offset, max_bytes, offsets, aborted in cases:
        answer = fetch(conn, TXN, [(0, offset)], max_bytes=max_bytes, partition_max_bytes=10**6,
                       read_committed=True)[0]
        assert [h.base_offset for h in iter_batches(answer.records)] == list(offsets), offset
        assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == aborted
        assert (answer.high_watermark, answer.last_stable_offset) == (10, 9)


# -- unchanged clients through small fetch limits ----------------------------------------------

BIG = "big-batches"
BIG_VALUE = 1_500_000
PER_PARTITION = [b"s" * 10_000] * 10 + [b"B" * BIG_VALUE] + [b"s" * 10_000] * 10 + [b"B" * BIG_VALUE]


@pytest.fixture(scope="module")
def big_topic(broker) -> str:
    """3 partitions, each with two batches of 1.5 MB among batches of small records."""
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, BIG, partitions=3, config={"max.message.bytes": "4000000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 4_000_000,
                         "linger.ms": 5, "acks": "all"})
    failed: list[Any] = []
    for partition in range(3):
        for value in PER_PARTITION:
            producer.produce(BIG, value=value, partition=partition,
                             on_delivery=lambda err, _msg: failed.append(err) if err else None)
            producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed
    return BIG


def _expected() -> dict[int, list[int]]:
    return {p: [len(v) for v in PER_PARTITION] for p in range(3)}


@pytest.mark.parametrize("partition_limit", [20 << 20, 300_000])
def test_confluent_reads_batches_larger_than_its_fetch_limits_without_reconnecting(
        broker, big_topic, partition_limit):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    stats: list[str] = []
    errors: list[Any] = []
    # The librdkafka settings: an answer over receive.message.max.bytes is rejected and the
    # connection dropped. 2 MB leaves room for the one batch of 1.5 MB that KIP-74 lets through.
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
        "fetch.max.bytes": 1_000_000, "max.partition.fetch.bytes": partition_limit,
        "receive.message.max.bytes": 2_000_000, "statistics.interval.ms": 100,
        "stats_cb": stats.append, "error_cb": errors.append})
    consumer.assign([TopicPartition(big_topic, p, OFFSET_BEGINNING) for p in range(3)])
    got: dict[int, list[int]] = {p: [] for p in range(3)}
    want = _expected()
    deadline = time.monotonic() + 30
    try:
        while got != want and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got[msg.partition()].append(len(msg.value()))
        seen = len(stats)
        while len(stats) == seen and time.monotonic() < deadline:  # statistics after the last read
            consumer.poll(0.1)
    finally:
        consumer.close()
    assert got == want
    assert not errors, errors
    brokers = json.loads(stats[-1])["brokers"].values()
    assert [(b["connects"], b["disconnects"]) for b in brokers if b["nodeid"] >= 0] == [(1, 0)]


def test_kafka_python_reads_batches_larger_than_its_fetch_limits(broker, big_topic):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_bytes=1_000_000,
                             max_partition_fetch_bytes=300_000, enable_auto_commit=False)
    partitions = [KTopicPartition(big_topic, p) for p in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    got: dict[int, list[int]] = {p: [] for p in range(3)}
    want = _expected()
    deadline = time.monotonic() + 30
    try:
        while got != want and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition] += [len(r.value) for r in records]
    finally:
        consumer.close()
    assert got == want


def test_aiokafka_reads_batches_larger_than_its_fetch_limits(broker, big_topic):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def read() -> dict[int, list[int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_bytes=1_000_000,
                                    max_partition_fetch_bytes=300_000, enable_auto_commit=False)
        await consumer.start()
        partitions = [ATopicPartition(big_topic, p) for p in range(3)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        got: dict[int, list[int]] = {p: [] for p in range(3)}
        deadline = time.monotonic() + 30
        try:
            while got != _expected() and time.monotonic() < deadline:
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    got[tp.partition] += [len(r.value) for r in records]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(read()) == _expected()
