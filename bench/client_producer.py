"""Exactly's Producer against kafka-python, aiokafka and confluent-kafka, side by side in one run.

Same broker (an EmbeddedBroker with log.flush.policy=os), same workload: keyless 100-byte records,
acks=all, idempotent, to a fresh 4-partition topic per run, timed from the first send until every
record is acknowledged. Each producer warms up first (metadata and producer id are not timed).
The pure-Python peers get the same batch size and linger as Exactly's producer (64 KiB, 5 ms;
their defaults, 16 KiB and 0 ms, are slower); confluent-kafka keeps librdkafka's defaults, which
bench/run.py found fastest. Best of `--runs` runs per producer.

    .venv/bin/python bench/client_producer.py [--count 200000] [--runs 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable

from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.client.producer import AsyncProducer, Producer
from exactly.testing import EmbeddedBroker

PARTITIONS = 4
SIZE = 100
LINGER_MS = 5
BATCH_SIZE = 65_536
_topic_ids = itertools.count()


def _new_topic(bootstrap: str, name: str) -> str:
    topic = f"bench-{name}-{next(_topic_ids)}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    return topic


def exactly_async(bootstrap: str, topic: str, count: int, payload: bytes) -> float:
    async def run() -> float:
        producer = AsyncProducer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": LINGER_MS,
                                  "batch.size": BATCH_SIZE})
        await (await producer.send(topic, b"warm-up"))
        started = time.perf_counter()
        send = producer.send
        for _ in range(count - 1):
            await send(topic, payload)
        last = await send(topic, payload)
        await producer.flush()
        elapsed = time.perf_counter() - started
        (await last)  # raises if the record failed
        await producer.close()
        return elapsed
    return asyncio.run(run())


def exactly_blocking(bootstrap: str, topic: str, count: int, payload: bytes) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": LINGER_MS,
                         "batch.size": BATCH_SIZE})
    producer.send(topic, b"warm-up").result(30)
    started = time.perf_counter()
    send = producer.send
    for _ in range(count - 1):
        send(topic, payload)
    last = send(topic, payload)
    producer.flush()
    elapsed = time.perf_counter() - started
    last.result(0)
    producer.close()
    return elapsed


def kafka_python(bootstrap: str, topic: str, count: int, payload: bytes) -> float:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             linger_ms=LINGER_MS, batch_size=BATCH_SIZE)
    producer.send(topic, b"warm-up").get(30)
    started = time.perf_counter()
    last = None
    for _ in range(count):
        last = producer.send(topic, payload)
    producer.flush()
    elapsed = time.perf_counter() - started
    assert last is not None
    last.get(0)
    producer.close()
    return elapsed


def aiokafka(bootstrap: str, topic: str, count: int, payload: bytes) -> float:
    from aiokafka import AIOKafkaProducer

    async def run() -> float:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    enable_idempotence=True, linger_ms=LINGER_MS,
                                    max_batch_size=BATCH_SIZE)
        await producer.start()
        await producer.send_and_wait(topic, b"warm-up")
        started = time.perf_counter()
        last = None
        for _ in range(count):
            last = await producer.send(topic, payload)
        await producer.flush()
        elapsed = time.perf_counter() - started
        assert last is not None
        await last
        await producer.stop()
        return elapsed
    return asyncio.run(run())


def confluent(bootstrap: str, topic: str, count: int, payload: bytes) -> float:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True})
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, b"warm-up")
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(60)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"confluent-kafka: {len(errors)} records failed: {errors[0]}")
    return elapsed


CLIENTS: dict[str, Callable[[str, str, int, bytes], float]] = {
    "exactly (asyncio)": exactly_async,
    "exactly (blocking)": exactly_blocking,
    "kafka-python": kafka_python,
    "aiokafka": aiokafka,
    "confluent-kafka": confluent,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="50k records, one run")
    args = parser.parse_args()
    count, runs = (50_000, 1) if args.quick else (args.count, args.runs)
    logging.basicConfig(level=logging.WARNING)
    payload = os.urandom(SIZE)
    rates: dict[str, float] = {}
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        for name, run in CLIENTS.items():
            best = min(run(broker.bootstrap, _new_topic(broker.bootstrap, name.split()[0]),
                           count, payload) for _ in range(runs))
            rates[name] = count / best
            print(f"  {name:<20} {rates[name]:>10,.0f} msgs/s", flush=True)
    python_peer = max(rates["kafka-python"], rates["aiokafka"])
    print(f"\n{count:,} x {SIZE}-byte records, acks=all, idempotent, {PARTITIONS} partitions, "
          f"best of {runs}; Exactly broker, log.flush.policy=os")
    print(f"{'producer':<20} {'msgs/s':>10} {'MB/s':>7} {'/ py peer':>10} {'/ confluent':>12}")
    for name, rate in rates.items():
        print(f"{name:<20} {rate:>10,.0f} {rate * SIZE / 1e6:>7.1f} "
              f"{rate / python_peer:>9.2f}x {rate / rates['confluent-kafka']:>11.2f}x")
    print(f"\n'py peer' is the faster of kafka-python and aiokafka ({python_peer:,.0f} msgs/s); "
          "target for Exactly >= 2x.")


if __name__ == "__main__":
    main()
