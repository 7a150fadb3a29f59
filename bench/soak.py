"""A broker left running under a mixed load: are its memory, descriptors, disk and latencies flat,
and does it come back quickly after `kill -9`? (issue 14's benchmark)

One broker process (`EmbeddedBroker`, the broker's defaults but for the retention keys below) gets
for `--minutes` (30) a moderate, steady load from client processes of their own (spawned, so
neither the clients' GIL nor their CPU is the limit of one process), meant to keep the broker at
a quarter to a third of a core on a quiet machine: the soak is about flatness, not peak throughput.

- transactional producers (this project's client, `exactly.client`): 2 processes of 4
  transactional ids taking turns, 30 transactions/s each, of 10 records of 200 B into `soak-txn`,
  one in 10 aborted;
- idempotent producers (confluent-kafka, acks=all, linger.ms=5): 2,500 records/s of 200 B into
  `soak-idem`, and 200 records/s of 1 KiB over 1,000 keys into the compacted topic `soak-compact`
  (cleanup.policy=compact, 1 MiB segments, min.cleanable.dirty.ratio=0.5), so most records
  are overwritten versions the log cleaner removes;
- a consumer group of 2 confluent-kafka consumers (read_committed, offsets auto-committed)
  reading `soak-idem` and `soak-txn` at three quarters of the rate they are written, so its lag
  grows until retention overtakes it (then it resets to the earliest offset, as
  auto.offset.reset=earliest says);
- 500 idle connections: plain sockets that connect, send one ApiVersions request, read the answer
  and stay silent. The broker's `connections.max.idle.ms` is left at its default (10 minutes):
  the broker closes them, and they reconnect at once (counted), so the broker also sees that churn.
  librdkafka's clients close their own idle connections at 90 % of the broker's setting, as
  Kafka's Java client does (9 minutes against 10).
- a canary in this process (confluent-kafka), 20 records/s of 100 B into `soak-canary`, whose
  latencies are the ones reported: produce = produce() until the delivery report (acks=all,
  linger.ms=0, idempotent); fetch = end to end, produce() until a consumer assigned to the
  partition gets the record from poll() (as Kafka's EndToEndLatency tool measures it: the
  produce, the broker waking the consumer's waiting Fetch, the client's queues).

Retention is set so the disk should be flat after the warm-up (`--warmup-minutes`, a third of the
run unless told): `soak-txn`, `soak-idem` and `soak-canary` have retention.ms of half the warm-up
(5 minutes in the default run) and retention.bytes of 16 MiB per partition, whichever comes first
(in the default run the bytes for `soak-idem`, the time for the others), on 1 MiB segments with
segment.ms a fifth of retention.ms (so segments roll in time to be deleted); the broker's
log.retention.check.interval.ms is segment.ms (10 s at most) instead of 5 minutes, and
log.cleaner.backoff.ms is segment.ms (15 s at most). The internal topics keep their defaults
(compacted, 256 KiB segments).

Every `--sample-seconds` (60) one row: the broker's RSS (/proc/PID/status), open descriptors
(/proc/PID/fd), disk used by its data directory (allocated blocks, as du counts), CPU (user +
system, /proc/PID/stat) over the interval, the canary's produce and fetch p50/p99 over the
interval, the group's lag (end offsets less committed offsets), the idle connections open, the
rates the load achieved and the client errors. After the run: the least-squares slope per hour of
RSS, descriptors and disk over the samples after the warm-up.

At the end, with the load still running, `kill -9` of the broker; the load is stopped, and the
broker restarted on the soak's data and timed from the process's start until (each in a thread of
its own, all started once the broker prints that it listens) a raw connection gets answers to
ApiVersions and Metadata, an idempotent producer's record is acknowledged, and a transactional
producer on one of the soak's transactional ids (maybe left with a transaction open by the kill)
has initialized and committed a transaction. "ready" is the last of these. The same is measured
for a fresh start on an empty data directory at the beginning of the run (median of
`--fresh-runs`; there the topics are created by the first produce). The issue's target: ready
within 2 s of a fresh start. Client errors after the kill are counted apart: the broker was gone.

    .venv/bin/python bench/soak.py                    # 30 minutes, a sample a minute
    .venv/bin/python bench/soak.py --quick            # 1 minute, a sample every 10 s

Flags (defaults in brackets):
    --minutes M          how long the load runs [30]
    --sample-seconds S   seconds between two samples [60]
    --warmup-minutes W   samples before this are left out of the slopes [a third of --minutes]
    --quick              --minutes 1 --sample-seconds 10 --fresh-runs 1
    --fresh-runs N       fresh starts timed; the median counts [3]
    --idle-connections N idle connections held open [500]
    --set KEY=VALUE      any broker key, for every broker of the run (repeatable)
    --work-dir DIR       where the data directories go [a temporary directory]
    --keep               keep the data directories and broker logs (kept anyway if the run fails)
    --json PATH          also write the figures as JSON
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import queue
import resource
import selectors
import shutil
import socket
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from recovery import (
    QUIET,
    Latency,
    cleaner_samples,
    cpu_seconds,
    latency_of,
    metrics_url,
    say,
    topic_mib,
)
from run import _rss_mib as rss_mib

from exactly import client as exactly_client
from exactly.protocol.apis import ApiKey, request_class
from exactly.protocol.framing import RequestHeader, decode_response, encode_request
from exactly.testing import EmbeddedBroker

TXN_TOPIC = "soak-txn"
IDEM_TOPIC = "soak-idem"
COMPACT_TOPIC = "soak-compact"
CANARY_TOPIC = "soak-canary"
PARTITIONS = 4
COMPACT_PARTITIONS = 2
GROUP = "soak-group"
TXN_ID_PREFIX = "soak-txn-"

TXN_PROCESSES = 2
TXN_IDS = 4  # per process
TXN_RATE = 30.0  # transactions/s per process, its ids taking turns
RECORDS_PER_TXN = 10
ABORT_EVERY = 10  # one transaction in this many is aborted
IDEM_RATE = 2500.0  # records/s
COMPACT_RATE = 200.0  # records/s
COMPACT_KEYS = 1000
CONSUMERS = 2
CONSUME_SHARE = 0.75  # of the committed records/s written to the group's topics
CANARY_RATE = 20.0  # records/s
VALUE = b"v" * 200
COMPACT_VALUE = b"c" * 1024
CANARY_STAMP = struct.Struct(">d")  # the canary's produce() time (perf_counter), then padding

SEGMENT_BYTES = 2**20
RETENTION_BYTES = 16 * 2**20  # per partition; this or retention.ms, whichever comes first
# Larger than the producers' largest batch (librdkafka's batch.size, 1,000,000 B): a batch that does
# not fit a segment is refused (RECORD_LIST_TOO_LARGE), as Kafka refuses it.
COMPACT_SEGMENT_BYTES = 2**20
IDLE_MS_DEFAULT = 600_000  # the broker's connections.max.idle.ms
TARGET_S = 2.0  # the target: a restart within 2 s of a fresh start
STOP_TIMEOUT_S = 20.0  # how long the load processes get to stop before they are terminated


# -- pacing and reporting, shared by the load processes ------------------------------------------


def paced(rate: float, stop: Any, wait: Callable[[float], object] | None = None,
          tick_s: float = 0.05) -> Iterator[int]:
    """How many items are due at each tick until `stop` (an Event) is set: `rate` per second on
    average, at most a second's worth at once (a stall's backlog is dropped, not sent in a burst).
    `wait` passes the time between ticks (stop.wait unless given: a producer passes its poll, so
    its delivery reports are served meanwhile)."""
    pause = wait or stop.wait
    credit, last = 0.0, time.monotonic()
    while not stop.is_set():
        pause(tick_s)
        now = time.monotonic()
        credit = min(credit + (now - last) * rate, max(rate, 1.0))
        last = now
        if credit >= 1.0:
            due = int(credit)
            credit -= due
            yield due


def report(errors: Any, source: str, what: object) -> None:
    """A client error, with its wall-clock time: the parent tells the soak's from the kill's."""
    errors.put((time.time(), source, str(what)))


def add(counter: Any, n: int = 1) -> None:
    with counter.get_lock():
        counter.value += n


def client_config(bootstrap: str, broker_idle_ms: int) -> dict[str, Any]:
    """librdkafka settings of every confluent-kafka client here: quiet (errors come through
    error_cb and delivery reports), closing its idle connections before the broker does."""
    return {"bootstrap.servers": bootstrap, **QUIET, "log.connection.close": False,
            "connections.max.idle.ms": int(broker_idle_ms * 0.9)}


def request_frame(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    request = request_class(api_key, version)(**fields)
    return encode_request(RequestHeader(api_key, version, correlation_id, "soak"), request)


def api_versions_frame(correlation_id: int = 1) -> bytes:
    return request_frame(ApiKey.API_VERSIONS, 3, correlation_id, client_software_name="soak",
                         client_software_version="1")


# -- the load processes --------------------------------------------------------------------------


def _txn_producer(bootstrap: str, i: int) -> exactly_client.Producer:
    producer = exactly_client.Producer({"bootstrap.servers": bootstrap,
                                        "transactional.id": f"{TXN_ID_PREFIX}{i}"})
    producer.init_transactions()
    return producer


def _close_quietly(producer: exactly_client.Producer | None) -> None:
    if producer is None:
        return
    # It is being replaced after an error already reported: whatever its close says is moot.
    with contextlib.suppress(Exception):
        producer.close(timeout=5)


def txn_process(bootstrap: str, ids: list[int], stop: Any, counts: dict[str, Any],
                errors: Any) -> None:
    """Transactional producers of exactly.client, one per id of `ids`, taking turns at
    TXN_RATE transactions/s. A producer that fails is reported, closed and replaced (its
    successor fences it)."""
    producers: list[exactly_client.Producer | None] = [_txn_producer(bootstrap, i) for i in ids]
    add(counts["ready"])
    n = 0
    for due in paced(TXN_RATE, stop):
        for _ in range(due):
            k = n % len(ids)
            i = ids[k]
            n += 1
            try:
                producer = producers[k] or _txn_producer(bootstrap, i)
                producers[k] = producer
                producer.begin_transaction()
                for k in range(RECORDS_PER_TXN):
                    producer.send(TXN_TOPIC, VALUE, key=b"%d" % k)
                if n % ABORT_EVERY == 0:
                    producer.abort_transaction()
                    add(counts["txn_aborted"])
                else:
                    producer.commit_transaction()
                    add(counts["txn_committed"])
            except Exception as exc:  # noqa: BLE001 - any failure is reported, then replaced
                report(errors, f"transactional producer {TXN_ID_PREFIX}{i}", repr(exc))
                _close_quietly(producers[k])
                producers[k] = None
                stop.wait(1.0)
    for producer in producers:
        _close_quietly(producer)


def _produce_steadily(config: dict[str, Any], topic: str, rate: float,
                      record: Callable[[int], tuple[bytes | None, bytes]], stop: Any,
                      acked: Any, errors: Any, ready: Any) -> None:
    """An idempotent producer writing `rate` records/s of `record(i)` (key, value) into `topic`."""
    source = f"idempotent producer ({topic})"
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                         "error_cb": lambda err: report(errors, source, err)})

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            report(errors, source, err)
        else:
            add(acked)

    # One record first, untimed and uncounted: connections made, producer id fetched.
    producer.produce(topic, b"warm-up")
    if producer.flush(60):
        report(errors, source, "the first record was not delivered in 60 s")
    add(ready)
    i = 0
    for due in paced(rate, stop, wait=producer.poll):
        for _ in range(due):
            key, value = record(i)
            i += 1
            while True:
                try:
                    producer.produce(topic, value, key=key, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
    producer.flush(10)


def idempotent_process(config: dict[str, Any], stop: Any, counts: dict[str, Any],
                       errors: Any) -> None:
    """Two idempotent producers, each on a thread: plain records, and keyed ones for the
    compacted topic, each key overwritten in turn."""
    writers = [
        threading.Thread(target=_produce_steadily, args=(
            config, IDEM_TOPIC, IDEM_RATE, lambda i: (None, VALUE), stop, counts["idem_acked"],
            errors, counts["ready"])),
        threading.Thread(target=_produce_steadily, args=(
            config, COMPACT_TOPIC, COMPACT_RATE,
            lambda i: (b"key-%04d" % (i % COMPACT_KEYS), COMPACT_VALUE), stop,
            counts["compact_acked"], errors, counts["ready"])),
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()


def _consume_slowly(config: dict[str, Any], rate: float, stop: Any, consumed: Any,
                    errors: Any) -> None:
    consumer = Consumer({**config, "group.id": GROUP, "auto.offset.reset": "earliest",
                         # a small prefetch, so the broker's fetches follow the slow consumption
                         "queued.max.messages.kbytes": 1024,
                         "error_cb": lambda err: report(errors, "group consumer", err)})
    consumer.subscribe([IDEM_TOPIC, TXN_TOPIC])
    for due in paced(rate, stop):
        got = 0
        for msg in consumer.consume(due, 0):
            if msg.error() is None:
                got += 1
            else:
                report(errors, "group consumer", msg.error())
        add(consumed, got)
    consumer.close()


def group_process(config: dict[str, Any], stop: Any, counts: dict[str, Any],
                  errors: Any) -> None:
    """CONSUMERS members of one group, each on a thread, consuming CONSUME_SHARE of what is
    written to their topics."""
    written = IDEM_RATE + TXN_PROCESSES * TXN_RATE * RECORDS_PER_TXN * (1 - 1 / ABORT_EVERY)
    rate = written * CONSUME_SHARE / CONSUMERS
    members = [threading.Thread(target=_consume_slowly,
                                args=(config, rate, stop, counts["consumed"], errors))
               for _ in range(CONSUMERS)]
    for m in members:
        m.start()
    add(counts["ready"])
    for m in members:
        m.join()


def idle_process(host: str, port: int, count: int, stop: Any, counts: dict[str, Any],
                 errors: Any) -> None:
    """`count` connections that send ApiVersions, read the answer and stay silent. One the broker
    closes is opened again at once (a reconnect); one closed before it was answered, or a connect
    that fails, is an error (connects are retried a second later)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    hello = api_versions_frame()
    selector = selectors.DefaultSelector()
    answered: set[socket.socket] = set()
    missing = count
    first_round = True
    while not stop.is_set():
        while missing and not stop.is_set():
            try:
                sock = socket.create_connection((host, port), timeout=10)
                sock.sendall(hello)
            except OSError as exc:
                report(errors, "idle connections", f"connect to {host}:{port}: {exc}")
                stop.wait(1.0)
                break
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
            missing -= 1
        counts["idle_open"].value = len(selector.get_map())
        if first_round and not missing:
            first_round = False
            add(counts["ready"])
        for key, _ in selector.select(timeout=0.5):
            sock = key.fileobj  # type: ignore[assignment]
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if data:
                answered.add(sock)
                continue
            if sock not in answered:
                report(errors, "idle connections", "a connection was closed by the broker "
                                                   "before it answered ApiVersions")
            else:
                add(counts["idle_reconnects"])
            answered.discard(sock)
            selector.unregister(sock)
            sock.close()
            missing += 1
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]


