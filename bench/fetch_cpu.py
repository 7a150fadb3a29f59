"""The broker's CPU per GB produced and per GB fetched (issue 19), from /proc.

CPU seconds (utime + stime of the broker process, /proc/<pid>/stat) are a fair measure on a
loaded, shared machine, where wall time is not. One broker (`log.flush.policy=os`), one topic of
several partitions, 1 KiB records: a confluent-kafka producer writes them (CPU per GB produced,
for reference), then consumer processes tuned for throughput read everything back, once with
read_uncommitted and once with read_committed (CPU per GB fetched). Each is run several times and
the spread printed. Fetch goes through the zero-copy path on PLAINTEXT listeners (sendfile of
segment ranges) and through the copying path on TLS ones; `--tls` measures the latter.

    .venv/bin/python bench/fetch_cpu.py [--records N] [--partitions N] [--consumers N] [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import consume_in_processes, measure

from exactly.testing import EmbeddedBroker, make_test_certificates

RECORD = 1024
PARTITIONS = 8


def produce(client: dict[str, str], topic: str, count: int) -> int:
    producer = Producer({**client, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    value = os.urandom(RECORD)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return count * RECORD


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f} (median {sorted(values)[len(values) // 2]:.2f})"


def report(results: dict[str, list[float]], run: int, name: str, per_gb: float,
           mbs: float) -> None:
    results[name].append(per_gb)
    print(f"run {run + 1} {name:17s} {per_gb:5.2f} CPU-s/GB  ({mbs:.0f} MB/s)", flush=True)


def main() -> None:
    global PARTITIONS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tls", action="store_true", help="fetch over an SSL listener")
    args = parser.parse_args()
    PARTITIONS = args.partitions
    settings = {"log.flush.policy": "os", "num.partitions": str(PARTITIONS)}
    client: dict[str, str] = {}
    if args.tls:
        import tempfile

        certs = make_test_certificates(tempfile.mkdtemp(prefix="exactly-bench-certs-"))
        settings.update({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                         "ssl.keystore.location": str(certs.server),
                         "ssl.truststore.location": str(certs.ca)})
        client = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
    results: dict[str, list[float]] = {"produce": [], "read_uncommitted": [], "read_committed": []}
    with EmbeddedBroker(settings=settings) as broker:
        pid = broker.process.pid  # type: ignore[union-attr]
        plain = {"bootstrap.servers": broker.bootstrap}
        client["bootstrap.servers"] = broker.address("SSL") if args.tls else broker.bootstrap
        admin = AdminClient(plain)
        for run in range(args.runs):
            topic = f"cpu-{run}-{uuid.uuid4().hex[:6]}"
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            mbs, _wall, per_gb = measure(pid, functools.partial(produce, plain, topic,
                                                                 args.records))
            assert per_gb is not None
            report(results, run, "produce", per_gb, mbs)
            counts = {(topic, p): args.records // PARTITIONS + (p < args.records % PARTITIONS)
                      for p in range(PARTITIONS)}
            for isolation in ("read_uncommitted", "read_committed"):
                done = consume_in_processes(client, counts, isolation=isolation,
                                            processes=args.consumers, broker_pid=pid)
                assert done.records == args.records and done.cpu_per_gb is not None, done
                report(results, run, isolation, done.cpu_per_gb, done.bytes / 1e6 / done.seconds)
    print(f"\nbroker CPU-seconds per GB, {args.records} records of {RECORD} B, {PARTITIONS} "
          f"partitions, {args.consumers} consumer processes, {args.runs} runs"
          f"{' (fetch over TLS)' if args.tls else ''}:")
    for name, values in results.items():
        print(f"  {name:17s} {spread(values)}")


if __name__ == "__main__":
    main()
