"""Exactly against Apache Kafka 4.4, one node each, the same client processes, side by side in one
run: ratios (Exactly / Kafka) printed, and the figures written as JSON with `--json PATH`.

Both brokers run as processes of their own on loopback: Exactly as `python -m exactly broker`
(`EmbeddedBroker`), Kafka as `kafka.Kafka` in one KRaft JVM (`ApacheKafka`, broker and controller
in one process, `-Xmx1g -Xms1g` as kafka-server-start.sh sets them; `--kafka-heap`). Every
figure is taken on both brokers in turn (which goes first alternates from one workload to the
next), both running, so load from elsewhere on a shared machine falls on both alike as far as it
can.

Durability is compared pairwise:

- `os`: Exactly with `log.flush.policy=os` (appends left in the page cache) against Kafka's
  defaults (the same: `log.flush.interval.messages` and `log.flush.interval.ms` are unbounded, and
  the page cache's writeback makes data durable).
- `fsync`: Exactly with `log.flush.policy=fsync` (acks=all is answered once the append is fsynced,
  appends fsynced together: group commit) against Kafka with `log.flush.interval.messages=1`.
  What Kafka does then: `UnifiedLog.append` ends with `if (localLog.unflushedMessages() >=
  config.flushInterval) flush(false)`, in the request handler thread under the partition's log
  lock, before the produce is answered (on one node with acks=all the answer is due as soon as the
  append returns): every append (every batch of every partition, and every append to
  `__transaction_state`, whose topic takes the broker's default too) is fsynced with
  `FileChannel.force` (the segment and its indexes) before acks=all is answered, one partition
  after another, with no grouping across requests.

Workloads (`--only` runs one of them):

1. `produce`: idempotent acks=all producers (librdkafka, `--producers` processes, each a share,
   bench/measure.py `produce_in_processes`) then consumers reading everything back (`--consumers`
   tuned processes, `consume_in_processes`, with bench/run.py's fetch sizes for 100 B records),
   100 B and 1 KiB records, into a topic of `PARTITIONS` partitions.
2. `transactions`: sequential 1-record transactions from one producer (transactions per second,
   bench/transactions.py `tiny_transactions`) and a 1 KiB stream committed every 100 ms (records
   per second, bench/transactions.py `stream`).
3. For each of those, the broker's CPU seconds per GB moved (utime + stime from /proc/<pid>/stat:
   the JVM's, all its threads, and Exactly's broker process), its RSS (peak over the workload,
   sampled every 50 ms, and at its end) and the machine's busy cores over the timed window
   (/proc/stat, bench/measure.py `CoreSampler`; 2.00 on this machine means it was the limit).
4. `start`: seconds from the broker process's start (its start time in /proc/<pid>/stat) to the
   first answer to an ApiVersions request, polled over TCP (a connection accepted but not yet
   served is waited on, not abandoned). Kafka's first start comes after Kafka's StorageTool has
   formatted its directory, in a JVM of its own, which is not counted. Every fresh broker of the
   `os` pair and of `recovery` in the run is a sample (`--starts` at least, more brokers started for it if needed);
   the median counts.
   `recovery`: `--history N` committed 1-record transactions written through the protocol
   (bench/recovery.py `write_history`: 4 processes of transactional producers, 100 transactional
   ids, several in flight), then SIGKILL, then a start on the same directory timed from the new
   process's start: to the first ApiVersions answer, and to InitProducerId for one of the
   history's transactional ids plus one committed transaction (librdkafka, backoffs of at most
   100 ms, retried on retriable errors). `os` pair only.
5. `tools`: Kafka's own `org.apache.kafka.tools.ProducerPerformance` (kafka-producer-perf-test:
   Java producer, idempotent acks=all by default, `--throughput -1`) and `ConsumerPerformance`
   (kafka-consumer-perf-test, reading it back in a group) against both, their summary lines
   parsed. `os` pair only.

Each throughput figure is one run (`--repeat N` takes the best of N); the start figure is the
median of the fresh starts. On a shared 2-core machine they are noisy; CPU per GB is the figure
load distorts least.

The history's rate, measured first (`--only recovery --history 20000`, 2 cores shared with
other test runs): Exactly 538 transactions/s, Kafka 268/s in all (nothing for its first 20 s,
while `__transaction_state` is created and 100 producers get their ids; 400-600/s after); in the
full runs of 2026-11-29, 586-1,074/s into Exactly and 400-604/s into Kafka. The
default `--history` is therefore 50,000 (1-4 minutes of writing); the 1M run of the target,
`--only recovery --history 1000000`, is opt-in: at those rates 15 to 30 minutes of writing into
Exactly and 30 to 45 into Kafka, about an hour in all on this machine.

What bounds Kafka's restart after kill -9 on one combined node: the controller, replaying its
metadata log, still holds the killed process's broker registration, unfenced, and answers the
new incarnation's BrokerRegistration with DUPLICATE_BROKER_REGISTRATION until that session
times out (`broker.session.timeout.ms`, 9 s); the broker serves only after it registers
(seen in its log).

What bounds Kafka's 1-record transactions with librdkafka: librdkafka speaks transaction version 1
(AddPartitionsToTxn v0); the AddPartitionsToTxn it sends right after EndTxn is answered
CONCURRENT_TRANSACTIONS while Kafka still writes the markers of the transaction before, and
librdkafka retries it about 20 ms later (seen with `debug=protocol`): about 30 ms per
transaction. Kafka's own Java producer (transaction version 2: partitions join the transaction
with the Produce, KIP-890) did about 60 transactions/s in ProducerPerformance with
`--transaction-duration-ms 1`, at most twice librdkafka's rate: Kafka completing a transaction
before the next can start bounds both, not the client alone.

    .venv/bin/python bench/vs_kafka.py --quick      # about 2 minutes (5 on a loaded machine)
    .venv/bin/python bench/vs_kafka.py [--only produce|transactions|start|recovery|tools]
        [--history N] [--starts N] [--repeat N] [--json PATH]
    .venv/bin/python bench/vs_kafka.py --only recovery --history 1000000   # the 1M history
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import (
    CLOCK_TICKS,
    TUNED_CONSUMER,
    CoreSampler,
    consume_in_processes,
    cpu_seconds,
    measure,
    produce_in_processes,
)
from recovery import PARTITIONS as HISTORY_PARTITIONS
from recovery import TXN_TOPIC, txn_id, write_history
from run import SMALL_RECORDS_FETCH, RssSampler, _rss_mib
from tests.rigs.kafka import ApacheKafka
from transactions import stream, tiny_transactions

from exactly.testing import EmbeddedBroker

PARTITIONS = 4
WORKLOADS = ("produce", "transactions", "start", "recovery", "tools")
EXACTLY_SETTINGS = {"os": {"log.flush.policy": "os"}, "fsync": {"log.flush.policy": "fsync"}}
KAFKA_SETTINGS: dict[str, dict[str, str]] = {
    "os": {}, "fsync": {"log.flush.interval.messages": "1"}}
KAFKA_DURABILITY = {"os": "page cache", "fsync": "flush.messages=1"}
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
# "100000 records sent, 51150.9 records/sec (49.95 MB/sec), 480.31 ms avg latency, 892.00 ms max
# latency, 503 ms 50th, 847 ms 95th, 881 ms 99th, 891 ms 99.9th."
PRODUCER_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency"
    r"(?:, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th)?")
# The serving client after a restart: the same for both brokers, with short backoffs so that it
# asks again soon after the broker can answer (librdkafka's reconnect backoff grows to 10 s).
SHORT_BACKOFFS = {"reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 100,
                  "retry.backoff.ms": 10, "retry.backoff.max.ms": 100, "log_level": 2}
CORES = CoreSampler()


def say(text: str) -> None:
    """Progress on stderr (stdout holds the figures)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- timing a start ---------------------------------------------------------------------------


