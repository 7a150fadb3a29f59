"""What the benchmarks share: the broker's CPU seconds from /proc, and consumers tuned as a
throughput user tunes them, run in several processes where one process is the limit.

CPU seconds (utime + stime of the broker process, all its threads) are a fair measure on a loaded,
shared machine, where wall time is not; per GB moved they say what the broker spends, apart from
what the clients spend.

librdkafka's default consumer backs off for a second whenever its local queue is full
(`fetch.queue.backoff.ms` 1000), so an untuned consumer measures that backoff, not the broker;
the settings below keep it fetching.

`stored_batches` counts the records of each batch a broker stores, with raw Fetch requests: two
brokers compared on consume must hold the same batches, or they are compared on different data.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import queue
import resource
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.rawclient

from kio.schema.fetch.v4 import request as fetch_v4
from kio.static.primitive import i32, i64
from tests.rawclient import RawConnection

from exactly.protocol.apis import ApiKey, build
from exactly.protocol.records import RecordBatchError, iter_batches

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# librdkafka's statistics, which count the consumers' fetches, every this many ms. They cost per
# second, not per record (json.loads alone 0.36 ms for 16 partitions, librdkafka builds them
# too): every 100 ms they charged a consumer of 200k-500k records/s 0.01-0.03 CPU-us more per
# record, the slower target the more.
STATISTICS_MS = 1000

# Consumers tuned for throughput (librdkafka's names).
TUNED_CONSUMER = {
    "fetch.queue.backoff.ms": 10,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 10_485_760,
    "queued.max.messages.kbytes": 1_048_576,
    "fetch.wait.max.ms": 100,
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_cpu() -> tuple[float, float]:
    """(busy, waiting for I/O) CPU seconds of the whole machine, all cores, since boot
    (/proc/stat): busy counts user, nice, system, irq, softirq and steal time, the kernel's
    writeback threads included, which no process's own figures show."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS, iowait / CLOCK_TICKS


class CoreSampler(threading.Thread):
    """Samples machine_cpu() every 20 ms, so that a phase timed elsewhere can be given how many
    cores were busy (and how many waited for the disk) over its window, start-up excluded:
    whether the machine's cores or something else bound a throughput figure."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self._samples: list[tuple[float, float, float]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self._samples.append((time.monotonic(), *machine_cpu()))
            time.sleep(0.02)

    def cores(self, start: float, end: float) -> tuple[float, float]:
        """(busy cores, cores in I/O wait), averaged from `start` to `end` (time.monotonic()
        values, `end` in the past), to the nearest samples around them."""
        self._samples.append((time.monotonic(), *machine_cpu()))
        first = next((s for s in reversed(self._samples) if s[0] <= start), self._samples[0])
        last = next(s for s in self._samples if s[0] >= end)
        wall = max(last[0] - first[0], 1e-9)
        return (last[1] - first[1]) / wall, (last[2] - first[2]) / wall

    def stop(self) -> None:
        self._done.set()
        self.join()


def librdkafka_cpu_seconds() -> float:
    """CPU seconds of this process's librdkafka threads (named rdk:...; /proc/self/task), in
    clock ticks: where a consumer's fetching (receiving and parsing answers) is spent, apart
    from the application's thread taking the messages."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # a thread ended meanwhile
            continue
        if stat[stat.index("(") + 1:].startswith("rdk:"):
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def measure(pid: int | None, work: Callable[[], int]) -> tuple[float, float, float | None]:
    """(MB/s wall, seconds, broker CPU seconds per GB or None without a pid) of `work`, which
    returns the bytes it moved."""
    before, started = (cpu_seconds(pid) if pid else 0.0), time.monotonic()
    moved = work()
    wall = time.monotonic() - started
    per_gb = (cpu_seconds(pid) - before) / (moved / 1e9) if pid else None
    return moved / 1e6 / wall, wall, per_gb


