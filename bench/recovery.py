"""How long a broker takes to come back after a long history, side by side with a fresh start
(issue 13's benchmark), and what its log cleaner costs while it runs.

In one run, with confluent-kafka as the client and the broker as a process of its own
(`EmbeddedBroker`, `log.flush.policy=os` unless told otherwise, as the issue's measurement):

1. Fresh start: a broker on an empty data directory (the median of `--fresh-runs` starts):
   seconds from the process's start until a TCP connect succeeds ("listens") and until a
   transactional producer's `init_transactions()` succeeds.
2. History: `--txns` transactions of one record each over `--ids` transactional ids (every
   `--offsets-every`-th also commits a consumer offset through the transaction, as a
   consume-transform-produce application does, one group per id) and `--data-mb` of keyed 1 KiB
   records into a compacted topic (`--keys` keys, so most records are overwritten versions the
   cleaner can remove; `--data-segment-mb` segments, so they roll and become cleanable), written as
   fast as the broker takes it: `--producers` processes of transactional producers (each id a
   producer of its own, several per thread) and one idempotent producer with batching for the
   data, all at once. Progress goes to stderr; the write rates, the broker's CPU seconds and the
   sizes on disk of `__transaction_state`, `__consumer_offsets` and the two topics are printed.
3. Restarts: `kill -9` as soon as the history is written (the issue's case), then a clean stop
   (SIGTERM, waited for): seconds until the broker listens and until `init_transactions()`
   succeeds for one of the existing transactional ids, each next to the fresh start's figure
   (ratio and difference; the issue's target: within 2 s of a fresh start), and the broker's CPU
   seconds by then.
4. The log cleaner, if the broker has one (it accepts `log.cleaner.enable` and serves
   `exactly_log_cleaner_*` metrics on /metrics; otherwise this part says why it is skipped):
   `--dirty-mb` more overwrites of the compacted topic are written with the cleaner off, the data
   directory is copied, and two brokers run in turn on the two copies: one with the cleaner on (it
   cleans what was written) and one with it off, with the same latency probe (a producer sending
   `--probe-rate` records/s with acks=all) against each. Printed: the cleaner's throughput (bytes it
   read, from its metrics, per second of cleaning), the broker's CPU while it cleans against with
   the cleaner off (and the CPU of the broker's threads other than the event loop's), and the
   probe's produce latency p50/p99/max in both runs.

Figures go to stdout as a table; `--json PATH` writes them too. The default run (1M
transactions, 1 GiB) takes about a quarter of an hour on 2 cores, most of it writing the history;
the transactions' rate is printed, so a slow machine shows as such.

    .venv/bin/python bench/recovery.py                        # the issue's history
    .venv/bin/python bench/recovery.py --txns 20000 --data-mb 64   # a quick run

Flags (defaults in brackets):
    --txns N             transactions in the history [1,000,000]
    --ids N              transactional ids they are spread over [100]
    --offsets-every N    every Nth transaction also commits an offset; 0: none [10]
    --producers N        transactional producer processes [4]
    --threads N          threads per such process, taking turns with its producers [5]
    --data-mb N          MiB of keyed records in the compacted topic [1024]
    --keys N             distinct keys of those records [a tenth of the records]
    --data-segment-mb N  segment.bytes of that topic [an eighth of a partition's share]
    --policy os|fsync    log.flush.policy of every broker [os]
    --set KEY=VALUE      any other broker key for every broker of the run (repeatable)
    --fresh-runs N       fresh starts timed; the median counts [3]
    --dirty-mb N         MiB of overwrites for the cleaner section [--data-mb]
    --probe-rate R       records/s of the latency probe [200]
    --idle-s S           the cleaner is done after S s without progress [5]
    --cleaner-timeout S  longest wait for the cleaner [900]
    --no-cleaner         skip the cleaner section
    --work-dir DIR       where the data directories go [a temporary directory]
    --keep               keep the data directories (they are removed otherwise)
    --json PATH          also write the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.testing import EmbeddedBroker

TXN_TOPIC = "history-txn"
DATA_TOPIC = "history-data"
PROBE_TOPIC = "latency-probe"
INTERNAL_TOPICS = ("__transaction_state", "__consumer_offsets")
PARTITIONS = 4
TXN_VALUE = b"v" * 100
DATA_RECORD_BYTES = 1024
TXN_ID_PREFIX = "recovery-bench-"
TARGET_S = 2.0  # the target: a restart within 2 s of a fresh start
CLEANER_KEY = "log.cleaner.enable"
CLEANER_METRIC_PREFIX = "exactly_log_cleaner_"
METRICS_LINE = re.compile(r"Exactly metrics on (?P<url>http://\S+)")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.25  # how often the cleaner's metrics are read while it works
# librdkafka logs a line for every connection a stopped broker closes: noise on stderr here.
QUIET = {"log_level": 2}


def say(text: str) -> None:
    """Progress, on stderr (stdout holds the figures)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- the broker process: CPU, sizes, metrics --------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/<pid>/stat)."""
    return _stat_cpu(Path(f"/proc/{pid}/stat"))


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process, by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = _stat_cpu(task / "stat")
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return out


def _stat_cpu(path: Path) -> float:
    # Fields after the command name (which may hold spaces), from field 3 (state): utime is
    # field 14 and stime field 15 (proc(5)).
    fields = path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def other_threads_cpu(pid: int) -> float:
    """CPU seconds of the threads other than the main one (the event loop's): worker threads,
    the cleaner's among them."""
    return sum(s for tid, s in thread_cpu_seconds(pid).items() if tid != pid)


def topic_mib(data_dir: Path, topic: str) -> float:
    """MiB allocated on disk (as du counts) by every partition directory of `topic`."""
    total = 0
    for part in data_dir.glob(f"{topic}-*"):
        if not part.is_dir() or not part.name[len(topic) + 1:].isdigit():
            continue
        for f in part.iterdir():
            try:
                total += f.stat().st_blocks * 512
            except FileNotFoundError:  # a file swapped away meanwhile
                continue
    return total / 2**20


def sizes(data_dir: Path) -> dict[str, float]:
    return {t: topic_mib(data_dir, t) for t in (*INTERNAL_TOPICS, TXN_TOPIC, DATA_TOPIC)}


def metrics_url(broker: EmbeddedBroker) -> str | None:
    """The /metrics address the broker printed at its latest start."""
    for line in reversed(broker.stdout_lines):
        m = METRICS_LINE.search(line)
        if m:
            return m["url"]
    return None


def cleaner_samples(url: str) -> dict[str, float]:
    """Every `exactly_log_cleaner_*` sample of /metrics, summed over labels, by name."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(CLEANER_METRIC_PREFIX):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out


def _pick(samples: dict[str, float], *patterns: str) -> str | None:
    """The first metric name (counters' `_total` first) holding every part of a pattern."""
    names = sorted((n for n in samples if not n.endswith("_created")),
                   key=lambda n: (not n.endswith("_total"), n))
    for pattern in patterns:
        parts = pattern.split("&")
        for name in names:
            if all(p in name for p in parts):
                return name
    return None


def bytes_cleaned_metric(samples: dict[str, float]) -> str | None:
    """The cleaner's count of the bytes it went through (read), as Kafka's cleaner reports its
    throughput (`... MB of log processed ...`)."""
    return _pick(samples, "bytes&cleaned", "bytes&read", "read&bytes", "bytes")


def bytes_written_metric(samples: dict[str, float]) -> str | None:
    return _pick(samples, "bytes&written", "written&bytes")


# -- timing a start ---------------------------------------------------------------------------


@dataclass
class StartTimes:
    listen_s: float  # process start -> a TCP connect succeeds
    init_s: float  # process start -> init_transactions() returned
    cpu_s: float  # the broker's CPU seconds by then


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _first_connect(host: str, port: int, started: float, stop: threading.Event,
                   out: list[float]) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=0.2):
                out.append(time.perf_counter() - started)
                return
        except OSError:
            time.sleep(0.002)


def init_transactions(bootstrap: str, txn_id: str, deadline_s: float = 600.0) -> None:
    """What a user waits for: init_transactions() returning. librdkafka retries what the broker
    answers retriably (COORDINATOR_LOAD_IN_PROGRESS, ...) within its timeout; a retriable error
    past that is retried here, up to `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **QUIET})
    while True:
        try:
            producer.init_transactions(max(1.0, deadline - time.monotonic()))
            break
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
    producer.flush(10)


def timed_start(broker: EmbeddedBroker, txn_id: str) -> StartTimes:
    """Start `broker` (its port must be known: restarts ask for the same one) and time it."""
    stop, connected = threading.Event(), list[float]()
    started = time.perf_counter()
    prober = threading.Thread(target=_first_connect,
                              args=(broker.host, broker.port, started, stop, connected),
                              daemon=True)
    prober.start()
    broker.start()
    init_transactions(broker.bootstrap, txn_id)
    init_s = time.perf_counter() - started
    assert broker.process is not None
    cpu_s = cpu_seconds(broker.process.pid)
    prober.join(5)
    stop.set()
    if not connected:
        raise RuntimeError(f"no TCP connect to {broker.bootstrap} succeeded although "
                           "init_transactions() did: did the broker move to another port?")
    return StartTimes(connected[0], init_s, cpu_s)


def fresh_starts(settings: dict[str, str], runs: int, work: Path) -> list[StartTimes]:
    out = []
    for i in range(runs):
        data = work / f"fresh-{i}"
        broker = EmbeddedBroker(data, settings, port=free_port(), log_path=work / f"fresh-{i}.log")
        try:
            out.append(timed_start(broker, f"{TXN_ID_PREFIX}fresh-{i}"))
        finally:
            broker.close()
            shutil.rmtree(data, ignore_errors=True)
    return out


# -- writing the history ----------------------------------------------------------------------


def txn_id(i: int) -> str:
    return f"{TXN_ID_PREFIX}{i}"


def _txn_process(bootstrap: str, ids: list[int], quota: int, threads: int, offsets_every: int,
                 done: Synchronized, errors: Any) -> None:
    """One producer process: `quota` 1-record transactions over its `ids` (each a producer of
    its own), on `threads` threads that each take turns with their producers. A thread waiting
    on a commit releases the GIL, so the process keeps several transactions in flight."""
    from confluent_kafka import Consumer

    lock = threading.Lock()
    left = [quota]

    def take(n: int) -> int:
        with lock:
            got = min(n, left[0])
            left[0] -= got
            return got

    def run(mine: list[int]) -> None:
        try:
            producers = []
            for i in mine:
                p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id(i),
                              "linger.ms": 0, **QUIET})
                p.init_transactions(120)
                group = None
                if offsets_every:
                    # Only its group metadata is used (no subscription): offsets committed
                    # through the transaction, as a consume-transform-produce loop commits them.
                    group = Consumer({"bootstrap.servers": bootstrap,
                                      "group.id": f"{TXN_ID_PREFIX}group-{i}", **QUIET})
                producers.append((i, p, group))
            turn = 0
            while (n := take(100)):
                for _ in range(n):
                    i, p, group = producers[turn % len(producers)]
                    turn += 1
                    p.begin_transaction()
                    p.produce(TXN_TOPIC, TXN_VALUE, key=txn_id(i).encode())
                    if group is not None and turn % offsets_every == 0:
                        p.send_offsets_to_transaction(
                            [KafkaTopicPartition(TXN_TOPIC, i % PARTITIONS, turn)],
                            group.consumer_group_metadata(), 60)
                    p.commit_transaction(60)
                with done.get_lock():
                    done.value += n
            for _, p, group in producers:
                p.flush(30)
                if group is not None:
                    group.close()
        except KafkaException as exc:  # reported to the parent, which stops the run
            errors.put(f"transactional producer thread ({mine[:3]}...): {exc!r}")
            with lock:
                left[0] = 0

    share = [ids[k::threads] for k in range(threads) if ids[k::threads]]
    workers = [threading.Thread(target=run, args=(mine,)) for mine in share]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def produce_data(bootstrap: str, total_bytes: int, keys: int,
                 progress: Callable[[int], None]) -> None:
    """Keyed 1 KiB records into the compacted topic, idempotent, batched as a throughput user
    batches them (linger, large batches); keys in turn, so each pass over the keys overwrites
    every key once. `progress(bytes)` now and then."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 256 * 1024, **QUIET})
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and not failed:
            failed.append(str(err))

    payload = os.urandom(DATA_RECORD_BYTES)
    count = total_bytes // DATA_RECORD_BYTES
    for i in range(count):
        while True:
            try:
                producer.produce(DATA_TOPIC, payload, key=b"key-%09d" % (i % keys),
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 9_999:
            producer.poll(0)
            progress((i + 1) * DATA_RECORD_BYTES)
            if failed:
                break
    left = producer.flush(600)
    if left or failed:
        raise RuntimeError(f"data producer: {left} records undelivered, first error "
                           f"{failed[:1]}")
    progress(count * DATA_RECORD_BYTES)


def _data_process(bootstrap: str, total_bytes: int, keys: int, done: Synchronized,
                  errors: Any) -> None:
    """produce_data in a process of its own, reporting to the parent."""
    def progress(n: int) -> None:
        with done.get_lock():
            done.value = n

    try:
        produce_data(bootstrap, total_bytes, keys, progress)
    except (RuntimeError, KafkaException) as exc:
        errors.put(str(exc))


@dataclass
class History:
    txns: int
    txn_seconds: float
    data_mib: float
    data_seconds: float
    seconds: float
    broker_cpu_s: float


def create_topics(bootstrap: str, data_segment_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    topics = [NewTopic(TXN_TOPIC, PARTITIONS, 1),
              NewTopic(DATA_TOPIC, PARTITIONS, 1,
                       config={"cleanup.policy": "compact",
                               "segment.bytes": str(data_segment_bytes)}),
              NewTopic(PROBE_TOPIC, 1, 1)]
    for future in admin.create_topics(topics).values():
        future.result(timeout=60)


def write_history(broker: EmbeddedBroker, args: argparse.Namespace) -> History:
    """Every writer at once, as fast as the broker takes it; progress on stderr."""
    assert broker.process is not None
    ctx = mp.get_context("spawn")  # this process holds librdkafka threads: no fork
    errors = ctx.Queue()
    ids = list(range(args.ids))
    procs: list[tuple[str, Any, Synchronized]] = []
    for k in range(args.producers):
        mine = ids[k::args.producers]
        if not mine:
            continue
        quota = args.txns // args.producers + (1 if k < args.txns % args.producers else 0)
        done = ctx.Value("q", 0)
        procs.append(("txn", ctx.Process(
            target=_txn_process,
            args=(broker.bootstrap, mine, quota, args.threads, args.offsets_every, done, errors)),
            done))
    data_bytes = args.data_mb * 2**20
    if data_bytes:
        done = ctx.Value("q", 0)
        procs.append(("data", ctx.Process(
            target=_data_process, args=(broker.bootstrap, data_bytes, args.keys, done, errors)),
            done))
    cpu_before = cpu_seconds(broker.process.pid)
    started = time.perf_counter()
    finished: dict[str, float] = {}
    for _, proc, _ in procs:
        proc.start()
    last_report, last_txns = started, 0
    while any(p.is_alive() for _, p, _ in procs):
        time.sleep(0.5)
        if not errors.empty():
            for _, p, _ in procs:
                p.terminate()
            raise RuntimeError(f"writing the history failed: {errors.get()}")
        now = time.perf_counter()
        for kind in ("txn", "data"):
            group = [p for k, p, _ in procs if k == kind]
            if group and kind not in finished and not any(p.is_alive() for p in group):
                finished[kind] = now - started
        if now - last_report >= 10:
            txns = sum(d.value for k, _, d in procs if k == "txn")
            data = sum(d.value for k, _, d in procs if k == "data") / 2**20
            cpu = cpu_seconds(broker.process.pid) - cpu_before
            say(f"history: {txns:,}/{args.txns:,} transactions "
                f"({(txns - last_txns) / (now - last_report):,.0f}/s lately, "
                f"{txns / (now - started):,.0f}/s in all), {data:,.0f}/{args.data_mb:,} MiB of "
                f"data, {now - started:,.0f} s, broker CPU {cpu:,.0f} s")
            last_report, last_txns = now, txns
    for _, p, _ in procs:
        p.join()
    if not errors.empty():
        raise RuntimeError(f"writing the history failed: {errors.get()}")
    bad = [p.exitcode for _, p, _ in procs if p.exitcode]
    if bad:
        raise RuntimeError(f"a producer process exited with {bad}: see its traceback above")
    seconds = time.perf_counter() - started
    txns = sum(d.value for k, _, d in procs if k == "txn")
    if txns != args.txns:
        raise RuntimeError(f"{txns} transactions written, {args.txns} asked for")
    return History(txns, finished.get("txn", seconds), data_bytes / 2**20,
                   finished.get("data", 0.0), seconds,
                   cpu_seconds(broker.process.pid) - cpu_before)


# -- the cleaner: a latency probe and two runs ------------------------------------------------


class LatencyProbe(threading.Thread):
    """A producer sending `rate` records/s (acks=all, no linger), each record's produce ->
    delivery time kept with the time it was sent."""

    def __init__(self, bootstrap: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 0, **QUIET})
        self.interval = 1.0 / rate
        self.samples: list[tuple[float, float]] = []  # (sent at, seconds to delivery)
        self.failed: list[str] = []
        self._stopping = threading.Event()

    def warm_up(self) -> None:
        """One record delivered: connections made and the producer id fetched, untimed."""
        self.producer.produce(PROBE_TOPIC, b"warm-up")
        if self.producer.flush(120):
            raise RuntimeError("the latency probe's first record was not delivered in 120 s")

    def run(self) -> None:
        next_send = time.perf_counter()
        while not self._stopping.is_set():
            sent = time.perf_counter()

            def delivered(err: Any, _msg: Any, sent: float = sent) -> None:
                if err is not None:
                    self.failed.append(str(err))
                else:
                    self.samples.append((sent, time.perf_counter() - sent))

            self.producer.produce(PROBE_TOPIC, b"p" * 100, on_delivery=delivered)
            next_send += self.interval
            # Serve delivery reports while waiting for the next send, so none waits for a sleep.
            while (wait := next_send - time.perf_counter()) > 0:
                self.producer.poll(wait)
        self.producer.flush(60)

    def stop(self) -> None:
        self._stopping.set()
        self.join()
        if self.failed:
            raise RuntimeError(f"the latency probe's records failed: {self.failed[:3]}")

    def latencies(self, start: float, end: float) -> list[float]:
        return sorted(s for at, s in self.samples if start <= at < end)


@dataclass
class Latency:
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def latency_of(values: list[float]) -> Latency:
    if not values:
        return Latency(0, 0.0, 0.0, 0.0)
    return Latency(len(values), 1000 * values[len(values) // 2],
                   1000 * values[min(len(values) - 1, int(len(values) * 0.99))],
                   1000 * values[-1])


@dataclass
class CleanerRun:
    seconds: float  # the window measured
    broker_cpu_s: float
    other_threads_cpu_s: float
    latency: Latency
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    cleaning_seconds: float | None = None  # the cleans' own durations added up, if all seen


@dataclass
class CleanerFigures:
    skipped: str | None = None
    metrics: dict[str, str | None] = field(default_factory=dict)
    dirty_mib: float = 0.0
    data_mib_before: float = 0.0  # the compacted topic on disk before the cleaner ran
    data_mib_after: float = 0.0  # and after
    on: CleanerRun | None = None
    off: CleanerRun | None = None


def cleaner_unsupported(samples: dict[str, float] | None) -> str | None:
    """Why the cleaner section cannot run, or None if it can."""
    from exactly.server.config import BrokerConfig, ConfigError

    try:
        BrokerConfig.from_sources(None, {CLEANER_KEY: "true"})
    except ConfigError as exc:
        return f"the broker refuses {CLEANER_KEY} ({exc}): it has no log cleaner yet"
    if samples is None:
        return "the broker serves no /metrics address"
    if not samples:
        return (f"the broker accepts {CLEANER_KEY} but serves no {CLEANER_METRIC_PREFIX}* "
                "metrics: its cleaner is not wired in yet")
    if bytes_cleaned_metric(samples) is None:
        return f"no metric of bytes cleaned among {sorted(samples)}"
    return None


def _broker_with(data_dir: Path, settings: dict[str, str], log_path: Path,
                 **changes: str) -> EmbeddedBroker:
    return EmbeddedBroker(data_dir, {**settings, **changes}, log_path=log_path,
                          startup_timeout=3600)


def measure_cleaner(data_dir: Path, settings: dict[str, str], args: argparse.Namespace,
                    work: Path) -> CleanerFigures:
    """Dirty data written with the cleaner off, the directory copied, then a run with the cleaner
    on (measured until it is done) and one with it off (for as long), the probe against each."""
    figures = CleanerFigures(dirty_mib=float(args.dirty_mb))
    say(f"cleaner: writing {args.dirty_mb} MiB of overwrites with the cleaner off")
    broker = _broker_with(data_dir, settings, work / "dirty.log", **{CLEANER_KEY: "false"})
    with broker:
        produce_data(broker.bootstrap, args.dirty_mb * 2**20, args.keys, lambda _: None)
    figures.data_mib_before = topic_mib(data_dir, DATA_TOPIC)
    copy = work / "cleaner-off-copy"
    shutil.rmtree(copy, ignore_errors=True)
    say(f"cleaner: copying the data directory ({_dir_mib(data_dir):,.0f} MiB)")
    shutil.copytree(data_dir, copy)
    try:
        say("cleaner: a broker with the cleaner on, until it has cleaned what it can")
        with _broker_with(data_dir, settings, work / "cleaner-on.log") as broker:
            figures.on, names = _cleaner_on_run(broker, args)
            figures.metrics = names
        figures.data_mib_after = topic_mib(data_dir, DATA_TOPIC)
        say(f"cleaner: a broker with the cleaner off on the copy, for {figures.on.seconds:.1f} s")
        with _broker_with(copy, settings, work / "cleaner-off.log",
                          **{CLEANER_KEY: "false"}) as broker:
            figures.off = _cleaner_off_run(broker, args, figures.on.seconds)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return figures


def _dir_mib(path: Path) -> float:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / 2**20


@contextmanager
def _probing(broker: EmbeddedBroker, rate: float) -> Iterator[LatencyProbe]:
    probe = LatencyProbe(broker.bootstrap, rate)
    probe.warm_up()
    probe.start()
    try:
        yield probe
    finally:
        probe.stop()


def _cleaner_on_run(broker: EmbeddedBroker,
                    args: argparse.Namespace) -> tuple[CleanerRun, dict[str, str | None]]:
    """From the broker's start until the cleaner is idle: its counters still and the broker's
    threads other than the event loop's (the cleaner's worker) using no CPU, for `--idle-s`
    seconds (or `--cleaner-timeout` s at most). The window ends at the last sign of work."""
    assert broker.process is not None
    pid = broker.process.pid
    url = metrics_url(broker)
    assert url is not None
    start = time.perf_counter()
    first = cleaner_samples(url)
    names = {"bytes cleaned": bytes_cleaned_metric(first),
             "bytes written": bytes_written_metric(first),
             "cleans": _pick(first, "runs"), "last clean's duration": _pick(first, "duration")}
    cpu0, others0 = cpu_seconds(pid), other_threads_cpu(pid)
    end, cpu_end, others_end = start, cpu0, others0
    # The cleans' own durations, added up: the gauge of the last one, read after each clean
    # (valid if no two cleans ended between two reads).
    durations, seen = 0.0, 0
    with _probing(broker, args.probe_rate) as probe:
        probe_start = last_change = time.perf_counter()
        last, last_others = first, others0
        while True:
            time.sleep(POLL_S)
            now = time.perf_counter()
            samples = cleaner_samples(url)
            cpu, others = cpu_seconds(pid), other_threads_cpu(pid)
            cleans, took = names["cleans"], names["last clean's duration"]
            if cleans and took and samples[cleans] - last[cleans] == 1:
                durations += samples[took]
                seen += 1
            moved = any(samples.get(n) != last.get(n) for n in names.values() if n)
            if moved or others - last_others > 0.1 * POLL_S:  # a tenth of a core or more
                last_change = end = now
                cpu_end, others_end = cpu, others
            last, last_others = samples, others
            if now - last_change >= args.idle_s or now - start >= args.cleaner_timeout:
                break
        latencies = probe.latencies(probe_start, end)
    run = CleanerRun(end - start, cpu_end - cpu0, others_end - others0, latency_of(latencies))
    run.bytes_read = _delta(names["bytes cleaned"], first, last)
    run.bytes_written = _delta(names["bytes written"], first, last)
    ended = _delta(names["cleans"], first, last)
    if ended and seen == ended:
        run.cleaning_seconds = durations
    return run, names


def _delta(name: str | None, first: dict[str, float], last: dict[str, float]) -> float:
    return last.get(name, 0.0) - first.get(name, 0.0) if name else 0.0


def _cleaner_off_run(broker: EmbeddedBroker, args: argparse.Namespace,
                     seconds: float) -> CleanerRun:
    """As the run with the cleaner on, for as long, on a copy of the same data."""
    assert broker.process is not None
    pid = broker.process.pid
    start = time.perf_counter()
    cpu0, others0 = cpu_seconds(pid), other_threads_cpu(pid)
    with _probing(broker, args.probe_rate) as probe:
        probe_start = time.perf_counter()
        time.sleep(max(0.0, start + seconds - probe_start))
        end = time.perf_counter()
        cpu1, others1 = cpu_seconds(pid), other_threads_cpu(pid)
        latencies = probe.latencies(probe_start, end)
    return CleanerRun(end - start, cpu1 - cpu0, others1 - others0, latency_of(latencies))


# -- the run ----------------------------------------------------------------------------------


@dataclass
class Figures:
    params: dict[str, Any]
    fresh_runs: list[StartTimes]
    fresh: StartTimes
    history: History | None = None
    sizes_after_history: dict[str, float] = field(default_factory=dict)
    after_kill: StartTimes | None = None
    sizes_after_kill: dict[str, float] = field(default_factory=dict)
    after_stop: StartTimes | None = None
    sizes_after_stop: dict[str, float] = field(default_factory=dict)
    cleaner: CleanerFigures = field(default_factory=CleanerFigures)


def run(args: argparse.Namespace, work: Path) -> Figures:
    settings = {"log.flush.policy": args.policy, "metrics.listen": "127.0.0.1:0",
                **dict(pair.split("=", 1) for pair in args.set)}
    params = {k: v for k, v in vars(args).items() if k not in ("json", "work_dir")}
    # Other work on the machine shows in every figure here: the load is recorded with them.
    params.update(date=time.strftime("%Y-%m-%d %H:%M"), cores=os.cpu_count(),
                  load_at_start=os.getloadavg()[0])
    say(f"fresh starts: {args.fresh_runs}")
    runs = fresh_starts(settings, args.fresh_runs, work)
    fresh = StartTimes(*(statistics.median(getattr(r, f) for r in runs)
                         for f in ("listen_s", "init_s", "cpu_s")))
    figures = Figures(params, runs, fresh)

    data_dir = work / "history"
    broker = EmbeddedBroker(data_dir, settings, port=free_port(), log_path=work / "history.log",
                            startup_timeout=3600)
    try:
        broker.start()
        create_topics(broker.bootstrap, args.data_segment_mb * 2**20)
        say(f"history: {args.txns:,} transactions over {args.ids} ids, {args.data_mb:,} MiB of "
            f"data, {args.producers} transactional producer processes + 1 data producer")
        figures.history = write_history(broker, args)
        figures.sizes_after_history = sizes(data_dir)
        url = metrics_url(broker)
        samples = cleaner_samples(url) if url else None
        figures.cleaner.skipped = ("--no-cleaner" if args.no_cleaner
                                   else "--dirty-mb 0: nothing for it to clean" if not args.dirty_mb
                                   else cleaner_unsupported(samples))

        say("restart after kill -9")
        broker.kill()
        figures.after_kill = timed_start(broker, txn_id(0))
        figures.sizes_after_kill = sizes(data_dir)
        say("restart after a clean stop (SIGTERM)")
        if broker.stop(timeout=600) != 0:
            raise RuntimeError(f"the broker did not stop cleanly: see {broker.log_path}")
        figures.after_stop = timed_start(broker, txn_id(1))
        figures.sizes_after_stop = sizes(data_dir)
        broker.stop(timeout=600)
    finally:
        broker.close()

    if figures.cleaner.skipped is None:
        cleaner = measure_cleaner(data_dir, settings, args, work)
        figures.cleaner = cleaner
    else:
        say(f"cleaner section skipped: {figures.cleaner.skipped}")
    params["load_at_end"] = os.getloadavg()[0]
    return figures


# -- output -----------------------------------------------------------------------------------


def report(f: Figures) -> None:
    p = f.params
    settings = "".join(f", {pair}" for pair in p["set"])
    print(f"Recovery after a history (bench/recovery.py, {p['date']}): "
          f"log.flush.policy={p['policy']}{settings}, {p['cores']} cores, load average "
          f"{p['load_at_start']:.1f} at the start and {p['load_at_end']:.1f} at the end")
    fr = ", ".join(f"{r.listen_s:.2f}/{r.init_s:.2f}" for r in f.fresh_runs)
    print(f"fresh start, median of {len(f.fresh_runs)} (listen/init each: {fr})")
    h = f.history
    if h is not None:
        print()
        offsets = (f"every {p['offsets_every']}th also commits an offset" if p["offsets_every"]
                   else "no offsets committed")
        data = (f"{h.data_mib:,.0f} MiB of keyed 1 KiB records over {p['keys']:,} keys into a "
                f"compacted topic ({p['data_segment_mb']} MiB segments), 1 process"
                if h.data_mib else "no data records")
        print(f"history: {h.txns:,} transactions of 1 record over {p['ids']} transactional ids "
              f"({offsets}), {p['producers']} processes of {p['threads']} threads; {data}")
        print(f"  transactions: {h.txn_seconds:,.1f} s, {h.txns / h.txn_seconds:,.0f} txn/s")
        if h.data_mib:
            print(f"  data:         {h.data_seconds:,.1f} s, {h.data_mib / h.data_seconds:,.1f} MiB/s "
                  "(alongside the transactions)")
        print(f"  all:          {h.seconds:,.1f} s; broker CPU {h.broker_cpu_s:,.1f} s "
              f"({h.broker_cpu_s / h.seconds:.2f} cores, "
              f"{h.broker_cpu_s / max(h.txns, 1) * 1e6:,.0f} us per transaction with the data)")
    print()
    print(f"{'start':<28} {'listens s':>10} {'vs fresh':>15} {'init_transactions s':>20} "
          f"{'vs fresh':>15} {'target (+2 s)':>14} {'broker CPU s':>13}")
    rows = [("fresh (empty data dir)", f.fresh), ("after kill -9", f.after_kill),
            ("after a clean stop", f.after_stop)]
    for name, t in rows:
        if t is None:
            continue
        if t is f.fresh:
            print(f"{name:<28} {t.listen_s:>10.2f} {'':>15} {t.init_s:>20.2f} {'':>15} {'':>14} "
                  f"{t.cpu_s:>13.2f}")
            continue
        verdict = "met" if _met(t, f.fresh) else "missed"
        print(f"{name:<28} {t.listen_s:>10.2f} {_vs(t.listen_s, f.fresh.listen_s):>15} "
              f"{t.init_s:>20.2f} {_vs(t.init_s, f.fresh.init_s):>15} {verdict:>14} "
              f"{t.cpu_s:>13.2f}")
    print()
    print(f"{'MiB on disk':<28} {'after history':>14} {'restarted (kill)':>17} "
          f"{'restarted (stop)':>17}")
    for topic in (*INTERNAL_TOPICS, TXN_TOPIC, DATA_TOPIC):
        cells = [s.get(topic) for s in (f.sizes_after_history, f.sizes_after_kill,
                                        f.sizes_after_stop)]
        print(f"{topic:<28} {_mib(cells[0]):>14} {_mib(cells[1]):>17} {_mib(cells[2]):>17}")
    print()
    c = f.cleaner
    if c.skipped is not None:
        print(f"log cleaner: skipped: {c.skipped}")
        return
    assert c.on is not None and c.off is not None
    on, off = c.on, c.off
    mib = on.bytes_read / 2**20
    print(f"log cleaner, after {c.dirty_mib:,.0f} MiB more of overwrites written with it off "
          f"(metrics read: {', '.join(f'{v}' for v in c.metrics.values() if v)})")
    print(f"  {DATA_TOPIC} on disk: {c.data_mib_before:,.1f} MiB before, "
          f"{c.data_mib_after:,.1f} MiB after")
    print(f"  cleaned: {mib:,.1f} MiB read, {on.bytes_written / 2**20:,.1f} MiB written; "
          f"{_rate(mib, on.cleaning_seconds)} MiB/s over the cleans' own durations "
          f"({_num(on.cleaning_seconds)} s), {_rate(mib, on.seconds)} MiB/s over the "
          f"{on.seconds:.1f} s from the broker's start to the last clean")
    print(f"  {'':<26} {'window s':>9} {'broker CPU s':>13} {'cores':>6} "
          f"{'other threads CPU s':>20} {'probe n':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")
    for name, r in (("cleaner on (cleaning)", on), ("cleaner off (same data)", off)):
        print(f"  {name:<26} {r.seconds:>9.1f} {r.broker_cpu_s:>13.1f} "
              f"{r.broker_cpu_s / r.seconds:>6.2f} {r.other_threads_cpu_s:>20.1f} "
              f"{r.latency.count:>8,} {r.latency.p50_ms:>7.1f} {r.latency.p99_ms:>7.1f} "
              f"{r.latency.max_ms:>7.1f}")
    share = on.broker_cpu_s / on.seconds - off.broker_cpu_s / off.seconds
    print(f"  while cleaning, the broker used {share:.2f} cores more than with the cleaner off; "
          f"produce p99 {_vs(on.latency.p99_ms, off.latency.p99_ms)} ms, "
          f"p50 {_vs(on.latency.p50_ms, off.latency.p50_ms)} ms")


def _mib(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else "-"


def _rate(mib: float, seconds: float | None) -> str:
    return f"{mib / seconds:,.1f}" if seconds else "-"


def _num(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def _vs(value: float, base: float) -> str:
    ratio = f"{value / base:.2f}x" if base else "-"
    return f"{ratio} {value - base:+.2f}"


def _to_json(f: Figures) -> dict[str, Any]:
    """The figures, with each restart's ratio and difference to the fresh start."""
    out = asdict(f)
    for name in ("after_kill", "after_stop"):
        t = getattr(f, name)
        if t is None:
            continue
        out[name].update(
            listen_vs_fresh=t.listen_s / f.fresh.listen_s,
            listen_minus_fresh_s=t.listen_s - f.fresh.listen_s,
            init_vs_fresh=t.init_s / f.fresh.init_s,
            init_minus_fresh_s=t.init_s - f.fresh.init_s,
            target_met=_met(t, f.fresh))
    return out


def _met(t: StartTimes, fresh: StartTimes) -> bool:
    return max(t.listen_s - fresh.listen_s, t.init_s - fresh.init_s) <= TARGET_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--txns", type=int, default=1_000_000, help="transactions in the history")
    parser.add_argument("--ids", type=int, default=100, help="transactional ids they use")
    parser.add_argument("--data-mb", type=int, default=1024,
                        help="MiB of keyed records in the compacted topic")
    parser.add_argument("--keys", type=int, default=None,
                        help="distinct keys of those records (default: a tenth of the records)")
    parser.add_argument("--data-segment-mb", type=int, default=None,
                        help="segment.bytes of the compacted topic, in MiB (default: an eighth "
                             "of a partition's share of --data-mb)")
    parser.add_argument("--producers", type=int, default=4,
                        help="transactional producer processes (the data has one more)")
    parser.add_argument("--threads", type=int, default=5,
                        help="threads per transactional process, sharing its producers")
    parser.add_argument("--offsets-every", type=int, default=10,
                        help="commit an offset in every Nth transaction (0: never)")
    parser.add_argument("--policy", choices=("os", "fsync"), default="os",
                        help="log.flush.policy of every broker")
    parser.add_argument("--fresh-runs", type=int, default=3,
                        help="fresh starts timed (the median counts)")
    parser.add_argument("--dirty-mb", type=int, default=None,
                        help="MiB of overwrites for the cleaner to clean (default: --data-mb)")
    parser.add_argument("--probe-rate", type=float, default=200.0,
                        help="records/s of the latency probe")
    parser.add_argument("--idle-s", type=float, default=5.0,
                        help="the cleaner counts as done after this long without progress")
    parser.add_argument("--cleaner-timeout", type=float, default=900.0,
                        help="longest wait for the cleaner, in s")
    parser.add_argument("--no-cleaner", action="store_true", help="skip the cleaner section")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="a broker config key for every broker of the run (repeatable)")
    parser.add_argument("--work-dir", help="where the data directories go (default: a temporary "
                                           "directory, removed after)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    if args.keys is None:
        args.keys = max(1, args.data_mb * 2**20 // DATA_RECORD_BYTES // 10)
    if args.data_segment_mb is None:
        args.data_segment_mb = max(1, args.data_mb // (PARTITIONS * 8))
    if args.dirty_mb is None:
        args.dirty_mb = args.data_mb
    if any("=" not in pair for pair in args.set):
        parser.error("--set takes KEY=VALUE")
    if args.ids < 2 or args.txns < 1 or not 1 <= args.producers <= args.ids:
        parser.error("--ids must be at least 2, --txns at least 1, --producers from 1 to --ids")

    work = Path(tempfile.mkdtemp(prefix="exactly-recovery-", dir=args.work_dir))
    say(f"data in {work}")
    try:
        figures = run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(_to_json(figures), indent=2) + "\n")


if __name__ == "__main__":
    main()