def boot_seconds() -> float:
    """Now, in seconds since boot: the clock of /proc/<pid>/stat's start times."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_started(pid: int) -> float:
    """When process `pid` started, in seconds since boot (/proc/<pid>/stat field 22, in clock
    ticks: 10 ms resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[19]) / CLOCK_TICKS


def api_versions_answered(host: str, port: int, deadline: float) -> bool:
    """One ApiVersions v0 request on a new connection; True once any answer to it came back
    (an error code in it is an answer too), False if the connection failed. A connection accepted
    but not yet served is waited on until `deadline` (time.monotonic())."""
    client_id = b"vs-kafka"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            s.sendall(struct.pack(">i", len(body)) + body)
            head = b""
            while len(head) < 8:  # size, correlation id
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
            return struct.unpack(">i", head[4:])[0] == 7
    except OSError:
        return False


def first_answer(address: Callable[[], tuple[str, int]], deadline: float,
                 failed: list[BaseException]) -> float:
    """Poll ApiVersions until answered; when, in seconds since boot."""
    while True:
        if failed:
            raise failed[0]
        if api_versions_answered(*address(), deadline):
            return boot_seconds()
        if time.monotonic() > deadline:
            raise RuntimeError(f"no ApiVersions answer from {address()}")
        time.sleep(0.002)


