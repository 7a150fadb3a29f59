"""The Consumer over TCP: records written by confluent-kafka and kafka-python (every codec,
headers, null keys and values) read back exactly, from Exactly's broker and from librdkafka's
mock cluster; read_committed against read_uncommitted with a transactional producer; seek,
positions, auto.offset.reset, commits and resuming from them."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from exactly.client.consumer import (
    AsyncConsumer,
    Consumer,
    ConsumerRecord,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    TopicPartition,
)
from exactly.client.errors import IllegalStateError
from exactly.client.session import ConsumerGroupMetadata
from tests.support import CODECS, create_topic, produce_confluent


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read(bootstrap: str, partitions: list[TopicPartition], count: int, *, timeout: float = 30,
         **config: object) -> list[ConsumerRecord]:
    """Read `count` records from the beginning of `partitions` with a fresh consumer."""
    conf = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", **config}
    with Consumer(conf) as consumer:
        consumer.assign(partitions)
        return drain(consumer, count, timeout=timeout)


def drain(consumer: Consumer, count: int, *, timeout: float = 30) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(timeout_ms=200)
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


_MOCKS: set[str] = set()
MOCK_PARTITIONS = 4  # what the mock gives an auto-created topic; it answers no CreateTopics


def _bootstrap(request: pytest.FixtureRequest, which: str) -> str:
    if which == "exactly":
        return str(request.getfixturevalue("exactly_broker").bootstrap)
    bootstrap = str(request.getfixturevalue("mock_bootstrap"))
    _MOCKS.add(bootstrap)
    return bootstrap


@pytest.fixture(params=["exactly", "mock"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    return _bootstrap(request, request.param)


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    """Records i to partition i % partitions, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
    assert producer.flush(30) == 0


