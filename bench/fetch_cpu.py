"""The broker's CPU per GB produced and per GB fetched (issue 19), from /proc.

CPU seconds (utime + stime of the broker process, /proc/<pid>/stat) are a fair measure on a
loaded, shared machine, where wall time is not. One broker (`log.flush.policy=os`), one topic of
several partitions, 1 KiB records: a confluent-kafka producer writes them (CPU per GB produced,
for reference), then consumer processes tuned for throughput read everything back, once with
read_uncommitted and once with read_committed (CPU per GB fetched). Each is run several times and
the spread printed. Fetch goes through the zero-copy path on PLAINTEXT listeners (sendfile of
segment ranges) and through the copying path on TLS ones; `--tls` measures the latter. Beside
each consume figure: the consumers' Fetch requests, what each answer carried, their CPU per
record and the broker's CPU per Fetch request. Then the broker's CPU per request alone:
`--requests` raw Fetch requests (4 in flight, no wait) of every partition of a topic of small
batches (10 records of 100 B) from offset 0, each partition cut at one batch, so the figure is
what the broker spends per request and per partition, not per byte.

The producer is tuned as a throughput user tunes it: `batch.size` 1 MB (the broker's
`message.max.bytes`, 1 MiB, bounds a batch), `linger.ms` 5, a large queue. librdkafka sends one
partition per Produce request, so a request carries one batch of about 1 MB whatever the
client's `message.max.bytes` (measured: one pwritev and one answer per MB with 1 MB and with
8 MB). On a virtual machine the produce figure also depends on the guest's memory: the
page-cache copy costs more on pages the guest has not used lately (a plain loop of 1 MiB pwritev
into a new file: 1.5–2.1 system CPU-s for the first GiB after a pause, 0.2 for the next ones), so
compare two versions of the broker by runs of both in one session, interleaved, not across
sessions.

    .venv/bin/python bench/fetch_cpu.py [--records N] [--partitions N] [--consumers N] [--runs N]
                                        [--requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import os
import uuid
from importlib import import_module

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import consume_in_processes, cpu_seconds, measure

from exactly.client.connection import BrokerConnection
from exactly.protocol.apis import ApiKey, build, request_class
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


async def fetch_requests(bootstrap: str, topic: str, count: int, partition_max_bytes: int,
                         isolation: int, version: int = 12) -> None:
    """`count` Fetch requests of every partition of `topic` from offset 0, 4 in flight."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await BrokerConnection.connect(host, int(port))
    schema = import_module(f"kio.schema.fetch.v{version}.request")
    request = build(
        request_class(ApiKey.FETCH, version), replica_id=-1, max_wait=datetime.timedelta(0),
        min_bytes=1, max_bytes=52_428_800, isolation_level=isolation, session_id=0,
        session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(schema.FetchTopic(topic=topic, partitions=tuple(
            schema.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                  log_start_offset=-1, partition_max_bytes=partition_max_bytes)
            for p in range(PARTITIONS))),))
    slots = asyncio.Semaphore(4)

    async def one() -> None:
        async with slots:
            await conn.send(request)

    await asyncio.gather(*(one() for _ in range(count)))
    await conn.close()


def small_batches(client: dict[str, str], admin: AdminClient) -> str:
    """A topic of PARTITIONS partitions, each of 100 batches of 10 records of 100 B."""
    topic = f"small-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({**client, "linger.ms": 50, "batch.num.messages": 10})
    for i in range(1000 * PARTITIONS):
        producer.produce(topic, b"x" * 100, partition=i % PARTITIONS)
    producer.flush(60)
    return topic


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
    parser.add_argument("--requests", type=int, default=3000,
                        help="raw Fetch requests for the CPU per request (0: none; PLAINTEXT "
                             "only, so none with --tls)")
    args = parser.parse_args()
    PARTITIONS = args.partitions
    if args.tls:
        args.requests = 0
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
    per_request: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
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
                broker_cpu = done.cpu_per_gb * done.bytes / 1e9
                print(f"      {done.per_fetch()}, broker "
                      f"{broker_cpu / max(1, done.fetches) * 1e6:,.0f} CPU-us per fetch", flush=True)
            small = small_batches(plain, admin) if args.requests else ""
            for level, isolation in enumerate(per_request):
                if not args.requests:
                    break
                before = cpu_seconds(pid)
                asyncio.run(fetch_requests(broker.bootstrap, small, args.requests, 1, level))
                per_request[isolation].append((cpu_seconds(pid) - before) / args.requests * 1e6)
                print(f"run {run + 1} {isolation:17s} {per_request[isolation][-1]:5.0f} "
                      f"CPU-us per Fetch request of {PARTITIONS} partitions", flush=True)
    print(f"\nbroker CPU-seconds per GB, {args.records} records of {RECORD} B, {PARTITIONS} "
          f"partitions, {args.consumers} consumer processes, {args.runs} runs"
          f"{' (fetch over TLS)' if args.tls else ''}:")
    for name, values in results.items():
        print(f"  {name:17s} {spread(values)}")
    if args.requests:
        print(f"broker CPU-us per Fetch request of {PARTITIONS} partitions, one batch of "
              f"1 kB from each:")
        for name, values in per_request.items():
            print(f"  {name:17s} {spread(values)}")


if __name__ == "__main__":
    main()