def one_transaction(bootstrap: str, transactional_id: str, deadline_s: float = 900.0) -> None:
    """InitProducerId for `transactional_id` and one committed 1-record transaction, retried on
    retriable errors (a coordinator still loading, markers still being written) until done."""
    deadline = time.monotonic() + deadline_s
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 0, **SHORT_BACKOFFS})
    while True:
        try:
            producer.init_transactions(max(1.0, deadline - time.monotonic()))
            break
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
    while True:
        producer.begin_transaction()
        producer.produce(TXN_TOPIC, b"served again")
        try:
            producer.commit_transaction(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if time.monotonic() > deadline or not (error.retriable()
                                                   or error.txn_requires_abort()):
                raise
            if error.txn_requires_abort():
                producer.abort_transaction(30)


# -- the two brokers --------------------------------------------------------------------------


@dataclass
class Start:
    answer_s: float  # process start -> first ApiVersions answer
    served_s: float | None = None  # process start -> `then` done (InitProducerId + a commit)
    cpu_s: float = 0.0  # the broker's CPU seconds by the end of what was timed


class Target:
    """One broker of the run: Exactly or Kafka with the durability of its pair, its RSS sampled
    while it runs."""

    kind = ""

    def __init__(self, durability: str) -> None:
        self.durability = durability
        self.rss: RssSampler | None = None
        self.starts: list[Start] = []

    @property
    def label(self) -> str:
        return f"{self.kind} {self.durability_text}"

    @property
    def durability_text(self) -> str:
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    def address(self) -> tuple[str, int]:
        raise NotImplementedError

    def current_pid(self) -> int | None:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        pid = self.current_pid()
        assert pid is not None
        return pid

    def spawn(self) -> None:
        """Start the process and return once the harness sees it serving."""
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def timed_start(self, then: Callable[[], None] | None = None) -> Start:
        """Start (or start again) and time it from the new process's start: to the first
        ApiVersions answer, and to `then` done (run as soon as that answer came)."""
        old = self.current_pid()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                self.spawn()
            except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
                failed.append(exc)

        harness = threading.Thread(target=run, daemon=True)
        harness.start()
        deadline = time.monotonic() + 1800
        while (pid := self.current_pid()) is None or pid == old:
            if failed:
                raise failed[0]
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: no process started")
            time.sleep(0.001)
        born = process_started(pid)
        start = Start(first_answer(self.address, deadline, failed) - born)
        if then is not None:
            then()
            start.served_s = boot_seconds() - born
        start.cpu_s = cpu_seconds(pid)
        harness.join()
        if failed:
            raise failed[0]
        self.starts.append(start)
        if self.rss is not None:
            self.rss.stop()
        self.rss = RssSampler(pid)
        self.rss.start()
        return start

    def window(self) -> None:
        """A new workload begins: its RSS peak counts from here."""
        assert self.rss is not None
        self.rss.peak = _rss_mib(self.pid)

    def rss_figures(self) -> tuple[float, float]:
        """(peak RSS since window(), RSS now), MiB."""
        assert self.rss is not None
        now = _rss_mib(self.pid)
        return max(self.rss.peak, now), now

    def _stop_sampler(self) -> None:
        if self.rss is not None:
            self.rss.stop()
            self.rss = None


class ExactlyTarget(Target):
    kind = "exactly"

    def __init__(self, durability: str) -> None:
        super().__init__(durability)
        self.broker = EmbeddedBroker(settings=EXACTLY_SETTINGS[durability], port=_free_port(),
                                     startup_timeout=1800)

    @property
    def durability_text(self) -> str:
        return self.durability

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def address(self) -> tuple[str, int]:
        return self.broker.host, self.broker.port

    def current_pid(self) -> int | None:
        return self.broker.process.pid if self.broker.process is not None else None

    def spawn(self) -> None:
        self.broker.start()

    def kill(self) -> None:
        self._stop_sampler()
        self.broker.kill()

    def close(self) -> None:
        self._stop_sampler()
        self.broker.close()


class KafkaTarget(Target):
    kind = "kafka"

    def __init__(self, durability: str, heap: str) -> None:
        super().__init__(durability)
        self.kafka = ApacheKafka(settings=KAFKA_SETTINGS[durability], heap=heap,
                                 startup_timeout=1800)

    @property
    def durability_text(self) -> str:
        return KAFKA_DURABILITY[self.durability]

    @property
    def bootstrap(self) -> str:
        return self.kafka.address(1)

    def address(self) -> tuple[str, int]:
        return self.kafka.host, self.kafka.ports[1]  # read again: a first start may move it

    def current_pid(self) -> int | None:
        try:
            return self.kafka.pid(1)
        except KeyError:
            return None

    def spawn(self) -> None:
        self.kafka.start(1)

    def kill(self) -> None:
        self._stop_sampler()
        self.kafka.kill(1)

    def close(self) -> None:
        self._stop_sampler()
        self.kafka.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make(kind: str, durability: str, args: argparse.Namespace) -> Target:
    return (ExactlyTarget(durability) if kind == "exactly"
            else KafkaTarget(durability, args.kafka_heap))


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)


