"""`make demo`: start an embedded broker, round-trip records with a real Kafka client, show it.

Until the Spark pipeline exists this is the main job: it shows the broker speaking the Kafka
protocol to librdkafka (confluent-kafka) with an idempotent producer, surviving a kill -9, and a
consumer group reading everything exactly once.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.testing import EmbeddedBroker

TOPIC = "demo-events"
COUNT = 1000


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def main() -> None:
    with EmbeddedBroker() as broker:
        say(f"broker started on {broker.bootstrap}, data in {broker.data_dir}")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(timeout=20)
        say(f"created topic {TOPIC!r} with 3 partitions")

        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                             "acks": "all", "compression.type": "zstd", "linger.ms": 5})
        acked: list[tuple[int, int]] = []
        started = time.perf_counter()
        for i in range(COUNT):
            producer.produce(TOPIC, key=f"user-{i % 10}", value=f"event {i}",
                             on_delivery=lambda err, msg: err is None and acked.append(
                                 (msg.partition(), msg.offset())))
            producer.poll(0)
        producer.flush(30)
        elapsed = time.perf_counter() - started
        say(f"idempotent producer (acks=all, zstd): {len(acked)} of {COUNT} records acknowledged "
            f"in {elapsed * 1000:.0f} ms")

        broker.restart(kill=True)
        say("broker killed with SIGKILL and restarted on the same data directory")

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "demo-readers",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        seen: dict[str, int] = {}
        per_partition = [0, 0, 0]
        deadline = time.monotonic() + 60
        while sum(seen.values()) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            value = msg.value().decode()
            seen[value] = seen.get(value, 0) + 1
            per_partition[msg.partition()] += 1
        consumer.commit(asynchronous=False)
        consumer.close()
        duplicates = sum(n - 1 for n in seen.values())
        say(f"consumer group read {sum(seen.values())} records "
            f"({', '.join(f'p{p}: {n}' for p, n in enumerate(per_partition))}), "
            f"{len(seen)} distinct, {duplicates} duplicates, "
            f"{COUNT - len(seen)} missing")
        ok = len(seen) == COUNT and duplicates == 0
        say("every acknowledged record came back exactly once" if ok else "MISMATCH")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