def _fetches(stats: dict[str, Any]) -> tuple[int, int]:
    """(Fetch requests sent, bytes received) to the brokers, from librdkafka's statistics."""
    brokers = [b for name, b in stats.get("brokers", {}).items() if not name.startswith(":")]
    return (sum(b.get("req", {}).get("Fetch", 0) for b in brokers),
            sum(b.get("rxbytes", 0) for b in brokers))


def _consume(client: dict[str, Any], assignment: list[tuple[str, int]], isolation: str,
             count: int, tuning: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    """One consumer process: connect, say it is ready, and at `go` read `count` records of
    `assignment` from the beginning. Reports its own CPU seconds and, from librdkafka's
    statistics, the Fetch requests it sent and the bytes it received meanwhile."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    last: list[dict[str, Any]] = [{}]
    consumer = Consumer({**client, **tuning, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "statistics.interval.ms": STATISTICS_MS,
                         "stats_cb": lambda text: last.__setitem__(0, json.loads(text))})
    consumer.list_topics(timeout=30)  # connected
    ready.put(None)
    go.wait()
    consumer.poll(0)  # the statistics so far: what comes before the start is not counted
    fetches_before, rx_before = _fetches(last[0])
    cpu_before = time.process_time()  # every thread of this process, finer than /proc's ticks
    librdkafka_before = librdkafka_cpu_seconds()
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    partitions = [TopicPartition(t, p, OFFSET_BEGINNING) for t, p in assignment]
    consumer.assign(partitions)
    got = size = 0
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        # consume() waits until it has that many or the timeout: never ask for more than is left
        for m in consumer.consume(min(10_000, count - got), 0.5):
            if m.error() is None:
                got += 1
                size += len(m.value() or b"")
    done, cpu = time.monotonic(), time.process_time() - cpu_before
    librdkafka = librdkafka_cpu_seconds() - librdkafka_before
    usage = resource.getrusage(resource.RUSAGE_SELF)
    consumer.pause(partitions)  # no more fetches: at most the one in flight is counted
    time.sleep(STATISTICS_MS / 1000 + 0.25)  # statistics taken since, which cover the whole read
    consumer.poll(0)
    fetches, rx = _fetches(last[0])
    out.put((got, size, done, cpu, fetches - fetches_before, rx - rx_before,
             usage.ru_stime - usage_before.ru_stime, usage.ru_minflt - usage_before.ru_minflt,
             usage.ru_maxrss / 1024, librdkafka))
    consumer.close()


@dataclass(frozen=True)
class Consumed:
    records: int
    bytes: int
    seconds: float  # from the start signal to the last process done
    cpu_per_gb: float | None  # the broker's, when its pid was given
    client_cpu: float = 0.0  # CPU seconds of the consumer processes, all together
    fetches: int = 0  # Fetch requests the consumers sent (librdkafka's statistics)
    received: int = 0  # bytes the consumers received (Fetch answers and all)
    client_sys: float = 0.0  # of client_cpu, the kernel's part (page faults, socket reads)
    minor_faults: int = 0  # the consumers' page faults while reading: memory they grew into
    peak_rss_mib: float = 0.0  # the largest consumer process's peak RSS
    librdkafka_cpu: float = 0.0  # of client_cpu, librdkafka's threads' part (fetching)
    started: float = 0.0  # time.monotonic() at the start signal

    def per_fetch(self) -> str:
        """What the consumers got per Fetch request, and spent per record: the figures load
        does not distort (compare them between brokers, not the throughput)."""
        n = max(1, self.fetches)
        records = max(1, self.records)
        return (f"{self.fetches} fetches, {self.records / n:,.0f} records and "
                f"{self.received / n / 1e3:,.1f} kB per fetch, consumers "
                f"{self.client_cpu / records * 1e6:.2f} CPU-us per record "
                f"({self.client_sys / records * 1e6:.2f} system, "
                f"{self.librdkafka_cpu / records * 1e6:.2f} in librdkafka's threads), "
                f"{self.minor_faults / records * 1e3:.1f} page faults per 1000 records, "
                f"peak RSS {self.peak_rss_mib:.0f} MiB")


def _in_processes(target: Callable[..., None], args: list[tuple[Any, ...]],
                  broker_pid: int | None) -> tuple[list[Any], float, float | None]:
    """Run `target(*a, ready, go, out)` for each `a` of `args`, each in a process of its own:
    timed (and the broker's CPU counted) from when every process said it is ready to when the
    last put its result. Returns the results, when it started, and the broker's CPU seconds
    (None without a pid). A process that dies first fails it at once (a client library
    crashing, a script without a __main__ guard under spawn)."""
    ctx = multiprocessing.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(*a, ready, go, out)) for a in args]
    for p in procs:
        p.start()
    _results(ready, procs, timeout=120)
    cpu_before = cpu_seconds(broker_pid) if broker_pid else 0.0
    started = time.monotonic()
    go.set()
    results = _results(out, procs)
    cpu = cpu_seconds(broker_pid) - cpu_before if broker_pid else None
    for p in procs:
        p.join()
    return results, started, cpu


def _results(out: Any, procs: list[Any], timeout: float = 600) -> list[Any]:
    """One result per process from `out`; a process that died without one (a client library
    crashing) fails the measure at once instead of leaving it waiting out `timeout`."""
    results: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=1))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"client processes ended without a result (exit codes "
                                   f"{dead})" if dead else f"no result in {timeout:.0f} s")
    return results


def consume_in_processes(client: dict[str, Any], counts: dict[tuple[str, int], int], *,
                         isolation: str = "read_uncommitted", processes: int = 2,
                         broker_pid: int | None = None,
                         tuning: dict[str, Any] | None = None) -> Consumed:
    """Read every record of the partitions in `counts` (partition -> records in it) with
    `processes` tuned consumer processes, the partitions dealt out among them. Timed (and the
    broker's CPU counted) from when every process is connected to when the last is done, so
    process start-up is not in the figure. Fewer records than counted (a deadline of 300 s)
    come back as they are: the caller decides whether a short read is an error. `tuning`
    replaces TUNED_CONSUMER."""
    parts: Sequence[tuple[str, int]] = sorted(counts)
    n = max(1, min(processes, len(parts)))
    args = []
    for i in range(n):
        mine = [tp for j, tp in enumerate(parts) if j % n == i]
        args.append((client, mine, isolation, sum(counts[tp] for tp in mine),
                     TUNED_CONSUMER if tuning is None else tuning))
    results, started, cpu = _in_processes(_consume, args, broker_pid)
    moved = sum(r[1] for r in results)
    return Consumed(sum(r[0] for r in results), moved, max(r[2] for r in results) - started,
                    None if cpu is None else cpu / (moved / 1e9),
                    client_cpu=sum(r[3] for r in results), fetches=sum(r[4] for r in results),
                    received=sum(r[5] for r in results), client_sys=sum(r[6] for r in results),
                    minor_faults=sum(r[7] for r in results),
                    peak_rss_mib=max(r[8] for r in results),
                    librdkafka_cpu=sum(r[9] for r in results), started=started)


def _produce(client: dict[str, Any], topics: list[str], size: int, count: int, ready: Any,
             go: Any, out: Any) -> None:
    """One producer process: an idempotent acks=all producer with `client`'s settings; it gets
    its producer id (a warm-up record per topic), says it is ready, and at `go` sends `count`
    records of `size` random bytes round robin over `topics`. Reports the records placed per
    partition (the warm-up's too), the bytes sent, when it was done, delivery errors, and the
    CPU seconds the process spent sending (librdkafka's threads included)."""
    from confluent_kafka import Producer

    placed: Counter[tuple[str, int]] = Counter()
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            placed[(msg.topic(), msg.partition())] += 1

    producer = Producer({**client, "enable.idempotence": True, "acks": "all"})
    for topic in topics:
        producer.produce(topic, b"warm-up", on_delivery=on_delivery)
    producer.flush(30)
    ready.put(None)
    go.wait()
    cpu_before = time.process_time()
    payload = os.urandom(size)
    for i in range(count):
        while True:
            try:
                producer.produce(topics[i % len(topics)], payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
    left = producer.flush(120)
    if left:
        errors.append(f"{left} undelivered")
    out.put((dict(placed), count * size, time.monotonic(), errors[:3],
             time.process_time() - cpu_before))


class Produced(NamedTuple):
    placed: Counter[tuple[str, int]]  # records per partition, the warm-up's too
    seconds: float  # from the start signal to the last process done
    cpu_per_gb: float | None  # the broker's, when its pid was given
    client_cpu_per_gb: float  # the producer processes', all together
    started: float  # time.monotonic() at the start signal


def produce_in_processes(client: dict[str, Any], topics: list[str], size: int, count: int, *,
                         processes: int = 2, broker_pid: int | None = None) -> Produced:
    """Produce `count` records of `size` bytes with `processes` producer processes (librdkafka,
    as bench/run.py's one producer is tuned), each a share. Timed (and the broker's CPU counted)
    from when every process has its producer id to when the last is done. Delivery errors fail
    it."""
    shares = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
    results, started, cpu = _in_processes(
        _produce, [(client, topics, size, share) for share in shares], broker_pid)
    errors = [e for r in results for e in r[3]]
    if errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")
    placed: Counter[tuple[str, int]] = Counter()
    for r in results:
        placed.update(r[0])
    moved = sum(r[1] for r in results)
    return Produced(placed, max(r[2] for r in results) - started,
                    None if cpu is None else cpu / (moved / 1e9),
                    sum(r[4] for r in results) / (moved / 1e9), started)


def stored_batches(bootstrap: str, partitions: Iterable[tuple[str, int]]) -> Counter[int]:
    """How many records each stored batch holds (records per batch -> batches), read with raw
    Fetch v4 requests from offset 0 to the high watermark of each partition: what the broker
    keeps, which the consumers' statistics do not show. Fetch v4 because both Exactly and
    librdkafka's mock answer it, without topic ids. Control batches are not counted."""
    host, port = bootstrap.rsplit(":", 1)
    sizes: Counter[int] = Counter()
    conn = RawConnection(host, int(port), timeout=30)
    try:
        for topic, partition in partitions:
            offset, high = 0, None
            while high is None or offset < high:
                answer = conn.request(
                    ApiKey.FETCH, 4, max_wait=datetime.timedelta(0), min_bytes=i32(0),
                    max_bytes=i32(8 << 20), topics=(build(
                        fetch_v4.FetchTopic, topic=topic, partitions=(fetch_v4.FetchPartition(
                            partition=i32(partition), fetch_offset=i64(offset),
                            partition_max_bytes=i32(8 << 20)),)),))
                data = answer.responses[0].partitions[0]
                if data.error_code:
                    raise RuntimeError(f"Fetch {topic}-{partition} at {offset}: error "
                                       f"{data.error_code}")
                high, before = data.high_watermark, offset
                try:
                    for batch in iter_batches(data.records or b""):
                        if batch.last_offset < offset:
                            continue  # a batch the fetch offset falls in, answered whole
                        if not batch.attributes & 0x20:  # 0x20: a control batch
                            sizes[batch.records_count] += 1
                        offset = batch.last_offset + 1
                except RecordBatchError:
                    pass  # the answer ends in a partial batch (at its byte limit): fetch again
                if offset == before and offset < high:
                    raise RuntimeError(f"Fetch {topic}-{partition} at {offset} made no progress "
                                       f"(high watermark {high})")
    finally:
        conn.close()
    return sizes


def describe_batches(sizes: Counter[int]) -> str:
    """Records per stored batch in a line: the mean and the most common sizes."""
    batches = sum(sizes.values())
    records = sum(n * k for n, k in sizes.items())
    common = sorted(sizes.items(), key=lambda x: -x[1])
    shown = ", ".join(f"{n}x{k}" for n, k in common[:4]) + (", ..." if len(common) > 4 else "")
    return (f"{batches} batches, {records / max(1, batches):,.1f} records per batch "
            f"(records x batches: {shown})")