COUNTERS = ("ready", "txn_committed", "txn_aborted", "idem_acked", "compact_acked", "consumed",
            "idle_open", "idle_reconnects")


@dataclass
class ClientError:
    at: float  # time.time()
    source: str
    message: str


class Load:
    """The client processes of the soak, their shared counters and their error reports."""

    def __init__(self, broker: EmbeddedBroker, idle_connections: int, idle_ms: int) -> None:
        ctx = mp.get_context("spawn")  # this process holds librdkafka threads: no fork
        self.stop_event = ctx.Event()
        self.errors_queue = ctx.Queue()
        self.counts = {name: ctx.Value("q", 0) for name in COUNTERS}
        config = client_config(broker.bootstrap, idle_ms)
        common = (self.stop_event, self.counts, self.errors_queue)
        self.processes = [
            *(ctx.Process(target=txn_process, name=f"txn-{k}", args=(
                broker.bootstrap, list(range(k * TXN_IDS, (k + 1) * TXN_IDS)), *common))
              for k in range(TXN_PROCESSES)),
            ctx.Process(target=idempotent_process, args=(config, *common), name="idempotent"),
            ctx.Process(target=group_process, args=(config, *common), name="group"),
            ctx.Process(target=idle_process,
                        args=(broker.host, broker.port, idle_connections, *common), name="idle"),
        ]
        # Ready: each txn process, the two idempotent producers, the group, the idle connections.
        self.expected_ready = TXN_PROCESSES + 4
        self.errors: list[ClientError] = []
        self._dead_reported: set[str] = set()

    def start(self, timeout_s: float = 120.0) -> None:
        for p in self.processes:
            p.start()
        deadline = time.monotonic() + timeout_s
        while self.counts["ready"].value < self.expected_ready:
            self.check()
            dead = [f"{p.name} (exit code {p.exitcode})" for p in self.processes
                    if p.exitcode is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the load did not get ready ({self.counts['ready'].value} "
                                   f"of {self.expected_ready} parts ready, processes ended: "
                                   f"{dead or 'none'}, {timeout_s:g} s at most); errors: "
                                   f"{[e.message for e in self.errors[:3]]}")
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """CPU seconds of the clients: the load's processes and this one (the canary's)."""
        own = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        return own + sum(cpu_seconds(p.pid) for p in self.processes
                         if p.pid is not None and p.exitcode is None)

    def value(self, name: str) -> int:
        return int(self.counts[name].value)

    def check(self) -> None:
        """Collect the error reports, and report a load process that died."""
        while True:
            try:
                at, source, message = self.errors_queue.get_nowait()
            except queue.Empty:
                break
            self.errors.append(ClientError(at, source, message))
        for p in self.processes:
            if p.exitcode is not None and p.name not in self._dead_reported \
                    and not self.stop_event.is_set():
                self._dead_reported.add(p.name)
                self.errors.append(ClientError(time.time(), f"{p.name} process",
                                               f"exited with code {p.exitcode}"))

    def stop(self) -> None:
        """Ask every process to stop; the ones still running after STOP_TIMEOUT_S are terminated.
        Their error reports are collected meanwhile (a process cannot end with its queue full)."""
        self.stop_event.set()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(p.is_alive() for p in self.processes) and time.monotonic() < deadline:
            self.check()
            time.sleep(0.1)
        for p in self.processes:
            if p.is_alive():
                p.terminate()
            p.join(10)
        self.check()


# -- the canary ----------------------------------------------------------------------------------


class Canary:
    """A producer sending CANARY_RATE records/s stamped with their produce() time, and a consumer
    assigned to the partition: produce latency (produce() to delivery report, acks=all) and
    fetch latency (produce() to the record returned by the consumer's poll, end to end)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.producer = Producer({**config, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 0})
        self.consumer = Consumer({**config, "group.id": "soak-canary",
                                  "enable.auto.commit": False})
        self.consumer.assign([KafkaTopicPartition(CANARY_TOPIC, 0, OFFSET_BEGINNING)])
        self.failures: list[ClientError] = []
        self._produce: list[float] = []
        self._fetch: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._receive, daemon=True)]

    def start(self) -> None:
        """One record through, untimed (connections, producer id, the consumer's position)."""
        self._stamped_produce()
        if self.producer.flush(60):
            raise RuntimeError("the canary's first record was not delivered in 60 s")
        deadline = time.monotonic() + 60
        while (msg := self.consumer.poll(1.0)) is None or msg.error() is not None:
            if time.monotonic() > deadline:
                raise RuntimeError("the canary's consumer got no record in 60 s")
        self.take()
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        self.consumer.close()

    def take(self) -> tuple[list[float], list[float]]:
        """The produce and fetch latencies (s) completed since the last call."""
        with self._lock:
            out = self._produce, self._fetch
            self._produce, self._fetch = [], []
        return out

    def _stamped_produce(self) -> None:
        sent = time.perf_counter()
        self.producer.produce(CANARY_TOPIC, CANARY_STAMP.pack(sent) + b"c" * 92,
                              on_delivery=partial(self._delivered, sent))

    def _delivered(self, sent: float, err: Any, _msg: Any) -> None:
        took = time.perf_counter() - sent
        if err is not None:
            self.failures.append(ClientError(time.time(), "canary producer", str(err)))
            return
        with self._lock:
            self._produce.append(took)

    def _send(self) -> None:
        for due in paced(CANARY_RATE, self._stop, wait=self.producer.poll):
            for _ in range(due):
                self._stamped_produce()
        self.producer.flush(30)

    def _receive(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.1)
            if msg is None:
                continue
            now = time.perf_counter()
            if msg.error() is not None:
                self.failures.append(ClientError(time.time(), "canary consumer", str(msg.error())))
                continue
            value = msg.value()
            assert value is not None  # every canary record carries its stamp
            (sent,) = CANARY_STAMP.unpack_from(value)
            with self._lock:
                self._fetch.append(now - sent)


# -- the broker's resources ----------------------------------------------------------------------


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def disk_mib(root: Path) -> float:
    """MiB allocated (as du counts) under `root`; a file that vanishes meanwhile (a segment
    deleted by retention, swapped by the cleaner) is skipped."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total / 2**20


def group_lag(reader: Consumer) -> int:
    """Records (and transaction markers) of the group's topics past its committed offsets."""
    partitions = [KafkaTopicPartition(t, p) for t in (IDEM_TOPIC, TXN_TOPIC)
                  for p in range(PARTITIONS)]
    lag = 0
    for tp in reader.committed(partitions, timeout=10):
        low, high = reader.get_watermark_offsets(KafkaTopicPartition(tp.topic, tp.partition),
                                                 timeout=10)
        lag += high - max(tp.offset, low)  # no commit yet (a negative offset): all of it
    return lag


def per_second(now: dict[str, int], last: dict[str, int], seconds: float, *names: str) -> float:
    return sum(now[n] - last[n] for n in names) / seconds


@dataclass
class Sample:
    t_s: float  # since the load started
    rss_mib: float
    fds: int
    disk_mib: float  # the whole data directory
    compact_mib: float  # the compacted topic alone
    cpu_s: float  # the broker's CPU seconds since its start
    cores: float  # CPU over the interval, in cores
    clients_cores: float  # the same for the clients: the load's processes and this one
    produce: Latency  # the canary's, over the interval
    fetch: Latency
    lag: int | None  # None: the offsets could not be read (an error is recorded)
    idle_open: int
    txns_per_s: float  # committed and aborted
    records_per_s: float  # acknowledged to the idempotent producers (both topics)
    consumed_per_s: float  # by the group
    errors: int  # client errors during the interval


def sample_loop(broker: EmbeddedBroker, load: Load, canary: Canary, args: argparse.Namespace,
                config: dict[str, Any]) -> list[Sample]:
    """A sample every --sample-seconds, each row printed as it comes."""
    assert broker.process is not None
    pid = broker.process.pid
    reader = Consumer({**config, "group.id": GROUP, "enable.auto.commit": False})
    count = max(1, round(args.minutes * 60 / args.sample_seconds))
    print_header()
    samples: list[Sample] = []
    started = time.monotonic()
    last_t, last_cpu, last_clients_cpu = 0.0, cpu_seconds(pid), load.cpu_seconds()
    last = {name: load.value(name) for name in COUNTERS}
    canary.take()
    errors_seen = 0
    for k in range(1, count + 1):
        while (left := started + k * args.sample_seconds - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))
            load.check()
        t = time.monotonic() - started
        cpu, clients_cpu = cpu_seconds(pid), load.cpu_seconds()
        produce, fetch = canary.take()
        try:
            lag: int | None = group_lag(reader)
        except KafkaException as exc:
            lag = None
            load.errors.append(ClientError(time.time(), "lag reader", str(exc)))
        now = {name: load.value(name) for name in COUNTERS}
        dt = t - last_t
        rate = partial(per_second, now, last, dt)
        load.errors.extend(canary.failures)
        canary.failures.clear()
        s = Sample(t, rss_mib(pid), open_fds(pid), disk_mib(broker.data_dir),
                   topic_mib(broker.data_dir, COMPACT_TOPIC), cpu, (cpu - last_cpu) / dt,
                   (clients_cpu - last_clients_cpu) / dt,
                   latency_of(sorted(produce)), latency_of(sorted(fetch)), lag,
                   now["idle_open"], rate("txn_committed", "txn_aborted"),
                   rate("idem_acked", "compact_acked"), rate("consumed"),
                   len(load.errors) - errors_seen)
        errors_seen = len(load.errors)
        samples.append(s)
        print_row(s)
        last_t, last_cpu, last_clients_cpu, last = t, cpu, clients_cpu, now
    reader.close()
    return samples


# -- timing a start ------------------------------------------------------------------------------


@dataclass
class StartTimes:
    """Seconds from the broker process's start until each milestone."""

    listening_s: float  # it printed that it listens (EmbeddedBroker.start() returned)
    metadata_s: float  # a raw connection got answers to ApiVersions and Metadata
    produce_s: float  # an idempotent producer's record was acknowledged (acks=all)
    commit_s: float  # a transactional producer initialized and committed a transaction
    cpu_s: float  # the broker's CPU seconds by then

    @property
    def ready_s(self) -> float:
        return max(self.metadata_s, self.produce_s, self.commit_s)


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def answer_metadata(host: str, port: int, deadline_s: float = 120.0) -> None:
    """Until a connection gets ApiVersions and Metadata (all topics) answered without error."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=10) as sock:
                sock.sendall(api_versions_frame(1))
                _, versions = decode_response(ApiKey.API_VERSIONS, 3, _read_frame(sock))
                if versions.error_code != 0:
                    raise ConnectionError(f"ApiVersions answered error {versions.error_code}")
                sock.sendall(request_frame(ApiKey.METADATA, 12, 2, topics=None,
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
                decode_response(ApiKey.METADATA, 12, _read_frame(sock))
                return
        except OSError:  # ConnectionError included: not serving yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def produce_one(config: dict[str, Any]) -> None:
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 0})
    failed: list[str] = []
    producer.produce(IDEM_TOPIC, b"after a start",
                     on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
    if producer.flush(120) or failed:
        raise RuntimeError(f"no idempotent produce acknowledged after the start: {failed[:1]}")


def commit_one(bootstrap: str, txn_index: int) -> None:
    producer = _txn_producer(bootstrap, txn_index)
    try:
        producer.begin_transaction()
        producer.send(TXN_TOPIC, b"after a start")
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)


def timed_start(broker: EmbeddedBroker, idle_ms: int) -> StartTimes:
    started = time.perf_counter()
    broker.start()
    listening = time.perf_counter() - started
    config = client_config(broker.bootstrap, idle_ms)

    def since_start(step: Callable[[], None]) -> float:
        step()
        return time.perf_counter() - started

    with ThreadPoolExecutor(3) as pool:
        steps = [pool.submit(since_start, partial(answer_metadata, broker.host, broker.port)),
                 pool.submit(since_start, partial(produce_one, config)),
                 pool.submit(since_start, partial(commit_one, broker.bootstrap, 0))]
        metadata, produce, commit = (s.result() for s in steps)
    assert broker.process is not None
    return StartTimes(listening, metadata, produce, commit, cpu_seconds(broker.process.pid))


# -- the run -------------------------------------------------------------------------------------


def topic_settings(warmup_s: float) -> dict[str, int]:
    """Retention that keeps the disk flat after the warm-up (the module docstring says why)."""
    retention_ms = max(10_000, int(warmup_s * 1000 / 2))
    segment_ms = retention_ms // 5
    return {"retention.ms": retention_ms, "segment.ms": segment_ms,
            "check.ms": min(segment_ms, 10_000), "cleaner.backoff.ms": min(segment_ms, 15_000)}


def create_topics(bootstrap: str, t: dict[str, int]) -> None:
    delete = {"cleanup.policy": "delete", "retention.ms": str(t["retention.ms"]),
              "retention.bytes": str(RETENTION_BYTES), "segment.bytes": str(SEGMENT_BYTES),
              "segment.ms": str(t["segment.ms"])}
    compact = {"cleanup.policy": "compact", "segment.bytes": str(COMPACT_SEGMENT_BYTES),
               "segment.ms": str(t["segment.ms"]), "min.cleanable.dirty.ratio": "0.5"}
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    topics = [NewTopic(TXN_TOPIC, PARTITIONS, 1, config=delete),
              NewTopic(IDEM_TOPIC, PARTITIONS, 1, config=delete),
              NewTopic(CANARY_TOPIC, 1, 1, config=delete),
              NewTopic(COMPACT_TOPIC, COMPACT_PARTITIONS, 1, config=compact)]
    for future in admin.create_topics(topics).values():
        future.result(timeout=60)


@dataclass
class Slope:
    per_hour: float | None  # least squares over the samples after the warm-up
    mean: float
    low: float
    high: float


def slope_of(samples: list[Sample], attr: str, warmup_s: float) -> Slope | None:
    points = [(s.t_s / 3600, float(getattr(s, attr))) for s in samples if s.t_s >= warmup_s]
    if not points:
        return None
    values = [v for _, v in points]
    per_hour = (statistics.linear_regression([t for t, _ in points], values).slope
                if len(points) >= 2 else None)
    return Slope(per_hour, statistics.fmean(values), min(values), max(values))


@dataclass
class Figures:
    params: dict[str, Any]
    fresh_runs: list[StartTimes]
    fresh: StartTimes
    samples: list[Sample] = field(default_factory=list)
    slopes: dict[str, Slope | None] = field(default_factory=dict)
    errors: list[ClientError] = field(default_factory=list)  # during the soak
    errors_after_kill: int = 0
    idle_reconnects: int = 0
    totals: dict[str, int] = field(default_factory=dict)
    cleaner: dict[str, float] = field(default_factory=dict)
    disk_before_kill_mib: float = 0.0
    restart: StartTimes | None = None
    disk_after_restart_mib: float = 0.0


def soak(args: argparse.Namespace, work: Path) -> Figures:
    t = topic_settings(args.warmup_minutes * 60)
    settings = {"log.retention.check.interval.ms": str(t["check.ms"]),
                "log.cleaner.backoff.ms": str(t["cleaner.backoff.ms"]),
                "metrics.listen": "127.0.0.1:0", **dict(pair.split("=", 1) for pair in args.set)}
    idle_ms = int(settings.get("connections.max.idle.ms", IDLE_MS_DEFAULT))
    params = {k: v for k, v in vars(args).items() if k not in ("json", "work_dir", "keep")}
    # Other work on the machine shows in every figure here: the load is recorded with them.
    params.update(date=time.strftime("%Y-%m-%d %H:%M"), cores=os.cpu_count(),
                  load_at_start=os.getloadavg()[0], settings=settings,
                  retention_ms=t["retention.ms"], segment_ms=t["segment.ms"])

    say(f"fresh starts: {args.fresh_runs}")
    runs = []
    for i in range(args.fresh_runs):
        fresh = EmbeddedBroker(work / f"fresh-{i}", settings, log_path=work / f"fresh-{i}.log")
        try:
            runs.append(timed_start(fresh, idle_ms))
        finally:
            fresh.close()
            shutil.rmtree(work / f"fresh-{i}", ignore_errors=True)
    figures = Figures(params, runs, StartTimes(*(
        statistics.median(getattr(r, f) for r in runs)
        for f in ("listening_s", "metadata_s", "produce_s", "commit_s", "cpu_s"))))

    broker = EmbeddedBroker(work / "soak", settings, log_path=work / "soak.log")
    load: Load | None = None
    try:
        broker.start()
        create_topics(broker.bootstrap, t)
        say(f"the load: starting its processes; {args.idle_connections} idle connections")
        load = Load(broker, args.idle_connections, idle_ms)
        load.start()
        canary = Canary(client_config(broker.bootstrap, idle_ms))
        canary.start()
        say(f"soak: {args.minutes:g} min, a sample every {args.sample_seconds:g} s")
        figures.samples = sample_loop(broker, load, canary, args,
                                         client_config(broker.bootstrap, idle_ms))
        canary.stop()
        load.errors.extend(canary.failures)
        url = metrics_url(broker)
        figures.cleaner = cleaner_samples(url) if url else {}
        figures.disk_before_kill_mib = disk_mib(broker.data_dir)
        # What the load did, before the kill closes every connection.
        figures.idle_reconnects = load.value("idle_reconnects")
        figures.totals = {name: load.value(name) for name in COUNTERS
                          if name not in ("ready", "idle_open", "idle_reconnects")}
        say("kill -9 of the broker, the load still running")
        killed_at = time.time()
        broker.kill()
        load.stop()
        figures.errors = [e for e in load.errors if e.at < killed_at]
        figures.errors_after_kill = len(load.errors) - len(figures.errors)
        say("restart on the soak's data, timed")
        figures.restart = timed_start(broker, idle_ms)
        figures.disk_after_restart_mib = disk_mib(broker.data_dir)
    finally:
        if load is not None:
            load.stop()
        broker.close()
    figures.slopes = {attr: slope_of(figures.samples, attr, args.warmup_minutes * 60)
                      for attr in ("rss_mib", "fds", "disk_mib")}
    params["load_at_end"] = os.getloadavg()[0]
    return figures


# -- output --------------------------------------------------------------------------------------

COLUMNS = (("min", 5), ("RSS MiB", 8), ("fds", 5), ("disk MiB", 9), ("compact", 8),
           ("cores", 6), ("clients", 8), ("prod p50", 9), ("p99 ms", 7), ("fetch p50", 10), ("p99 ms", 7),
           ("lag", 8), ("idle", 5), ("txn/s", 6), ("rec/s", 6), ("cons/s", 7), ("err", 4))


def print_header() -> None:
    print(" ".join(f"{name:>{width}}" for name, width in COLUMNS), flush=True)


def print_row(s: Sample) -> None:
    cells = (f"{s.t_s / 60:.1f}", f"{s.rss_mib:.1f}", s.fds, f"{s.disk_mib:.1f}",
             f"{s.compact_mib:.1f}", f"{s.cores:.2f}", f"{s.clients_cores:.2f}",
             f"{s.produce.p50_ms:.1f}",
             f"{s.produce.p99_ms:.1f}", f"{s.fetch.p50_ms:.1f}", f"{s.fetch.p99_ms:.1f}",
             "-" if s.lag is None else s.lag, s.idle_open, f"{s.txns_per_s:.1f}",
             f"{s.records_per_s:.0f}", f"{s.consumed_per_s:.0f}", s.errors)
    print(" ".join(f"{c:>{width}}" for c, (_, width) in zip(cells, COLUMNS, strict=True)),
          flush=True)


def print_summary(f: Figures) -> None:
    p = f.params
    print()
    print(f"Soak (bench/soak.py, {p['date']}): {p['minutes']:g} min, a sample every "
          f"{p['sample_seconds']:g} s, warm-up {p['warmup_minutes']:.3g} min; {p['cores']} cores "
          f"shared with other work, load average {p['load_at_start']:.1f} at the start and "
          f"{p['load_at_end']:.1f} at the end")
    print(f"broker settings: {', '.join(f'{k}={v}' for k, v in p['settings'].items())}; topics: "
          f"retention.ms={p['retention_ms']}, segment.ms={p['segment_ms']}, "
          f"retention.bytes={RETENTION_BYTES} per partition")
    print(f"load: {TXN_PROCESSES} processes of {TXN_IDS} transactional ids (exactly.client), "
          f"{TXN_RATE:g} txn/s each, of "
          f"{RECORDS_PER_TXN} records (1 in {ABORT_EVERY} aborted); idempotent "
          f"{IDEM_RATE:g} records/s of {len(VALUE)} B + {COMPACT_RATE:g} records/s of "
          f"{len(COMPACT_VALUE)} B over {COMPACT_KEYS} keys (compacted); a group of {CONSUMERS} "
          f"at {CONSUME_SHARE:.0%} of the rate written; {p['idle_connections']} idle "
          f"connections; canary {CANARY_RATE:g} records/s")
    print(f"totals: {', '.join(f'{k} {v:,}' for k, v in f.totals.items())}")
    print()
    units = {"rss_mib": ("RSS", "MiB"), "fds": ("open fds", "fds"), "disk_mib": ("disk", "MiB")}
    count = sum(1 for s in f.samples if s.t_s >= p["warmup_minutes"] * 60)
    print(f"after the warm-up ({count} samples): least-squares slope per hour, and the range")
    for attr, slope in f.slopes.items():
        name, unit = units[attr]
        if slope is None:
            print(f"  {name:<9} no sample after the warm-up")
            continue
        per_hour = "-" if slope.per_hour is None else f"{slope.per_hour:+.2f} {unit}/h"
        share = (f" ({slope.per_hour / slope.mean:+.1%} of the mean per hour)"
                 if slope.per_hour is not None and slope.mean else "")
        print(f"  {name:<9} {per_hour:>16}{share}; mean {slope.mean:.1f}, "
              f"from {slope.low:.1f} to {slope.high:.1f}")
    print()
    print(f"client errors during the soak: {len(f.errors)}"
          + "".join(f"\n  {time.strftime('%H:%M:%S', time.localtime(e.at))} {e.source}: "
                    f"{e.message}" for e in f.errors[:10]))
    print(f"client errors after the kill (the broker was gone): {f.errors_after_kill}")
    print(f"idle connections closed by the broker and opened again: {f.idle_reconnects:,}")
    cleaner = ", ".join(f"{k.removeprefix('exactly_log_cleaner_')} {v:,.0f}"
                        for k, v in f.cleaner.items()
                        if k.endswith(("runs_total", "bytes_total", "records_total")))
    print(f"log cleaner: {cleaner or 'no metrics'}")
    print(f"data directory: {f.disk_before_kill_mib:.1f} MiB before the kill, "
          f"{f.disk_after_restart_mib:.1f} MiB after the restart")
    print()
    fresh = ", ".join(f"{r.ready_s:.2f}" for r in f.fresh_runs)
    print(f"start (s from the process's start)  {'listening':>9} {'metadata':>9} {'produce':>8} "
          f"{'commit':>7} {'ready':>6} {'vs fresh':>14} {'target +2 s':>11} {'CPU s':>6}")
    for name, st in ((f"fresh, median of {len(f.fresh_runs)} ({fresh})", f.fresh),
                     ("after kill -9 (the soak's data)", f.restart)):
        if st is None:
            continue
        vs = verdict = ""
        if st is not f.fresh:
            vs = f"{st.ready_s / f.fresh.ready_s:.2f}x {st.ready_s - f.fresh.ready_s:+.2f}"
            verdict = "met" if met(st, f.fresh) else "missed"
        print(f"{name:<35} {st.listening_s:>9.2f} {st.metadata_s:>9.2f} {st.produce_s:>8.2f} "
              f"{st.commit_s:>7.2f} {st.ready_s:>6.2f} {vs:>14} {verdict:>11} {st.cpu_s:>6.2f}")


def met(st: StartTimes, fresh: StartTimes) -> bool:
    return st.ready_s - fresh.ready_s <= TARGET_S


def to_json(f: Figures) -> dict[str, Any]:
    out = asdict(f)
    for name in ("fresh", "restart"):
        st = getattr(f, name)
        if st is not None:
            out[name]["ready_s"] = st.ready_s
    for st, run in zip(f.fresh_runs, out["fresh_runs"], strict=True):
        run["ready_s"] = st.ready_s
    if f.restart is not None:
        out["restart"].update(ready_minus_fresh_s=f.restart.ready_s - f.fresh.ready_s,
                              target_met=met(f.restart, f.fresh))
    return out


def write_json(f: Figures, path: str | None) -> None:
    if path:
        Path(path).write_text(json.dumps(to_json(f), indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load runs")
    parser.add_argument("--sample-seconds", type=float, default=60.0,
                        help="seconds between two samples")
    parser.add_argument("--warmup-minutes", type=float, default=None,
                        help="samples before this are left out of the slopes "
                             "(default: a third of --minutes)")
    parser.add_argument("--quick", action="store_true",
                        help="1 minute, a sample every 10 s, one fresh start")
    parser.add_argument("--fresh-runs", type=int, default=3,
                        help="fresh starts timed (the median counts)")
    parser.add_argument("--idle-connections", type=int, default=500,
                        help="idle connections held open")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="a broker config key for every broker of the run (repeatable)")
    parser.add_argument("--work-dir", help="where the data directories go (default: a "
                                           "temporary directory, removed after)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the data directories and the broker logs")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.sample_seconds, args.fresh_runs = 1.0, 10.0, 1
    if args.warmup_minutes is None:
        args.warmup_minutes = args.minutes / 3
    if any("=" not in pair for pair in args.set):
        parser.error("--set takes KEY=VALUE")
    if args.minutes <= 0 or args.sample_seconds <= 0 or args.fresh_runs < 1:
        parser.error("--minutes and --sample-seconds must be positive, --fresh-runs at least 1")

    work = Path(tempfile.mkdtemp(prefix="exactly-soak-", dir=args.work_dir))
    say(f"data in {work}")
    try:
        figures = soak(args, work)
    except BaseException:
        # Half an hour of a broker's life: its log is worth a look.
        say(f"the soak failed; its data directories and broker logs are kept in {work}")
        raise
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print_summary(figures)
    write_json(figures, args.json)


if __name__ == "__main__":
    main()