def _topic(bootstrap: str, prefix: str, partitions: int = 1) -> tuple[str, int]:
    """A new topic and its partition count (on the mock: auto-created, 4 partitions)."""
    topic = _name(prefix)
    if bootstrap in _MOCKS:
        Producer({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        return topic, MOCK_PARTITIONS
    create_topic(bootstrap, topic, partitions=partitions)
    return topic, partitions


# -- wire compatibility: records of other clients ------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_reads_confluent_records_with_every_codec(bootstrap, codec):
    topic, n = _topic(bootstrap, f"conf-{codec}", partitions=3)
    values = [f"value-{i}".encode() * (1 + i % 7) for i in range(2000)]
    keys = [f"key-{i % 11}".encode() for i in range(2000)]
    placed = produce_confluent(bootstrap, topic, values, keys=keys, compression=codec)
    records = read(bootstrap, [TopicPartition(topic, p) for p in range(n)], len(values))
    by_place = {(r.partition, r.offset): r for r in records}
    assert len(by_place) == len(values)
    for i, where in enumerate(placed):
        record = by_place[where]
        assert (record.topic, record.key, record.value) == (topic, keys[i], values[i])
        assert record.timestamp_type == 0 and record.timestamp > 1_600_000_000_000
    for p in range(n):
        offsets = [r.offset for r in records if r.partition == p]
        assert offsets == sorted(offsets), "records of a partition come in offset order"


def test_headers_null_key_null_value_and_timestamps(bootstrap):
    topic, _ = _topic(bootstrap, "shapes")
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value=b"v1", key=None, headers=[("h1", b"x"), ("h2", None), ("h1", b"y")],
              timestamp=1_700_000_000_123, partition=0)
    p.produce(topic, value=None, key=b"tombstone", partition=0)
    p.produce(topic, value=b"", key=b"", partition=0)
    p.produce(topic, value=b"\x00" * 70_000, key=b"k" * 300, headers=[("\u00e9t\u00e9", b"\xff")],
              partition=0)
    assert p.flush(30) == 0
    a, b, c, d = read(bootstrap, [TopicPartition(topic, 0)], 4)
    assert (a.key, a.value, a.headers, a.timestamp) == (
        None, b"v1", (("h1", b"x"), ("h2", None), ("h1", b"y")), 1_700_000_000_123)
    assert (b.key, b.value, b.headers) == (b"tombstone", None, ())
    assert (c.key, c.value) == (b"", b"")
    assert (d.key, d.value, d.headers) == (b"k" * 300, b"\x00" * 70_000, (("\u00e9t\u00e9", b"\xff"),))
    assert [r.offset for r in (a, b, c, d)] == [0, 1, 2, 3]


@pytest.mark.parametrize("codec", CODECS)
def test_reads_kafka_python_records_with_every_codec(request, codec):
    # Exactly only: kafka-python 3 cannot read the mock's ApiVersions answer and never connects.
    bootstrap = _bootstrap(request, "exactly")
    topic, n = _topic(bootstrap, f"kp-{codec}", partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                             compression_type=None if codec == "none" else codec)
    futures = [producer.send(topic, key=None if i % 4 == 0 else f"k{i}".encode(),
                             value=None if i % 4 == 2 else f"kp-{i}".encode(),
                             headers=[("n", str(i).encode())] if i % 3 == 0 else None)
               for i in range(1000)]
    producer.flush(30)
    placed = [f.get(timeout=30) for f in futures]
    producer.close()
    records = read(bootstrap, [TopicPartition(topic, p) for p in range(n)], 1000)
    by_place = {(r.partition, r.offset): r for r in records}
    for i, meta in enumerate(placed):
        record = by_place[(meta.partition, meta.offset)]
        assert record.key == (None if i % 4 == 0 else f"k{i}".encode())
        assert record.value == (None if i % 4 == 2 else f"kp-{i}".encode())
        assert record.headers == ((("n", str(i).encode()),) if i % 3 == 0 else ())


# -- read_committed (Exactly only: the mock does not filter) ----------------------------


def _transactions(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Committed and aborted values, interleaved with non-transactional writes."""
    plain = Producer({"bootstrap.servers": bootstrap})
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": _name("txn")})
    txn.init_transactions(30)
    committed, aborted = [], []
    for round_ in range(4):
        txn.begin_transaction()
        values = [f"r{round_}-{i}".encode() for i in range(50)]
        for v in values:
            txn.produce(topic, v, partition=0)
        plain.produce(topic, f"plain-{round_}".encode(), partition=0)
        plain.flush(30)
        txn.flush(30)  # in the log before the abort: librdkafka drops what it still holds
        if round_ % 2:
            txn.abort_transaction(30)
            aborted += values
        else:
            txn.commit_transaction(30)
            committed += values
        committed.append(f"plain-{round_}".encode())
    return committed, aborted


def test_read_committed_drops_aborted_and_control_records(request):
    bootstrap = _bootstrap(request, "exactly")
    topic, _ = _topic(bootstrap, "rc")
    committed, aborted = _transactions(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    got = read(bootstrap, [tp], len(committed))
    assert sorted(r.value for r in got) == sorted(committed)
    assert not {r.value for r in got} & set(aborted)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        drain(c, len(committed))
        assert c.poll(timeout_ms=300) == []  # markers at the end are skipped, never returned
        assert c.position(tp) == 4 * 50 + 4 + 4  # data, plain records, one marker per txn

    everything = read(bootstrap, [tp], len(committed) + len(aborted),
                      **{"isolation.level": "read_uncommitted"})
    assert sorted(r.value for r in everything) == sorted(committed + aborted)
    assert all(r.value is not None for r in everything), "control records are never returned"


def test_read_committed_waits_for_an_open_transaction(request):
    bootstrap = _bootstrap(request, "exactly")
    topic, _ = _topic(bootstrap, "open")
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": _name("open")})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"pending", partition=0)
    txn.flush(30)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, 0)])
        assert c.poll(timeout_ms=1000) == []
        txn.commit_transaction(30)
        assert [r.value for r in drain(c, 1)] == [b"pending"]


# -- positions, seek, auto.offset.reset -------------------------------------------------


def test_seek_position_and_resets(bootstrap):
    topic, _ = _topic(bootstrap, "seek")
    _produce(bootstrap, topic, [f"v{i}".encode() for i in range(100)])
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "latest"}) as c:
        c.assign([tp])
        assert c.position(tp) == 100
        assert c.poll(timeout_ms=200) == []
        c.seek(tp, 42)
        assert c.position(tp) == 42
        assert [r.offset for r in c.poll(timeout_ms=5000, max_records=5)] == [42, 43, 44, 45, 46]
        assert c.position(tp) == 47
        c.seek_to_beginning([tp])
        assert c.poll(timeout_ms=5000, max_records=1)[0].offset == 0
        c.seek_to_end()
        assert c.position(tp) == 100
        c.seek(tp, 99)
        assert [r.value for r in c.poll(timeout_ms=5000)] == [b"v99"]
    assert read(bootstrap, [tp], 100, **{"max.poll.records": 7})[-1].value == b"v99"


def test_auto_offset_reset_none(bootstrap):
    topic, _ = _topic(bootstrap, "none")
    _produce(bootstrap, topic, [b"a", b"b"])
    tp = TopicPartition(topic, 0)
    conf = {"bootstrap.servers": bootstrap, "auto.offset.reset": "none"}
    with Consumer(conf) as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError, match="auto.offset.reset is none"):
            c.poll(timeout_ms=1000)
        c.seek(tp, 1000)  # past the end: the broker says out of range
        with pytest.raises(OffsetOutOfRangeError, match="out of range"):
            for _ in range(20):
                c.poll(timeout_ms=500)
        c.seek(tp, 1)
        assert [r.value for r in c.poll(timeout_ms=5000)] == [b"b"]


def test_out_of_range_resets_with_earliest(bootstrap):
    topic, _ = _topic(bootstrap, "oor")
    _produce(bootstrap, topic, [b"a", b"b"])
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        c.seek(tp, 500)
        assert [r.value for r in drain(c, 2)] == [b"a", b"b"]


# -- commits ----------------------------------------------------------------------------


def test_commit_then_a_new_consumer_resumes(bootstrap):
    topic, _ = _topic(bootstrap, "resume", partitions=2)
    _produce(bootstrap, topic, [f"v{i}".encode() for i in range(200)], partitions=2)
    group = _name("g")
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with Consumer(conf) as c:
        c.assign(tps)
        first = drain(c, 200)
        c.commit({tps[0]: 10, tps[1]: 20})
        assert c.committed(tps) == {tps[0]: 10, tps[1]: 20}
        assert isinstance(c.group_metadata(), ConsumerGroupMetadata)
        assert c.group_metadata().group_id == group
    with Consumer(conf) as c:
        c.assign(tps)
        rest = drain(c, len([r for r in first if r.offset >= (10 if r.partition == 0 else 20)]))
        assert min(r.offset for r in rest if r.partition == 0) == 10
        assert min(r.offset for r in rest if r.partition == 1) == 20
        c.commit()  # positions: everything read
        assert c.committed(tps) == {tp: c.position(tp) for tp in tps}
    with Consumer(conf) as c:
        c.assign(tps)
        assert c.poll(timeout_ms=500) == []


def test_committed_is_none_without_a_commit(bootstrap):
    topic, _ = _topic(bootstrap, "nocommit")
    with Consumer({"bootstrap.servers": bootstrap, "group.id": _name("g")}) as c:
        assert c.committed([(topic, 0)]) == {(topic, 0): None}


def test_iteration_commits_only_what_was_yielded(request):
    bootstrap = _bootstrap(request, "exactly")
    topic, _ = _topic(bootstrap, "iter")
    _produce(bootstrap, topic, [f"v{i}".encode() for i in range(50)])
    conf = {"bootstrap.servers": bootstrap, "group.id": _name("g"), "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    tp = TopicPartition(topic, 0)
    with Consumer(conf) as c:
        c.assign([tp])
        for record in c:
            if record.offset == 9:
                c.commit()
                break
        assert c.committed([tp]) == {tp: 10}


def test_config_and_state_errors(bootstrap):
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        with pytest.raises(IllegalStateError, match="group.id"):
            c.subscribe(["t"])
        with pytest.raises(IllegalStateError, match="group.id"):
            c.commit({("t", 0): 1})
    c.close()
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll(timeout_ms=0)


def test_async_consumer(request):
    bootstrap = _bootstrap(request, "exactly")
    topic, _ = _topic(bootstrap, "aio")
    _produce(bootstrap, topic, [f"v{i}".encode() for i in range(30)])

    async def main() -> list[bytes | None]:
        async with AsyncConsumer({"bootstrap.servers": bootstrap,
                                  "auto.offset.reset": "earliest"}) as c:
            c.assign([(topic, 0)])
            got = []
            async for record in c:
                got.append(record.value)
                if len(got) == 30:
                    return got
        return got

    assert asyncio.run(main()) == [f"v{i}".encode() for i in range(30)]


def test_commit_counts_only_records_handed_out(request):
    """The blocking Consumer brings several polls' worth of records at a time; a commit or a
    position covers only those poll has returned."""
    bootstrap = _bootstrap(request, "exactly")
    topic, _ = _topic(bootstrap, "handed")
    _produce(bootstrap, topic, [f"v{i}".encode() for i in range(100)])
    tp = TopicPartition(topic, 0)
    conf = {"bootstrap.servers": bootstrap, "group.id": _name("g"), "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    with Consumer(conf) as c:
        c.assign([tp])
        got: list[ConsumerRecord] = []
        while not got:
            got = c.poll(timeout_ms=5000, max_records=5)
        n = len(got)
        assert [r.offset for r in got] == list(range(n)) and n <= 5
        assert c.position(tp) == n
        c.commit()
        assert c.committed([tp]) == {tp: n}
        assert c.poll(timeout_ms=5000, max_records=3)[0].offset == n


@pytest.mark.parametrize("request_of", ["_list_offsets", "_fetch_once"])
def test_a_partition_unassigned_while_its_request_connects_is_left_out(request, caplog,
                                                                       request_of):
    """The fetcher plans a ListOffsets (to find a position) or a Fetch, then waits for the
    leader's connection; a partition unassigned in that wait (a close, a rebalance) is left out
    of the request, and one still assigned is served. Both used to fail on the missing
    partition (KeyError): ListOffsets's out of poll(), the fetch task with event=fetch_crashed."""
    bootstrap = _bootstrap(request, "exactly")
    gone, _ = _topic(bootstrap, "unassigned")
    kept, _ = _topic(bootstrap, "kept")
    _produce(bootstrap, gone, [b"g"])
    _produce(bootstrap, kept, [b"k"])

    async def main() -> list[bytes | None]:
        async with AsyncConsumer({"bootstrap.servers": bootstrap,
                                  "auto.offset.reset": "earliest"}) as c:
            cluster = c._cluster
            real = cluster.connection
            unassigned = False

            async def connection(node_id: int):  # the wait in which the assignment changes
                nonlocal unassigned
                caller = sys._getframe(1).f_code.co_name
                conn = await real(node_id)
                if caller == request_of and not unassigned:
                    unassigned = True
                    c.assign([(kept, 0)])
                return conn

            cluster.connection = connection
            c.assign([(gone, 0), (kept, 0)])
            got: list[bytes | None] = []
            async for record in c:
                got.append(record.value)
                break
            assert unassigned
            return got

    with caplog.at_level("INFO", logger="exactly.client"):
        assert asyncio.run(main()) == [b"k"]
    assert "fetch_crashed" not in caplog.text
