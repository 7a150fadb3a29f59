"""Consumer throughput: Exactly's Consumer against kafka-python, aiokafka and confluent-kafka.

The same pre-produced data (100-byte records, produced once with confluent-kafka) is read from
the beginning of every partition by each client in turn, from the same Exactly broker
(`log.flush.policy=os`), side by side in one run: every client with read_committed, 500 records
per poll (max.poll.records' default), and each record's value looked at. Each client runs
`--repeat` times, interleaved; its best run counts (less noise on 2 cores). `--variable`
spreads the record sizes (50-150 bytes): the C decoder (exactly.client._decode) reads any batch
in one loop, but without it, this client's Python decoder takes its general loop instead of its
path for batches of same-size records.

    .venv/bin/python bench/client_consumer.py [--quick] [--repeat N] [--clients a,b] [--variable]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Producer
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTP
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.testing import EmbeddedBroker

TOPIC = "bench-consume"
PARTITIONS = 4
SIZE = 100
TIMEOUT = 300.0
MAX_RECORDS = 500  # per poll, for every client: max.poll.records' default


def produce(bootstrap: str, count: int, variable: bool) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    payload = os.urandom(2 * SIZE)
    rnd = random.Random(1)
    for i in range(count):
        size = rnd.randrange(SIZE // 2, SIZE * 3 // 2 + 1) if variable else SIZE
        while True:
            try:
                producer.produce(TOPIC, payload[:size], partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("produce did not finish")


def _check(got: int, count: int, who: str) -> None:
    if got < count:
        raise RuntimeError(f"{who} read {got} of {count} records in {TIMEOUT:.0f} s")


def run_exactly(bootstrap: str, count: int) -> float:
    from exactly.client.consumer import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < count and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500, max_records=MAX_RECORDS):
                got += record.value is not None
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    _check(got, count, "exactly")
    return count / elapsed


def run_kafka_python(bootstrap: str, count: int) -> float:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
    try:
        started = time.perf_counter()
        tps = [KTP(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500, max_records=MAX_RECORDS).values():
                for record in records:
                    got += record.value is not None
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    _check(got, count, "kafka-python")
    return count / elapsed


def run_aiokafka(bootstrap: str, count: int) -> float:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def main() -> float:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", isolation_level="read_committed")
        await consumer.start()
        try:
            started = time.perf_counter()
            tps = [ATP(TOPIC, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got = 0
            deadline = time.monotonic() + TIMEOUT
            while got < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=MAX_RECORDS)
                for records in batches.values():
                    for record in records:
                        got += record.value is not None
            elapsed = time.perf_counter() - started
        finally:
            await consumer.stop()
        _check(got, count, "aiokafka")
        return count / elapsed

    return asyncio.run(main())


def run_confluent(bootstrap: str, count: int) -> float:
    consumer = ConfluentConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        started = time.perf_counter()
        consumer.assign([ConfluentTP(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < count and time.monotonic() < deadline:
            for m in consumer.consume(MAX_RECORDS, 0.5):
                got += m.error() is None and m.value() is not None
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    _check(got, count, "confluent-kafka")
    return count / elapsed


CLIENTS: dict[str, Callable[[str, int], float]] = {
    "exactly": run_exactly,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
    "confluent-kafka": run_confluent,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the records")
    parser.add_argument("--count", type=int, default=300_000, help="records to produce and read")
    parser.add_argument("--repeat", type=int, default=2, help="runs per client; the best counts")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset")
    parser.add_argument("--variable", action="store_true",
                        help=f"record sizes spread over {SIZE // 2}-{SIZE * 3 // 2} bytes")
    args = parser.parse_args()
    count = args.count // 10 if args.quick else args.count
    names = [n.strip() for n in args.clients.split(",") if n.strip()]
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        produce(broker.bootstrap, count, args.variable)
        best: dict[str, float] = {}
        for run in range(args.repeat):
            for name in names:
                rate = CLIENTS[name](broker.bootstrap, count)
                best[name] = max(best.get(name, 0.0), rate)
                print(f"run {run + 1}: {name:<16} {rate:>12,.0f} msg/s", flush=True)
    pure = max((best[n] for n in ("kafka-python", "aiokafka") if n in best), default=None)
    sizes = f"{SIZE // 2}-{SIZE * 3 // 2}" if args.variable else f"{SIZE}"
    print(f"\n{count:,} records of {sizes} bytes, {PARTITIONS} partitions, read_committed, "
          f"{MAX_RECORDS} records per poll, every value read; best of {args.repeat}")
    if "exactly" in names:
        from exactly.client import decode

        print("exactly decodes records with "
              + ("its C extension" if decode._native is not None else "Python (C extension not built)"))
    print(f"{'client':<16} {'msg/s':>12} {'MB/s':>7} {'vs best pure-Python':>20} {'vs confluent':>13}")
    for name in names:
        rate = best[name]
        vs_pure = f"{rate / pure:.2f}x" if pure else "-"
        vs_conf = f"{rate / best['confluent-kafka']:.2f}x" if "confluent-kafka" in best else "-"
        print(f"{name:<16} {rate:>12,.0f} {rate * SIZE / 1e6:>7.1f} {vs_pure:>20} {vs_conf:>13}")


if __name__ == "__main__":
    main()