# -- figures ----------------------------------------------------------------------------------


@dataclass
class Figure:
    value: float  # in the row's unit
    cpu_s_per_gb: float | None = None  # the broker's CPU seconds per GB moved
    rss_peak_mib: float | None = None
    rss_end_mib: float | None = None
    cores_busy: float | None = None  # the machine's, over the timed window
    cores_iowait: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    workload: str
    durability: str  # the pair: "os" or "fsync"
    unit: str
    higher_is_better: bool
    exactly: Figure
    kafka: Figure

    @property
    def ratio(self) -> float | None:
        return self.exactly.value / self.kafka.value if self.kafka.value else None


def _cores(started: float, seconds: float) -> tuple[float, float]:
    return CORES.cores(started, started + seconds)


def _figure(t: Target, value: float, cpu_per_gb: float | None, started: float, seconds: float,
            **detail: Any) -> Figure:
    peak, end = t.rss_figures()
    busy, iowait = _cores(started, seconds)
    return Figure(value, cpu_per_gb, peak, end, busy, iowait, detail)


def both(pair: tuple[Target, Target], turn: int,
         work: Callable[[Target], Any]) -> dict[str, Any]:
    """`work` on each broker of the pair, which goes first alternating with `turn`."""
    order = pair if turn % 2 == 0 else pair[::-1]
    out = {}
    for t in order:
        say(f"  {t.label}")
        t.window()
        out[t.kind] = work(t)
    return out


def best_of(repeat: int, work: Callable[[], Any], key: Callable[[Any], float]) -> Any:
    return max((work() for _ in range(repeat)), key=key)


# -- workloads --------------------------------------------------------------------------------


def produce_consume(t: Target, size: int, count: int, args: argparse.Namespace,
                    n: list[int]) -> tuple[Figure, Figure]:
    n[0] += 1
    topic = f"pc-{size}-{n[0]}"
    create_topic(t.bootstrap, topic)
    conf = {"bootstrap.servers": t.bootstrap}
    t.window()
    done = produce_in_processes(conf, [topic], size, count, processes=args.producers,
                                broker_pid=t.pid)
    produced = _figure(t, count / done.seconds, done.cpu_per_gb, done.started, done.seconds,
                       mb_per_s=count * size / done.seconds / 1e6,
                       producers_cpu_us_per_record=done.client_cpu_per_gb * size / 1e3)
    t.window()
    tuning = {**TUNED_CONSUMER, **(SMALL_RECORDS_FETCH if size <= 100 else {})}
    expected = sum(done.placed.values())
    read = consume_in_processes(conf, dict(done.placed), processes=args.consumers,
                                broker_pid=t.pid, tuning=tuning)
    if read.records < expected:
        raise RuntimeError(f"{t.label}: consumed {read.records} of {expected} records")
    consumed = _figure(t, read.records / read.seconds, read.cpu_per_gb, read.started,
                       read.seconds, mb_per_s=read.bytes / read.seconds / 1e6,
                       consumers=read.per_fetch())
    return produced, consumed


def tiny(t: Target, seconds: float) -> Figure:
    """Sequential 1-record (100 B) transactions from one producer."""
    started = time.monotonic()
    tps, cpu_us = tiny_transactions(t.bootstrap, "tiny", seconds, t.pid)
    # 100 B per transaction: CPU s per GB = CPU us per transaction * 1e-6 * 1e9 / 100
    return _figure(t, tps, cpu_us * 10, started, time.monotonic() - started,
                   broker_cpu_us_per_txn=cpu_us)


