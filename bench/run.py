"""Throughput of confluent-kafka against Exactly's broker and librdkafka's mock cluster.

Same client, same workload, side by side in one run: idempotent producer with acks=all, then
consumers reading everything back, for 100-byte and 1 KiB records. Exactly runs twice, with
`log.flush.policy=os` (page cache) and `fsync` (acks=all waits for fsync, group commit). The mock
keeps at most 5 MiB per partition, so the records are spread over 8 topics of 4 partitions.

The consumers are tuned as a throughput user tunes them and run in `--consumers` processes
(bench/measure.py): one untuned librdkafka consumer measures its own backoff, not the broker.
Beside each of Exactly's figures, the broker's CPU seconds per GB moved (from /proc); the mock
runs inside the benchmark's own process: where the clients run in processes of their own (the
consumers always, the producers with `--producers 2` or more), that process's CPU is the mock's,
and is given beside the mock's figures the same way. Below each workload's rows, per target,
how many of the machine's cores were busy (and in I/O wait) while produce and consume were timed,
from /proc/stat (kernel threads included: under `os` the page cache's writeback mostly falls after
the run, under `fsync` within it; at all cores busy the machine's CPU is the limit), then what load
does not distort: the consumers' Fetch requests, records and bytes per answer, their
CPU per record (and its system part), their page faults per 1000 records and their peak RSS.
(librdkafka's mock answers one stored batch per partition per Fetch;
Exactly, as Kafka, fills each answer up to the request's limits.)

`--max-partition-fetch-bytes` sets the consumers' max.partition.fetch.bytes (10 MiB by default,
1 MiB for 100 B records: see `--fetch-sizes` below):
a consumer reading 100-byte records waits for the whole first answer before its first record,
and with 10 MiB per partition that answer holds everything (tens of MB), where the mock answers
one stored batch per partition; 262144 lets the consumers start after 2 MB (the mock's answers
are below that either way). `--fetch-max-bytes` sets fetch.max.bytes, the limit of a whole
answer (50 MB by default, 4 MiB for 100 B records).

`--same-batches [N]` makes the producer write the same data into both targets: by default its
batches close as answers come back, at different moments against different brokers (about 590
records per 100 B batch on Exactly, 800 on the mock), so the consume figures would compare
different data. With it, linger.ms is long and batch.num.messages is N (800 by default), so
every batch closes full at N records (but the last of each partition, closed by flush, and the
warm-up's one-record batches); the records are dealt to the partitions round robin, so both
targets store the same records in the same places. The run then alternates the mock and
Exactly (`os` only: the flush policy does not change what is read) `--repeat` times, prints
every run, and below each, the records per batch as stored, counted with raw Fetch requests
(bench/measure.py `stored_batches`), to show they are equal.

What it showed (100 B, identical batches of 800): the data being equal, the answers still are
not. The mock answers one batch per partition (about 1.3 MB, 12k records); Exactly fills the
answer to the consumers' limits (12-16 MB, 110-150k records), as Kafka does. librdkafka reads
an answer into one buffer of its size and holds it until the application has taken its last
record, so with the big answers its broker thread keeps receiving into fresh memory: more page
faults and system time in librdkafka's threads (0.33-0.38 against 0.19-0.22 CPU-us per
record; all threads 0.95-1.06 against 0.82-0.91). The broker's `fetch.max.bytes` at 2 MiB
gives the mock's figures (0.83 against 0.82) for three to four times the broker's CPU per
record (0.08-0.10 µs against 0.02-0.03: more, smaller Fetch requests); at 8 MiB, 0.91. With
`--max-partition-fetch-bytes 90000` (one batch per partition, the mock's layout) the answers
are alike and so is the consumers' work: the same Fetch version (v16, the highest librdkafka
2.16 and the mock both support), the same instructions per record (callgrind: librdkafka
402.4 M against 404.7 M for 225k records), the same page faults, and CPU per record within
the noise of a loaded machine (medians of 12 interleaved runs: 0.775-0.803 on the mock,
0.795 on Exactly). Nor did corking the socket around each zero-copy answer (whole TCP
segments instead of a push after each partition's records) change it.

`--fetch-sizes F[:P] ...` sweeps the consumers' tuning: each round produces once into a fresh mock
and a fresh broker, then consumes the same data with fetch.max.bytes F and
max.partition.fetch.bytes P (P = F when omitted), every setting on both targets alternately (the
mock, which answers at most one stored batch per partition, is the reference); it prints, per
setting and target, the medians over `--repeat` rounds of the consumers' CPU per record
(librdkafka's threads' part) and kB per Fetch, and the broker's CPU per GB.

What it showed (100 B, `--same-batches`, two sweeps of 3 rounds and Exactly alone in runs of 5 and
6 rounds; medians of the consumers' CPU-us per record on Exactly, the mock's beside): 50 MB/10 MiB
(the default before) 0.95-1.11 against the mock's 0.84-0.92 (answers of 14-16 MB); 8 MiB/2 MiB
0.87-1.01 against 0.88-0.95; 4 MiB/1 MiB 0.86-1.00 against 0.84-0.95; 2 MiB/1 MiB 0.85-1.01 against
0.85-1.02; 1 MiB/256 KiB 0.88-0.95. From 8 MiB down the consumers read as fast as from the mock, no
setting among those clearly ahead; the broker's CPU per GB rises as answers shrink (from
/proc/<pid>/task/*/schedstat: 0.32 s at 50 MB, 0.48-0.52 at 4 MiB, 0.76-0.80 at 2 MiB, 1.2 at 1
MiB: more Fetch requests for the same bytes). So the 100 B workload's consumers ask for 4 MiB
answers and 1 MiB per partition (SMALL_RECORDS_FETCH): within the noise of the best in every run (8
MiB the slowest of them, or tied, in both sweeps), for two thirds of 2 MiB's broker CPU. The 1 KiB
workload keeps TUNED_CONSUMER's sizes; the command line's sizes override both.

    .venv/bin/python bench/run.py [--quick] [--consumers N] [--max-partition-fetch-bytes N]
    .venv/bin/python bench/run.py --same-batches [N] [--workload 100B] [--repeat 3]
        [--max-partition-fetch-bytes 90000]
    .venv/bin/python bench/run.py --fetch-sizes 52428800:10485760 2097152:1048576
        [--same-batches [N]] [--workload 100B] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import (
    TUNED_CONSUMER,
    Consumed,
    CoreSampler,
    consume_in_processes,
    describe_batches,
    measure,
    produce_in_processes,
    stored_batches,
)

from exactly.testing import EmbeddedBroker

PARTITIONS = 4  # what the mock cluster gives an auto-created topic
TOPICS = 8  # spread over several topics: the mock keeps at most 5 MiB per partition
CONSUMER: dict[str, object] = {}  # the command line's fetch sizes, over the workload's
PRODUCER: dict[str, object] = {}  # settings over the producer's defaults (--same-batches)
PRODUCERS = [1]  # producer processes (--producers)
CORES = CoreSampler()  # the machine's busy cores over each timed phase
# The 100 B consumers' fetch sizes: answers that read as fast as the mock's (see above).
SMALL_RECORDS_FETCH = {"fetch.max.bytes": 4 << 20, "max.partition.fetch.bytes": 1 << 20}


@dataclass
class Workload:
    name: str
    size: int
    count: int
    # The consumers' fetch sizes over TUNED_CONSUMER's: those that read fastest (--fetch-sizes).
    fetch: dict[str, object] = field(default_factory=dict)

    def tuning(self) -> dict[str, object]:
        return {**TUNED_CONSUMER, **self.fetch, **CONSUMER}


@dataclass
class Result:
    msgs_per_s: float
    mb_per_s: float
    cpu_per_gb: float | None = None  # the broker's (or the mock's) CPU seconds per GB
    detail: str = ""  # consume: Fetch requests, what each answer carried, consumers' CPU;
    # produce (producer processes): their CPU per record
    cores: tuple[float, float] = (0.0, 0.0)  # the machine's busy cores, cores in I/O wait
    stored: str = ""  # records per batch as stored (--same-batches)


def _produce(bootstrap_conf: dict, topics: list[str], w: Workload, placed: Counter,
             pid: int | None) -> Result:
    """Produce the workload, timed after a warm-up; `placed` counts the records per partition
    (the warm-up's too, which the consumers read)."""
    if PRODUCERS[0] > 1:  # one process is the limit at 100 B: several share the records
        done = produce_in_processes(bootstrap_conf, topics, w.size, w.count,
                                    processes=PRODUCERS[0], broker_pid=pid or os.getpid())
        placed.update(done.placed)
        client = done.client_cpu_per_gb * w.size / 1e3  # CPU-us per record
        return Result(w.count / done.seconds, w.count * w.size / done.seconds / 1e6,
                      done.cpu_per_gb, f"producers {client:.2f} CPU-us per record",
                      cores=CORES.cores(done.started, done.started + done.seconds))
    # librdkafka's defaults otherwise: raising linger.ms or the queue size makes its idempotent
    # producer slower against any broker, the mock included.
    producer = Producer({**bootstrap_conf, "enable.idempotence": True, "acks": "all", **PRODUCER})
    payload = os.urandom(w.size)
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            placed[(msg.topic(), msg.partition())] += 1

    # Warm up: the idempotent producer gets its producer id asynchronously, which would
    # otherwise put a fixed start-up wait into the timing.
    for topic in topics:
        producer.produce(topic, b"warm-up", on_delivery=on_delivery, **_partition(0, topics))
    producer.flush(30)

    def send_all() -> int:
        for i in range(w.count):
            topic = topics[i % len(topics)]
            where = _partition(i, topics)
            while True:
                try:
                    producer.produce(topic, payload, on_delivery=on_delivery, **where)
                    break
                except BufferError:
                    producer.poll(0.001)
        left = producer.flush(120)
        if left or errors:
            raise RuntimeError(f"produce failed: {left} undelivered, errors {errors[:3]}")
        return w.count * w.size

    started = time.monotonic()
    mbs, wall, cpu = measure(pid, send_all)
    return Result(w.count / wall, mbs, cpu, cores=CORES.cores(started, started + wall))


def _partition(i: int, topics: list[str]) -> dict[str, Any]:
    """With --same-batches, record i goes to a fixed partition, round robin, so that both targets
    store the same records in the same partitions; otherwise the partitioner decides."""
    return {"partition": i // len(topics) % PARTITIONS} if PRODUCER else {}


class ShortRead(RuntimeError):
    """The consumer read fewer records than were produced before its deadline."""


def _consume(conf: dict, placed: Counter, consumers: int, pid: int | None, w: Workload
             ) -> Result:
    """Read everything back with tuned consumer processes."""
    expected = sum(placed.values())
    done = consume_in_processes(conf, dict(placed), processes=consumers,
                                broker_pid=pid or os.getpid(),
                                tuning=w.tuning())
    if done.records < expected:
        raise ShortRead(f"consumed {done.records} of {expected}")
    # (The few warm-up records are read too; the figures count the workload's.)
    return Result(w.count / done.seconds, w.count * w.size / done.seconds / 1e6, done.cpu_per_gb,
                  done.per_fetch(), cores=CORES.cores(done.started, done.started + done.seconds))


def _run(pid: int | None, conf: dict, topics: list[str], w: Workload, consumers: int
         ) -> tuple[Result, Result]:
    placed: Counter = Counter()
    produced = _produce(conf, topics, w, placed, pid)
    consumed = _consume(conf, placed, consumers, pid, w)
    if PRODUCER:
        consumed.stored = describe_batches(stored_batches(conf["bootstrap.servers"], placed))
    return produced, consumed


def _create_topics(bootstrap_conf: dict, topics: list[str]) -> None:
    admin = AdminClient(bootstrap_conf)
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(timeout=30)


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self._done = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            try:
                self.peak = max(self.peak, _rss_mib(self.pid))
            except OSError:
                return
            time.sleep(0.05)

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.peak


def best(runs: list[tuple[Result, ...]]) -> tuple[Result, ...]:
    """The best produce and the best consume figure of several runs (less noise on 2 cores)."""
    return tuple(max((r[i] for r in runs), key=lambda x: x.msgs_per_s) for i in range(2)) + runs[0][2:]


@contextlib.contextmanager
def mock_target(w: Workload) -> Iterator[tuple[None, dict, list[str]]]:
    """librdkafka's mock cluster: (no broker pid, client settings, topics)."""
    # The mock cluster lives inside this producer; the consumers connect to its listener.
    holder = Producer({"test.mock.num.brokers": 1})
    broker = holder.list_topics(timeout=10).brokers
    (meta,) = broker.values()
    try:
        # auto-created, PARTITIONS each
        yield None, {"bootstrap.servers": f"{meta.host}:{meta.port}"}, [
            f"mock-{w.name}-{i}" for i in range(TOPICS)]
    finally:
        del holder


@contextlib.contextmanager
def exactly_target(w: Workload, policy: str) -> Iterator[tuple[EmbeddedBroker, dict, list[str]]]:
    """An Exactly broker with the workload's topics: (broker, client settings, topics)."""
    with EmbeddedBroker(settings={"log.flush.policy": policy}) as broker:
        conf = {"bootstrap.servers": broker.bootstrap}
        topics = [f"exactly-{w.name}-{i}" for i in range(TOPICS)]
        _create_topics(conf, topics)
        yield broker, conf, topics


def run_mock(w: Workload, consumers: int) -> tuple[Result, Result]:
    with mock_target(w) as (_none, conf, topics):
        try:
            return _run(None, conf, topics, w, consumers)
        except ShortRead as exc:
            # The mock is a speed reference only; some runs it loses 1 KiB records (a few
            # percent).
            print(f"# the mock's consume came up short ({exc}): its consume figure is left out",
                  flush=True)
            return Result(0.0, 0.0), Result(0.0, 0.0)


def run_exactly(w: Workload, policy: str, consumers: int) -> tuple[Result, Result, float]:
    with exactly_target(w, policy) as (broker, conf, topics):
        sampler = RssSampler(broker.process.pid)
        sampler.start()
        produced, consumed = _run(broker.process.pid, conf, topics, w, consumers)
        return produced, consumed, sampler.stop()


def _cores(r: Result) -> str:
    return f"{r.cores[0]:.2f} ({r.cores[1]:.2f})"


def _cpu(r: Result) -> str:
    return f"{r.cpu_per_gb:6.2f}" if r.cpu_per_gb is not None else "     -"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the records")
    parser.add_argument("--repeat", type=int, default=2, help="runs per target; the best counts")
    parser.add_argument("--consumers", type=int, default=2, help="consumer processes")
    parser.add_argument("--producers", type=int, default=1,
                        help="producer processes, each a share of the records (default 1)")
    parser.add_argument("--max-partition-fetch-bytes", type=int,
                        help="the consumers' max.partition.fetch.bytes (default: the workload's)")
    parser.add_argument("--fetch-max-bytes", type=int,
                        help="the consumers' fetch.max.bytes, the limit of a whole answer "
                             "(default: the workload's)")
    parser.add_argument("--same-batches", type=int, nargs="?", const=800, metavar="N",
                        help="identical stored batches of N records (800) on both targets; "
                             "alternates the mock and Exactly os, every run printed")
    parser.add_argument("--workload", choices=("100B", "1KiB"), help="only this workload")
    parser.add_argument("--fetch-sizes", type=fetch_sizes, nargs="+", metavar="F[:P]",
                        help="sweep: consume with each fetch.max.bytes F and "
                             "max.partition.fetch.bytes P (P=F if omitted) on both targets")
    args = parser.parse_args()
    if args.producers > 1 and args.same_batches:
        parser.error("--same-batches deals the records to partitions from one producer: "
                     "not with --producers")
    PRODUCERS[0] = max(1, args.producers)
    CORES.start()
    scale = 10 if args.quick else 1
    # The mock drops data past 5 MiB per partition (its overhead included): 3 to 4 MiB each.
    workloads = [w for w in (Workload("100B", 100, 900_000 // scale, dict(SMALL_RECORDS_FETCH)),
                             Workload("1KiB", 1024, 64_000 // scale))
                 if args.workload in (None, w.name)]
    if args.max_partition_fetch_bytes is not None:
        CONSUMER["max.partition.fetch.bytes"] = args.max_partition_fetch_bytes
    if args.fetch_max_bytes is not None:
        CONSUMER["fetch.max.bytes"] = args.fetch_max_bytes
    if args.same_batches:
        # A batch closes at N records, long before linger.ms; flush() sends the rest at once.
        PRODUCER.update({"linger.ms": 5000,
                         "batch.num.messages": args.same_batches,
                         "batch.size": 16_000_000})
    if args.fetch_sizes:
        sweep(workloads, args.fetch_sizes, args.repeat, args.consumers)
        return
    if args.same_batches:
        same_batches(workloads, args.repeat, args.consumers)
        return
    print(f"{args.producers} producer and {args.consumers} consumer processes "
          f"({_tunings(workloads)}); CPU: the broker's CPU seconds per GB (the mock's: this "
          f"process's, the clients being in their own)")
    print(f"{'workload':<9} {'target':<16} {'produce msg/s':>14} {'MB/s':>7} {'ratio':>6} "
          f"{'CPU':>6}   {'consume msg/s':>14} {'MB/s':>7} {'ratio':>6} {'CPU':>6}   "
          f"{'peak RSS':>9}")
    for w in workloads:
        mock_p, mock_c = best([run_mock(w, args.consumers) for _ in range(args.repeat)])
        rows = [("librdkafka mock", mock_p, mock_c, None)]
        for policy in ("os", "fsync"):
            runs = [run_exactly(w, policy, args.consumers) for _ in range(args.repeat)]
            p, c = best(runs)[:2]
            rss = max(r[2] for r in runs)
            rows.append((f"exactly {policy}", p, c, rss))
        for target, p, c, rss in rows:
            rss_text = f"{rss:7.0f} MiB" if rss is not None else ""
            print(f"{w.name:<9} {target:<16} {p.msgs_per_s:>14,.0f} {p.mb_per_s:>7.1f} "
                  f"{_ratio(p, mock_p)} {_cpu(p)}   {c.msgs_per_s:>14,.0f} {c.mb_per_s:>7.1f} "
                  f"{_ratio(c, mock_c)} {_cpu(c)}   {rss_text:>9}", flush=True)
        for target, p, c, _rss in rows:
            produce = f"; produce: {p.detail}" if p.detail else ""
            print(f"{'':<9} {target:<16} cores busy (in I/O wait): produce {_cores(p)}, "
                  f"consume {_cores(c)}{produce}; consume: {c.detail}", flush=True)


def same_batches(workloads: list[Workload], repeat: int, consumers: int) -> None:
    """The mock and Exactly (os) alternately, `repeat` times each, on identical stored batches:
    every run's consume figures, the ratio to the mock run just before, and what was stored."""
    print(f"{consumers} consumer processes ({_tunings(workloads)}); producer {PRODUCER}; CPU: "
          "the broker's CPU seconds per GB")
    print(f"{'workload':<9} {'run':>3} {'target':<16} {'consume msg/s':>14} {'MB/s':>7} "
          f"{'ratio':>6} {'CPU':>6}   consumers, stored batches")
    for w in workloads:
        for i in range(repeat):
            _p, mock = run_mock(w, consumers)
            _p, exactly, _rss = run_exactly(w, "os", consumers)
            for target, c in (("librdkafka mock", mock), ("exactly os", exactly)):
                print(f"{w.name:<9} {i + 1:>3} {target:<16} {c.msgs_per_s:>14,.0f} "
                      f"{c.mb_per_s:>7.1f} {_ratio(c, mock)} {_cpu(c)}   {c.detail}\n"
                      f"{'':<31} stored: {c.stored}", flush=True)


def fetch_sizes(text: str) -> tuple[int, int]:
    """`F:P` (fetch.max.bytes F, max.partition.fetch.bytes P), or `N` for both."""
    total, _, partition = text.partition(":")
    return int(total), int(partition or total)


def sweep(workloads: list[Workload], settings: list[tuple[int, int]], repeat: int,
          consumers: int) -> None:
    """The consumers with each fetch setting against the mock and Exactly (os), the same data
    read again and again: each round produces once into a fresh mock and a fresh broker, then
    consumes with every setting, alternating the targets. Medians over the rounds of what load
    does not distort: the consumers' CPU per record (and librdkafka's threads' part) and the
    broker's CPU per GB."""
    print(f"{consumers} consumer processes ({TUNED_CONSUMER} but the fetch sizes); producer "
          f"{PRODUCER or 'defaults'}; medians of {repeat} rounds")
    print(f"{'workload':<9} {'fetch.max.bytes':>15} {'max.partition':>13} {'target':<16} "
          f"{'client us/rec':>13} {'librdkafka':>10} {'kB/fetch':>9} {'broker CPU s/GB':>15}")
    for w in workloads:
        seen: dict[tuple[tuple[int, int], str], list[Consumed]] = {}
        for i in range(repeat):
            with mock_target(w) as (_none, mock_conf, mock_topics), \
                    exactly_target(w, "os") as (broker, conf, topics):
                targets: list[tuple[str, int | None, dict, Counter]] = [
                    ("librdkafka mock", None, mock_conf, Counter()),
                    ("exactly os", broker.process.pid, conf, Counter())]
                for (_name, pid, c, placed), t in zip(targets, (mock_topics, topics)):
                    _produce(c, t, w, placed, pid)
                for setting in settings:
                    tuning = {**TUNED_CONSUMER, "fetch.max.bytes": setting[0],
                              "max.partition.fetch.bytes": setting[1]}
                    for name, pid, c, placed in targets[::1 if i % 2 else -1]:
                        seen.setdefault((setting, name), []).append(consume_in_processes(
                            c, dict(placed), processes=consumers, broker_pid=pid, tuning=tuning))
        for setting in settings:
            for name in ("librdkafka mock", "exactly os"):
                runs = seen[(setting, name)]
                client = _median(runs, lambda d: d.client_cpu / max(1, d.records) * 1e6)
                rdk = _median(runs, lambda d: d.librdkafka_cpu / max(1, d.records) * 1e6)
                kb = _median(runs, lambda d: d.received / max(1, d.fetches) / 1e3)
                cpu = (f"{_median(runs, lambda d: d.cpu_per_gb or 0.0):15.2f}"
                       if runs[0].cpu_per_gb is not None else "")
                print(f"{w.name:<9} {setting[0]:>15,} {setting[1]:>13,} {name:<16} "
                      f"{client:>13.3f} {rdk:>10.3f} {kb:>9,.0f} {cpu:>15}", flush=True)


def _tunings(workloads: list[Workload]) -> str:
    return "; ".join(f"{w.name}: {w.tuning()}" for w in workloads)


def _median(runs: list[Consumed], figure: Callable[[Consumed], float]) -> float:
    return statistics.median(figure(d) for d in runs)


def _ratio(r: Result, mock: Result) -> str:
    return f"{r.msgs_per_s / mock.msgs_per_s:>5.2f}x" if mock.msgs_per_s else "  n/a "


if __name__ == "__main__":
    main()
