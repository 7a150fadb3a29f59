"""Transactions with real clients: committed transactions are visible in full to read_committed
consumers, aborted ones never; a second producer with the same transactional id fences the
first; a transaction left open by a killed producer is aborted after its timeout and the LSO
moves on (DESIGN invariants 3, 6 and 7)."""

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from exactly.testing import EmbeddedBroker
from tests.support import create_topic

SETTINGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
    "log.flush.policy": "os",
}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(settings=SETTINGS) as b:
        yield b


def read_all(bootstrap, topic, isolation="read_committed", idle=2.0, timeout=60, at_least=1):
    """Every record a fresh consumer gets: it polls until it has `at_least` records and then
    nothing more came for `idle` seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while (len(got) < at_least or time.monotonic() - last < idle) and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
            last = time.monotonic()
    consumer.close()
    return got


def test_confluent_commit_visible_abort_never(broker):
    topic = "tx-confluent"
    create_topic(broker.bootstrap, topic, partitions=3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "conf-1"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(300):
        p.produce(topic, key=str(i % 7), value=f"commit-a-{i}")
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(200):
        p.produce(topic, key=str(i % 7), value=f"abort-{i}")
    p.flush(30)  # the aborted records really are in the log
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(100):
        p.produce(topic, key=str(i % 7), value=f"commit-b-{i}")
    p.commit_transaction(30)

    committed = [f"commit-a-{i}" for i in range(300)] + [f"commit-b-{i}" for i in range(100)]
    assert sorted(read_all(broker.bootstrap, topic)) == sorted(committed)
    # read_uncommitted sees the aborted records too (and never a marker).
    everything = read_all(broker.bootstrap, topic, "read_uncommitted")
    assert sorted(everything) == sorted(committed + [f"abort-{i}" for i in range(200)])


def test_confluent_second_instance_fences_the_first(broker):
    topic = "tx-fence"
    create_topic(broker.bootstrap, topic)
    first = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "fence-me"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, value=b"zombie")
    first.flush(30)

    second = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "fence-me"})
    second.init_transactions(30)  # aborts the first instance's open transaction
    second.begin_transaction()
    second.produce(topic, value=b"alive")
    second.commit_transaction(30)

    with pytest.raises(KafkaException) as info:
        first.commit_transaction(30)
    error = info.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                              KafkaError.INVALID_PRODUCER_EPOCH), error
    assert read_all(broker.bootstrap, topic) == ["alive"]


# A producer that opens a transaction, writes 50 records and is then killed, in each client.
KILLED_PRODUCER = {
    "confluent-kafka": """
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "doomed-ck",
                      "transaction.timeout.ms": 2000})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(50):
            p.produce(topic, value=f"open-{i}".encode())
        p.flush(30)
    """,
    "kafka-python": """
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="doomed-kp",
                          transaction_timeout_ms=2000)
        p.init_transactions()
        p.begin_transaction()
        for i in range(50):
            p.send(topic, value=f"open-{i}".encode())
        p.flush()
    """,
    "aiokafka": """
        import asyncio
        from aiokafka import AIOKafkaProducer
        async def main():
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="doomed-aio",
                                 transaction_timeout_ms=2000)
            await p.start()
            await p.begin_transaction()
            for i in range(50):
                await p.send(topic, f"open-{i}".encode())
            await p.flush()
        asyncio.run(main())
    """,
}


@pytest.mark.parametrize("client", sorted(KILLED_PRODUCER))
def test_killed_producer_transaction_times_out_and_lso_moves_on(broker, client):
    topic = f"tx-timeout-{client}"
    create_topic(broker.bootstrap, topic)
    script = "import sys, time\nbootstrap, topic = sys.argv[1], sys.argv[2]\n" + \
        textwrap.dedent(KILLED_PRODUCER[client]) + "\nprint('written', flush=True)\ntime.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", script, broker.bootstrap, topic],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "written"
    proc.kill()
    proc.wait()

    later = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"survivor-{client}"})
    later.init_transactions(30)
    later.begin_transaction()
    later.produce(topic, value=b"after")
    later.commit_transaction(30)

    # The open transaction holds the LSO until the coordinator aborts it (timeout 2 s).
    assert read_all(broker.bootstrap, topic, idle=3.0) == ["after"]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso-check",
                         "isolation.level": "read_committed"})
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.close()
    assert high == 50 + 1 + 1 + 1  # 50 aborted records, their abort marker, 1 record, its marker


def test_kafka_python_transactions(broker):
    from kafka import KafkaConsumer, KafkaProducer

    topic = "tx-kafka-python"
    create_topic(broker.bootstrap, topic, partitions=2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-1")
    p.init_transactions()
    p.begin_transaction()
    for i in range(50):
        p.send(topic, value=f"keep-{i}".encode())
    p.commit_transaction()
    p.begin_transaction()
    for i in range(50):
        p.send(topic, value=f"drop-{i}".encode())
    p.flush()
    p.abort_transaction()
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                      auto_offset_reset="earliest", consumer_timeout_ms=5000)
    values = sorted(m.value.decode() for m in c)
    c.close()
    assert values == sorted(f"keep-{i}" for i in range(50))


def test_aiokafka_transactions(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = "tx-aiokafka"
    create_topic(broker.bootstrap, topic, partitions=2)

    async def scenario():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-1")
        await p.start()
        try:
            async with p.transaction():
                for i in range(50):
                    await p.send(topic, f"keep-{i}".encode())
            await p.begin_transaction()
            for i in range(50):
                await p.send(topic, f"drop-{i}".encode())
            await p.flush()
            await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             isolation_level="read_committed")
        await c.start()
        got = []
        try:
            batches = await c.getmany(timeout_ms=3000)
            while batches:
                got.extend(m.value.decode() for msgs in batches.values() for m in msgs)
                batches = await c.getmany(timeout_ms=1000)
        finally:
            await c.stop()
        return got

    assert sorted(asyncio.run(scenario())) == sorted(f"keep-{i}" for i in range(50))


def test_kafka_python_second_instance_fences_the_first(broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KPError

    topic = "tx-fence-kp"
    create_topic(broker.bootstrap, topic)
    first = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-fence")
    first.init_transactions()
    first.begin_transaction()
    first.send(topic, b"zombie")
    first.flush()
    second = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-fence")
    second.init_transactions()
    second.begin_transaction()
    second.send(topic, b"alive")
    second.commit_transaction()
    second.close()
    with pytest.raises(KPError):
        first.commit_transaction()
    first.close(timeout=5)
    assert read_all(broker.bootstrap, topic) == ["alive"]


def test_aiokafka_second_instance_fences_the_first(broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AIOError

    topic = "tx-fence-aio"
    create_topic(broker.bootstrap, topic)

    async def scenario():
        first = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-fence")
        await first.start()
        await first.begin_transaction()
        await first.send_and_wait(topic, b"zombie")
        second = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-fence")
        await second.start()
        async with second.transaction():
            await second.send_and_wait(topic, b"alive")
        await second.stop()
        try:
            with pytest.raises(AIOError):
                await first.commit_transaction()
        finally:
            await first.stop()

    asyncio.run(scenario())
    assert read_all(broker.bootstrap, topic) == ["alive"]