def txn_stream(t: Target, count: int) -> Figure:
    """1 KiB records, a commit every 100 ms."""
    topic = "stream"
    rate = [0.0]

    def work() -> int:
        rate[0] = stream(t.bootstrap, topic, count, txn_ms=100)
        return count * 1024

    started = time.monotonic()
    _mbs, wall, cpu = measure(t.pid, work)
    return _figure(t, rate[0], cpu, started, wall, mb_per_s=rate[0] * 1024 / 1e6)


def warm_transactions(t: Target) -> None:
    """A first transaction, untimed: Kafka creates `__transaction_state` (50 partitions) at the
    first FindCoordinator for a transaction."""
    for topic in ("tiny", "stream"):
        create_topic(t.bootstrap, topic)
    producer = Producer({"bootstrap.servers": t.bootstrap, "transactional.id": "vs-kafka-warm",
                         "log_level": 2})
    producer.init_transactions(120)
    producer.begin_transaction()
    producer.produce("tiny", b"warm-up")
    producer.commit_transaction(120)


def perf_tools(t: Target, kafka: ApacheKafka, size: int, count: int) -> tuple[Figure, Figure]:
    """Kafka's kafka-producer-perf-test then kafka-consumer-perf-test against `t`."""
    topic = f"perf-{size}"
    create_topic(t.bootstrap, topic)
    t.window()
    before, started = cpu_seconds(t.pid), time.monotonic()
    done = kafka.tool(PRODUCER_PERF, "--bootstrap-server", t.bootstrap, "--topic", topic,
                      "--num-records", str(count), "--record-size", str(size),
                      "--throughput", "-1", "--producer-props", "acks=all", timeout=1800)
    seconds = time.monotonic() - started
    summary = [m for m in PRODUCER_SUMMARY.finditer(done.stdout)]
    if done.returncode != 0 or not summary:
        raise RuntimeError(f"{t.label}: ProducerPerformance failed (exit {done.returncode})\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    last = summary[-1]
    cpu = (cpu_seconds(t.pid) - before) / (count * size / 1e9)
    produced = _figure(t, float(last["rate"]), cpu, started, seconds,
                       mb_per_s=float(last["mb"]), avg_latency_ms=float(last["avg"]),
                       max_latency_ms=float(last["max"]),
                       p99_latency_ms=float(last["p99"]) if last["p99"] else None,
                       summary=last.group(0))
    t.window()
    before, started = cpu_seconds(t.pid), time.monotonic()
    done = kafka.tool(CONSUMER_PERF, "--bootstrap-server", t.bootstrap, "--topic", topic,
                      "--num-records", str(count), "--timeout", "60000", timeout=1800)
    seconds = time.monotonic() - started
    stats = _consumer_stats(done.stdout)
    if done.returncode != 0 or stats is None:
        raise RuntimeError(f"{t.label}: ConsumerPerformance failed (exit {done.returncode})\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    moved = stats["data.consumed.in.nMsg"] * size
    cpu = (cpu_seconds(t.pid) - before) / (max(1.0, moved) / 1e9)
    consumed = _figure(t, stats["fetch.nMsg.sec"], cpu, started, seconds,
                       mb_per_s=stats["fetch.MB.sec"] * 2**20 / 1e6,
                       records=stats["data.consumed.in.nMsg"],
                       rebalance_ms=stats["rebalance.time.ms"], fetch_ms=stats["fetch.time.ms"],
                       with_rebalance_records_per_s=stats["nMsg.sec"])
    return produced, consumed


def _consumer_stats(stdout: str) -> dict[str, float] | None:
    """ConsumerPerformance's summary: a header line, then one line of values (comma-separated;
    the two times first)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            names = [n.strip() for n in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            if len(values) != len(names):
                return None
            return {n: float(v) for n, v in zip(names, values) if n not in ("start.time",
                                                                           "end.time")}
    return None


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Sizes:
    counts: dict[int, int]  # produce/consume: records per record size
    tiny_s: float
    stream_records: int
    tool_records: int
    tool_size: int = 1024


def sizes(args: argparse.Namespace) -> Sizes:
    s = args.scale
    if args.quick:
        return Sizes({100: int(50_000 * s), 1024: int(10_000 * s)}, max(1.0, 2 * s),
                     int(5_000 * s), int(10_000 * s))
    return Sizes({100: int(1_000_000 * s), 1024: int(200_000 * s)}, max(1.0, 10 * s),
                 int(200_000 * s), int(300_000 * s))


def run_pair(durability: str, args: argparse.Namespace, rows: list[Row],
             fresh: dict[str, list[Start]]) -> None:
    """Every workload of one durability pair, both brokers up, alternating."""
    size = sizes(args)
    pair: tuple[Target, Target] = (make("exactly", durability, args),
                                   make("kafka", durability, args))
    try:
        for t in pair:
            say(f"starting {t.label}")
            start = t.timed_start()
            if durability == "os":
                fresh[t.kind].append(start)
        turn = 0
        n = [0]
        if not args.quick and any(_wanted(args, w) for w in ("produce", "transactions", "tools")):
            say(f"{durability}: warming up (untimed): {size.counts[100] // 5:,} records of 100 B")
            for t in pair:  # the JVM's JIT compiler, both brokers' caches
                produce_consume(t, 100, size.counts[100] // 5, args, n)
        if _wanted(args, "produce"):
            for record_size, count in size.counts.items():
                say(f"{durability}: produce and consume {count:,} records of {record_size} B")
                got = both(pair, turn, lambda t, rs=record_size, c=count: best_pc(
                    t, rs, c, args, n))
                turn += 1
                name = "100 B" if record_size == 100 else "1 KiB"
                rows.append(Row(f"produce {name}", durability, "records/s", True,
                                got["exactly"][0], got["kafka"][0]))
                rows.append(Row(f"consume {name}", durability, "records/s", True,
                                got["exactly"][1], got["kafka"][1]))
                _print_row(rows[-2])
                _print_row(rows[-1])
        if _wanted(args, "transactions"):
            for t in pair:
                warm_transactions(t)
            say(f"{durability}: 1-record transactions for {size.tiny_s:g} s")
            got = both(pair, turn, lambda t: best_of(
                args.repeat, lambda: tiny(t, size.tiny_s), lambda f: f.value))
            turn += 1
            rows.append(Row("1-record transactions", durability, "txns/s", True,
                            got["exactly"], got["kafka"]))
            _print_row(rows[-1])
            say(f"{durability}: {size.stream_records:,} 1 KiB records in 100 ms transactions")
            got = both(pair, turn, lambda t: best_of(
                args.repeat, lambda: txn_stream(t, size.stream_records), lambda f: f.value))
            turn += 1
            rows.append(Row("100 ms transactions (1 KiB)", durability, "records/s", True,
                            got["exactly"], got["kafka"]))
            _print_row(rows[-1])
        if _wanted(args, "tools") and durability == "os":
            kafka = pair[1].kafka  # type: ignore[attr-defined]
            say(f"{durability}: ProducerPerformance and ConsumerPerformance, "
                f"{size.tool_records:,} records of {size.tool_size} B")
            got = both(pair, turn, lambda t: perf_tools(t, kafka, size.tool_size,
                                                        size.tool_records))
            turn += 1
            rows.append(Row("kafka-producer-perf-test 1 KiB", durability, "records/s", True,
                            got["exactly"][0], got["kafka"][0]))
            rows.append(Row("kafka-consumer-perf-test 1 KiB", durability, "records/s", True,
                            got["exactly"][1], got["kafka"][1]))
            _print_row(rows[-2])
            _print_row(rows[-1])
    finally:
        for t in pair:
            t.close()


def best_pc(t: Target, size: int, count: int, args: argparse.Namespace,
            n: list[int]) -> tuple[Figure, Figure]:
    runs = [produce_consume(t, size, count, args, n) for _ in range(args.repeat)]
    return (max((r[0] for r in runs), key=lambda f: f.value),
            max((r[1] for r in runs), key=lambda f: f.value))


def run_recovery(args: argparse.Namespace, rows: list[Row],
                 fresh: dict[str, list[Start]]) -> dict[str, Any]:
    """History, SIGKILL, timed start: Exactly (os) then Kafka (page cache), one at a time."""
    history: dict[str, Any] = {}
    figures: dict[str, Figure] = {}
    answers: dict[str, Figure] = {}
    for kind in ("exactly", "kafka"):
        t = make(kind, "os", args)
        try:
            say(f"recovery: starting {t.label}")
            fresh[kind].append(t.timed_start())
            create_topic(t.bootstrap, TXN_TOPIC, HISTORY_PARTITIONS)
            say(f"recovery: writing {args.history:,} 1-record transactions into {t.label}")
            t.window()
            written = write_history(
                SimpleNamespace(process=SimpleNamespace(pid=t.pid), bootstrap=t.bootstrap),
                argparse.Namespace(txns=args.history, ids=min(100, max(4, args.history // 10)),
                                   producers=4, threads=5,
                                   offsets_every=0, data_mb=0, keys=1))
            peak, end = t.rss_figures()
            history[kind] = {"transactions": written.txns, "seconds": written.txn_seconds,
                             "per_s": written.txns / written.txn_seconds,
                             "broker_cpu_s": written.broker_cpu_s,
                             "broker_cpu_us_per_txn": written.broker_cpu_s / written.txns * 1e6,
                             "rss_peak_mib": peak, "rss_end_mib": end}
            say(f"recovery: {t.label}: {written.txns / written.txn_seconds:,.0f} transactions/s; "
                "kill -9 and start again")
            t.kill()
            bootstrap = t.bootstrap
            start = t.timed_start(then=lambda b=bootstrap: one_transaction(b, txn_id(0)))
            assert start.served_s is not None
            peak, end = t.rss_figures()
            figures[kind] = Figure(start.served_s, rss_peak_mib=peak, rss_end_mib=end,
                                   detail={"first_answer_s": start.answer_s,
                                           "broker_cpu_s": start.cpu_s,
                                           "history": args.history})
            answers[kind] = Figure(start.answer_s, detail={"broker_cpu_s": start.cpu_s})
        finally:
            t.close()
    rows.append(Row(f"serve again after kill -9, {args.history:,} txns of history", "os", "s",
                    False, figures["exactly"], figures["kafka"]))
    rows.append(Row(f"first answer after kill -9, {args.history:,} txns of history", "os", "s",
                    False, answers["exactly"], answers["kafka"]))
    _print_row(rows[-2])
    _print_row(rows[-1])
    return history


def run_starts(args: argparse.Namespace, rows: list[Row], fresh: dict[str, list[Start]]) -> None:
    """Fresh starts of the os pair's brokers: as many more as `--starts` asks, alternating."""
    while min(len(fresh["exactly"]), len(fresh["kafka"])) < args.starts:
        for kind in ("exactly", "kafka") if len(fresh["kafka"]) % 2 else ("kafka", "exactly"):
            if len(fresh[kind]) >= args.starts:
                continue
            t = make(kind, "os", args)
            try:
                say(f"start: a fresh {t.label} ({len(fresh[kind]) + 1} of {args.starts})")
                fresh[kind].append(t.timed_start())
            finally:
                t.close()
    med = {k: statistics.median(s.answer_s for s in fresh[k]) for k in fresh}
    rows.append(Row("start to first answer (fresh)", "os", "s", False,
                    Figure(med["exactly"], detail={"runs_s": [s.answer_s for s in
                                                              fresh["exactly"]]}),
                    Figure(med["kafka"], detail={"runs_s": [s.answer_s for s in
                                                            fresh["kafka"]]})))
    _print_row(rows[-1])


def _wanted(args: argparse.Namespace, workload: str) -> bool:
    return args.only in (None, workload)


# -- output -----------------------------------------------------------------------------------


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.2f}"


def _print_row(r: Row) -> None:
    ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "n/a"
    cells = []
    for f in (r.exactly, r.kafka):
        cpu = "-" if f.cpu_s_per_gb is None else f"{f.cpu_s_per_gb:.1f}"
        rss = "-" if f.rss_peak_mib is None else f"{f.rss_peak_mib:.0f}/{f.rss_end_mib:.0f}"
        cores = "-" if f.cores_busy is None else f"{f.cores_busy:.2f} ({f.cores_iowait:.2f})"
        cells.append(f"{_num(f.value, r.unit):>12} {cpu:>7} {rss:>9} {cores:>11}")
    print(f"{r.workload:<44} {r.durability:<5} {r.unit:<9} {cells[0]}   {cells[1]}   {ratio:>6}",
          flush=True)


def _header() -> None:
    side = f"{'value':>12} {'CPU s/GB':>7} {'RSS MiB':>9} {'cores(io)':>11}"
    print(f"{'workload':<44} {'pair':<5} {'unit':<9} {'Exactly':^41}   {'Kafka 4.4':^41}   "
          f"{'ratio':>6}")
    print(f"{'':<44} {'':<5} {'':<9} {side}   {side}   {'E/K':>6}", flush=True)


def targets(rows: list[Row]) -> dict[str, Any]:
    """The targets, each with whether this run met it."""
    out: dict[str, Any] = {}
    for name in ("produce", "consume", "1-record transactions"):
        for pair in ("os", "fsync"):
            got = [r.ratio for r in rows
                   if r.workload.startswith(name) and r.durability == pair and r.ratio]
            if got:
                out[f"{name} >= 1.0x Kafka ({pair})"] = {"ratios": got,
                                                         "met": min(got) >= 1.0}
    peaks = {k: [getattr(r, k).rss_peak_mib for r in rows if getattr(r, k).rss_peak_mib]
             for k in ("exactly", "kafka")}
    if peaks["exactly"] and peaks["kafka"]:
        ratio = max(peaks["exactly"]) / max(peaks["kafka"])
        out["broker RSS <= 0.1x Kafka's (peaks)"] = {
            "exactly_mib": max(peaks["exactly"]), "kafka_mib": max(peaks["kafka"]),
            "ratio": ratio, "met": ratio <= 0.1}
    for r in rows:
        if r.workload.startswith("start to first answer") and r.ratio is not None:
            out["start to first answer <= 0.2x Kafka's"] = {"ratio": r.ratio,
                                                           "met": r.ratio <= 0.2}
        if r.workload.startswith("serve again") and r.ratio is not None:
            out["serve again after kill -9 <= Kafka's"] = {
                "ratio": r.ratio, "met": r.ratio <= 1.0,
                "history": r.exactly.detail.get("history"),
                "note": "the target is for 1M transactions of history"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    parser.add_argument("--only", choices=WORKLOADS, help="one workload")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--history", type=int,
                        help="committed 1-record transactions before the kill -9 "
                             "(default 50,000; --quick 1,000)")
    parser.add_argument("--starts", type=int,
                        help="fresh starts timed per broker, at least (default 5; --quick 1)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each throughput figure; the best counts (default 1)")
    parser.add_argument("--producers", type=int, default=2, help="producer processes [2]")
    parser.add_argument("--consumers", type=int, default=2, help="consumer processes [2]")
    parser.add_argument("--durability", choices=("os", "fsync"), action="append",
                        help="the pairs to run produce and transactions with (repeatable; "
                             "default both)")
    parser.add_argument("--kafka-heap", default="1g", help="Kafka's -Xmx [1g]")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every record count and duration (tests: 0.1)")
    args = parser.parse_args()
    if args.history is None:
        args.history = 1_000 if args.quick else 50_000
    if args.starts is None:
        args.starts = 1 if args.quick else 5
    CORES.start()
    began = time.monotonic()
    rows: list[Row] = []
    fresh: dict[str, list[Start]] = {"exactly": [], "kafka": []}
    history: dict[str, Any] = {}
    print(f"Exactly against Apache Kafka 4.4, one node each; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.2f}; CPU: the broker's CPU seconds per GB moved; RSS: peak/end "
          f"MiB over the workload; cores: the machine's busy cores (in I/O wait); times: lower "
          f"is better", flush=True)
    load = os.getloadavg()
    _header()

    def dump() -> dict[str, Any]:
        """The figures so far, as JSON (written after every part, so a run that fails late
        keeps what it measured)."""
        met = targets(rows)
        figures = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "machine": {"cores": os.cpu_count(), "loadavg_at_start": load,
                        "loadavg_now": os.getloadavg()},
            "params": {k: v for k, v in vars(args).items() if k != "json"},
            "rows": [{**asdict(r), "ratio": r.ratio} for r in rows],
            "history": history,
            "fresh_starts": {k: [asdict(s) for s in v] for k, v in fresh.items()},
            "targets": met,
            "seconds": time.monotonic() - began,
        }
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
        return figures

    if args.only in (None, "produce", "transactions", "tools", "start"):
        for durability in args.durability or ("os", "fsync"):
            if args.only == "start" or (args.only == "tools" and durability == "fsync"):
                continue
            run_pair(durability, args, rows, fresh)
            dump()
    if _wanted(args, "recovery"):
        history.update(run_recovery(args, rows, fresh))
        dump()
    if _wanted(args, "start"):
        run_starts(args, rows, fresh)
    met = dump()["targets"]
    print()
    for kind, h in history.items():
        print(f"history into {kind}: {h['transactions']:,} transactions in "
              f"{h['seconds']:.1f} s ({h['per_s']:,.0f}/s, broker "
              f"{h['broker_cpu_us_per_txn']:.0f} CPU-us per transaction)")
    for name, t in met.items():
        figs = t["ratios"] if "ratios" in t else [t["ratio"]]
        print(f"target {name}: {'met' if t['met'] else 'NOT met'} "
              f"({', '.join(f'{x:.2f}x' for x in figs)})")
    print(f"run took {time.monotonic() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
