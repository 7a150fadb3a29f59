"""One seeded run of consumer groups under faults: the broker killed (`kill -9`), paused
(SIGSTOP for a second or a few, then SIGCONT), power-cut (on tests.rigs.powercut), and
the consumers killed with SIGKILL and restarted, while input keeps coming. What it saw goes to
an `Observations`; tests/helpers/groups/fault_check.py judges it.

A run of kind `classic` (confluent-kafka, `group.protocol=classic`), `consumer` (confluent-kafka,
KIP-848's `group.protocol=consumer`) or `share` (Exactly's ShareConsumer, KIP-932) has two groups
on one input topic, each of two worker processes (tests/workers/group_fault_worker.py):

- `alo`, at least once: log each delivery, then commit (classic, consumer) or ACCEPT and
  commit_sync (share);
- `eos`, exactly once, read-process-write into the output topic: send_offsets_to_transaction
  (classic, consumer), or the ShareConsumer's acknowledgements in a TransactionSession's
  transaction (share, KIP-1289).

The faults come from a schedule drawn from the seed (`make_schedule`): the same seed gives the
same faults at the same moments of the run, and the run records when each really happened. A
sampler reads the groups' committed offsets (OffsetFetch) or share-partition start offsets
(DescribeShareGroupOffsets) every half second throughout. After the last fault and the last input
record the run waits, up to `Plan.catch_up_s`, for both groups to reach the end of the input, then
stops the workers and reads the input and the output back.

Everything goes to files under the run's directory: the broker's log, each worker's output and
events, `schedule.json`; `Observations.logs()` names them for a failure's message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker
from tests.helpers.share.helpers import SETTINGS as SHARE_GROUP_SETTINGS
from tests.helpers.share.helpers import set_group_configs
from tests.helpers.share.raw import describe_offsets
from tests.paths import REPO
from tests.rawclient import RawConnection
from tests.rigs.powercut import PowerCutError, PowerCutFS
from tests.support import consume_confluent, create_topic, end_offsets
from tests.system.interop.test_consumer_protocol import SETTINGS as CONSUMER_GROUP_SETTINGS
from tests.system.interop.test_transactions import read_all
from tests.system.test_share_eos_pipeline import _open_transactions
from tests.workers.group_fault_worker import POISON

KINDS = ("classic", "consumer", "share")
FAULT_TYPES = ("worker-kill", "broker-kill", "broker-pause", "power-cut")
GROUPS = ("alo", "eos")
SLOTS = 2  # worker processes per group
INJECTIONS = ("none", "skip-processing", "no-txn-offsets", "drop-output")

# The share groups' configs (group-level, KIP-932): a short lock, so that the records of a killed
# member come back within the run, and Kafka's default delivery count limit.
LOCK_MS = 2000  # share.record.lock.duration.ms
DELIVERY_LIMIT = 5  # share.delivery.count.limit
TXN_SESSION_MS = 1500  # the share-txn workers' transaction.session.timeout.ms (KIP-1309)
POISON_EVERY = 40  # one input record in this many (share runs) is RELEASEd at every delivery

BROKER_SETTINGS = {
    **SHARE_GROUP_SETTINGS,
    **CONSUMER_GROUP_SETTINGS,
    "group.min.session.timeout.ms": "1000",  # the classic workers' session.timeout.ms is 2000
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the input began
    type: str  # one of FAULT_TYPES
    target: str = ""  # worker-kill: the worker ("alo-1")
    seconds: float = 0.0  # broker-pause: how long; broker-kill, power-cut: down time;
    #                       worker-kill: time before the restart

    def describe(self) -> str:
        what = {"worker-kill": f"SIGKILL {self.target}, restart after {self.seconds:.2f}s",
                "broker-kill": f"kill -9 the broker, down {self.seconds:.2f}s",
                "broker-pause": f"SIGSTOP the broker for {self.seconds:.2f}s",
                "power-cut": f"kill -9 the broker and cut the power, down {self.seconds:.2f}s"}
        return f"t={self.at:.2f}s {what[self.type]}"


def make_schedule(kind: str, seed: int, duration: float, *, power_cuts: bool) -> list[Fault]:
    """The faults of a run, drawn from (kind, seed): every fault type first (worker kills,
    broker kills, pauses, and power cuts when the broker runs on the power-cut filesystem) in a
    drawn order, then drawn types, 2-5 s apart, until `duration` - 2 s (or later, until each
    type has come once)."""
    rng = random.Random(f"group-faults/{kind}/{seed}")
    types = [t for t in FAULT_TYPES if power_cuts or t != "power-cut"]
    weights = {"worker-kill": 4, "broker-kill": 2, "broker-pause": 2, "power-cut": 1}
    first = rng.sample(types, len(types))
    workers = [f"{g}-{s}" for g in GROUPS for s in range(SLOTS)]
    faults: list[Fault] = []
    at = rng.uniform(1.5, 3.0)
    while at < duration - 2.0 or first:
        kind_ = first.pop(0) if first else rng.choices(types, [weights[t] for t in types])[0]
        if kind_ == "worker-kill":
            fault = Fault(round(at, 2), kind_, rng.choice(workers), round(rng.uniform(0, 1), 2))
        elif kind_ == "broker-pause":
            fault = Fault(round(at, 2), kind_, seconds=round(rng.uniform(1.0, 4.0), 2))
        else:
            fault = Fault(round(at, 2), kind_, seconds=round(rng.uniform(0.0, 1.0), 2))
        faults.append(fault)
        at += fault.seconds + rng.uniform(2.0, 5.0)
    return faults


@dataclass(frozen=True)
class Plan:
    kind: str
    seed: int
    duration: float = 20.0  # seconds of input, with the faults among them
    rate: float = 60.0  # input records per second
    power_cuts: bool = False  # the broker on the power-cut filesystem, log.flush.policy=fsync
    catch_up_s: float = 60.0  # how long the groups may take to reach the end after it all
    inject: str = "none"  # one of INJECTIONS: a fault of the workers or the checker, on purpose
    batch: int = 10

    @property
    def partitions(self) -> int:
        return 2 if self.kind == "share" else 3

    def group(self, name: str) -> str:
        return f"{self.kind}-{name}"


@dataclass(frozen=True)
class Event:
    t: float
    worker: str  # "alo-0"
    incarnation: int  # 1 for the first start
    kind: str  # D, C, T, A, R (tests/workers/group_fault_worker.py)
    data: tuple[str, ...]


@dataclass
class Observations:
    plan: Plan
    work: Path
    schedule: list[Fault]
    executed: list[dict[str, Any]] = field(default_factory=list)  # fault, start, end, note
    t0: float = 0.0  # time.monotonic() when the input began
    last_fault_end: float = 0.0
    input_end: float = 0.0  # the last input record acknowledged
    caught_up_at: float | None = None
    ends: list[int] = field(default_factory=list)  # the input's end offsets
    samples: dict[str, list[tuple[float, list[int]]]] = field(default_factory=dict)
    final_offsets: dict[str, list[int]] = field(default_factory=dict)  # after the workers
    inputs: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (p, o) -> value
    acked_inputs: set[bytes] = field(default_factory=set)  # the producer's delivery reports
    input_errors: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # the eos group's output, read_committed
    events: dict[str, list[Event]] = field(default_factory=dict)  # by group
    kills: list[tuple[float, str, int]] = field(default_factory=list)  # t, worker, incarnation
    broker_faults: list[tuple[float, float]] = field(default_factory=list)  # start, end
    starts: dict[str, int] = field(default_factory=dict)  # by worker
    exits: dict[str, list[int]] = field(default_factory=dict)  # exit codes not of our kills
    open_transactions: tuple[Any, ...] = ()
    errors: list[str] = field(default_factory=list)  # the run itself could not go on
    phases: dict[str, float] = field(default_factory=dict)  # seconds: setup, load, catch-up...

    def final(self, group: str) -> list[int]:
        """The group's committed offsets (share: start offsets) once its workers were stopped
        and no transaction was open; else the last sample."""
        if group in self.final_offsets:
            return self.final_offsets[group]
        got = self.samples.get(group) or [(0.0, [-1] * self.plan.partitions)]
        return got[-1][1]

    def max_delivery_counts(self, group: str) -> dict[tuple[int, int], int]:
        """(partition, offset) -> the highest delivery count a worker of `group` was given."""
        out: dict[tuple[int, int], int] = {}
        for e in self.events.get(group, ()):
            if e.kind == "D":
                key = (int(e.data[0]), int(e.data[1]))
                out[key] = max(out.get(key, 0), int(e.data[2]))
        return out

    def faults_by_type(self) -> dict[str, int]:
        out = dict.fromkeys(t for t in FAULT_TYPES if self.plan.power_cuts or t != "power-cut")
        for e in self.executed:
            out[e["type"]] = (out[e["type"]] or 0) + 1
        return {k: v or 0 for k, v in out.items()}

    def logs(self) -> list[Path]:
        return sorted([self.work / "broker.log", self.work / "input-producer.log",
                       *self.work.glob("powercut.log"), *self.work.glob("worker-*.log"),
                       *self.work.glob("events-*.txt"), self.work / "schedule.json"])


class Worker:
    """One worker slot: its process, restarted after each kill (or its own exit)."""

    def __init__(self, plan: Plan, broker: EmbeddedBroker, work: Path, group: str, slot: int
                 ) -> None:
        self.plan, self.broker, self.group, self.slot = plan, broker, group, slot
        self.name = f"{group}-{slot}"
        self.events = work / f"events-{self.name}.txt"
        self.log = open(work / f"worker-{self.name}.log", "ab")  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.exits: list[int] = []
        self.not_before = 0.0

    def args(self) -> list[str]:
        plan = self.plan
        share = plan.kind == "share"
        mode = ({"alo": "share-consume", "eos": "share-txn"} if share else
                {"alo": "consume", "eos": "ctp"})[self.group]
        # A classic/KIP-848 worker keeps its transactional id across restarts (InitProducerId
        # fences its previous incarnation); a share one takes a new one each time (KIP-1309).
        txn = f"{plan.group(self.group)}-{self.slot}" + (f"-{self.starts}" if share else "")
        inject = plan.inject if plan.inject in ("skip-processing", "no-txn-offsets") else "none"
        return [sys.executable, "-m", "tests.workers.group_fault_worker", mode,
                "--bootstrap", self.broker.bootstrap, "--group", plan.group(self.group),
                "--input", f"{plan.kind}-in", "--output", f"{plan.kind}-out",
                "--events", str(self.events), "--protocol",
                "consumer" if plan.kind == "consumer" else "classic",
                "--batch", str(plan.batch), "--txn-id", txn,
                "--session-timeout-ms", str(TXN_SESSION_MS), "--inject", inject]

    def ensure_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)  # died on its own (crash-only)
            self.proc = None
        if self.proc is None and time.monotonic() >= self.not_before:
            self.log.write(f"----- start #{self.starts + 1} at {time.monotonic():.3f}\n".encode())
            self.log.flush()
            self.proc = subprocess.Popen(self.args(), cwd=REPO, stdout=self.log, stderr=self.log,
                                         env={**os.environ, "PYTHONPATH": str(REPO)})
            self.starts += 1

    def kill(self, restart_after: float = 0.0) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            else:
                self.exits.append(self.proc.returncode)
            self.proc.wait()
            self.proc = None
        self.not_before = time.monotonic() + restart_after

    def dump_stacks(self) -> None:
        """SIGUSR1: the worker writes its threads' stacks to its log (faulthandler)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)

    def close(self) -> None:
        self.kill()
        self.log.close()


class Sampler(threading.Thread):
    """Each group's committed offsets (share: start offsets) every `interval` s, with the time
    of the answer; a broker that is down or paused gives no sample."""

    def __init__(self, plan: Plan, broker: EmbeddedBroker, interval: float = 0.5) -> None:
        super().__init__(name="offset-sampler", daemon=True)
        self.plan, self.broker, self.interval = plan, broker, interval
        self.samples: dict[str, list[tuple[float, list[int]]]] = {
            plan.group(g): [] for g in GROUPS}
        self.stop = threading.Event()

    def latest(self, group: str) -> list[int] | None:
        got = self.samples[group]
        return got[-1][1] if got else None

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            for group, got in self.samples.items():
                try:
                    offsets = self.read(group)
                except (OSError, ConnectionError, AssertionError, ValueError, IndexError):
                    continue
                if offsets is not None:
                    got.append((time.monotonic(), offsets))

    def read(self, group: str) -> list[int] | None:
        topic, partitions = f"{self.plan.kind}-in", tuple(range(self.plan.partitions))
        if self.plan.kind == "share":
            g = describe_offsets(self.broker, group, topic, partitions)
            if g.error_code or not g.topics:
                return None
            by_p = {p.partition_index: (p.error_code, int(p.start_offset))
                    for p in g.topics[0].partitions}
        else:
            by_p = committed_offsets(self.broker, group, topic, partitions)
        if any(by_p.get(p, (1, 0))[0] for p in partitions):
            return None
        return [by_p[p][1] for p in partitions]


def committed_offsets(broker: EmbeddedBroker, group: str, topic: str,
                      partitions: tuple[int, ...]) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7 (require_stable off: what the group has committed, not what an open
    transaction would commit): partition -> (error code, committed offset or -1)."""
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic

    conn = RawConnection(broker.host, broker.port, timeout=3.0)
    try:
        r = conn.request(ApiKey.OFFSET_FETCH, 7, group_id=group, require_stable=False,
                         topics=(OffsetFetchRequestTopic(name=topic,
                                                         partition_indexes=partitions),))
    finally:
        conn.close()
    if r.error_code:
        return {}
    return {p.partition_index: (p.error_code, p.committed_offset)
            for t in r.topics for p in t.partitions}


class InputProducer(threading.Thread):
    """`rate` records/s for `duration` s into the input topic (idempotent, acks=all), values
    unique: `in-000042`, every POISON_EVERY-th of a share run ending in `-poison`."""

    def __init__(self, plan: Plan, broker: EmbeddedBroker, log_path: Path) -> None:
        super().__init__(name="input-producer", daemon=True)
        self.plan, self.broker = plan, broker
        # librdkafka's complaints while the broker is down go to a file, not the run's output.
        self.logger = logging.Logger("input-producer")  # noqa: LOG001 - not kept by logging
        self.logger.addHandler(logging.FileHandler(log_path))
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.sent = 0
        self.finished_at = 0.0

    def value(self, i: int) -> bytes:
        poison = self.plan.kind == "share" and i % POISON_EVERY == POISON_EVERY // 2
        return b"in-%06d" % i + (POISON if poison else b"")

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120000, "reconnect.backoff.ms": 50,
                             "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50},
                            logger=self.logger)

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.add(msg.value())
            else:
                self.errors.append(f"{msg.value()!r}: {err}")

        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < self.plan.duration:
            while self.sent < int(elapsed * self.plan.rate):
                try:
                    producer.produce(f"{self.plan.kind}-in", value=self.value(self.sent),
                                     key=b"%d" % self.sent, on_delivery=delivered)
                    self.sent += 1
                except BufferError:
                    break
            producer.poll(0.02)
        left = producer.flush(150)
        if left:
            self.errors.append(f"{left} input records still undelivered 150 s after the end")
        self.finished_at = time.monotonic()


def _power_cut_fs(work: Path) -> PowerCutFS:
    work.mkdir(parents=True, exist_ok=True)
    return PowerCutFS(work / "mnt", fsync_latency_ms=1, log_path=work / "powercut.log")


def power_cuts_available(work: Path) -> str | None:
    """None if the power-cut filesystem mounts here (it needs /dev/fuse and fusermount3), else
    why not."""
    try:
        _power_cut_fs(work / "probe").start().close()
    except (PowerCutError, OSError) as exc:
        return str(exc).splitlines()[0]
    return None


def run(plan: Plan, work: Path, say: Callable[[str], None] = lambda _: None) -> Observations:
    """One run of `plan` in the directory `work` (created; its files stay). A run that cannot go
    on (the broker does not start again, say) ends with the error in `Observations.errors`; only
    a power-cut filesystem that does not mount raises (PowerCutError), before anything ran."""
    work.mkdir(parents=True, exist_ok=True)
    obs = Observations(plan, work, make_schedule(plan.kind, plan.seed, plan.duration,
                                                 power_cuts=plan.power_cuts))
    (work / "schedule.json").write_text(json.dumps(
        {"plan": asdict(plan), "schedule": [asdict(f) for f in obs.schedule]}, indent=1))
    with contextlib.ExitStack() as stack:
        fs = stack.enter_context(_power_cut_fs(work)) if plan.power_cuts else None
        try:
            _run(obs, stack, fs, say)
        except Exception:  # noqa: BLE001 - the checker reports it, with the seed and the logs
            obs.errors.append(f"the run stopped: {traceback.format_exc()}")
            obs.events = read_events(work, plan)
    return obs


def _run(obs: Observations, stack: contextlib.ExitStack, fs: PowerCutFS | None,
         say: Callable[[str], None]) -> None:
    plan, work = obs.plan, obs.work
    began = time.monotonic()
    data = fs.make_durable_dir("data") if fs is not None else work / "data"
    broker = EmbeddedBroker(data_dir=data, log_path=work / "broker.log", settings={
        **BROKER_SETTINGS, "log.flush.policy": "fsync" if plan.power_cuts else "os"})
    stack.callback(broker.close)
    broker.start()
    _prepare(plan, broker)
    workers = [Worker(plan, broker, work, g, s) for g in GROUPS for s in range(SLOTS)]
    for w in workers:
        stack.callback(w.close)
        w.ensure_running()
    sampler = Sampler(plan, broker)
    sampler.start()
    stack.callback(sampler.stop.set)
    producer = InputProducer(plan, broker, work / "input-producer.log")
    obs.t0 = time.monotonic()
    obs.phases["setup"] = round(obs.t0 - began, 1)
    producer.start()
    _faults(obs, broker, fs, workers, say)
    while producer.is_alive():
        _supervise(workers, 0.2)
    obs.input_end = producer.finished_at
    obs.acked_inputs, obs.input_errors = producer.acked, producer.errors
    obs.ends = end_offsets(broker.bootstrap, f"{plan.kind}-in", plan.partitions)
    loaded = time.monotonic()
    obs.phases["load_and_faults"] = round(loaded - obs.t0, 1)
    _catch_up(obs, sampler, workers)
    caught = time.monotonic()
    obs.phases["catch_up"] = round(caught - loaded, 1)
    if obs.caught_up_at is None:
        for w in workers:
            w.dump_stacks()
        time.sleep(0.5)
    for w in workers:
        w.kill()
        obs.starts[w.name], obs.exits[w.name] = w.starts, w.exits
    sampler.stop.set()
    obs.samples = sampler.samples
    obs.events = read_events(work, plan)
    _read_back(obs, broker, sampler)
    obs.phases["read_back"] = round(time.monotonic() - caught, 1)


def _prepare(plan: Plan, broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, f"{plan.kind}-in", plan.partitions)
    create_topic(broker.bootstrap, f"{plan.kind}-out", plan.partitions)
    if plan.kind == "share":
        for g in GROUPS:
            set_group_configs(broker, plan.group(g), share_auto_offset_reset="earliest",
                              share_record_lock_duration_ms=str(LOCK_MS),
                              share_delivery_count_limit=str(DELIVERY_LIMIT))


def _supervise(workers: list[Worker], seconds: float) -> None:
    """Restart dead workers for `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        for w in workers:
            w.ensure_running()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.1))


def _faults(obs: Observations, broker: EmbeddedBroker, fs: PowerCutFS | None,
            workers: list[Worker], say: Callable[[str], None]) -> None:
    by_name = {w.name: w for w in workers}
    for fault in obs.schedule:
        _supervise(workers, obs.t0 + fault.at - time.monotonic())
        start = time.monotonic()
        note = ""
        if fault.type == "worker-kill":
            w = by_name[fault.target]
            obs.kills.append((start, w.name, w.starts))
            w.kill(restart_after=fault.seconds)
        elif fault.type == "broker-pause":
            pid = broker.process.pid if broker.process is not None else None
            if pid is not None:
                os.kill(pid, signal.SIGSTOP)
                try:
                    time.sleep(fault.seconds)
                finally:
                    os.kill(pid, signal.SIGCONT)
        else:
            broker.kill()
            if fault.type == "power-cut" and fs is not None:
                cut = fs.cut()
                note = f"dropped {cut['dropped_bytes']} unsynced bytes, {cut['dropped_files']} files"
            time.sleep(fault.seconds)
            broker.start()
        end = time.monotonic()
        if fault.type != "worker-kill":
            obs.broker_faults.append((start, end))
        obs.executed.append({"type": fault.type, "planned_at": fault.at,
                             "at": round(start - obs.t0, 2), "end": round(end - obs.t0, 2),
                             "target": fault.target, "seconds": fault.seconds, "note": note})
        obs.last_fault_end = end
        say(f"  {fault.describe()} (done at {end - obs.t0:.2f}s){' ' + note if note else ''}")


def _catch_up(obs: Observations, sampler: Sampler, workers: list[Worker]) -> None:
    ends = [max(e, 0) for e in obs.ends]
    deadline = max(obs.last_fault_end, obs.input_end) + obs.plan.catch_up_s
    groups = [obs.plan.group(g) for g in GROUPS]
    while time.monotonic() < deadline:
        _supervise(workers, 0.2)
        if all([max(c, 0) for c in sampler.latest(g) or []] == ends for g in groups):
            obs.caught_up_at = time.monotonic()
            return


def _read_back(obs: Observations, broker: EmbeddedBroker, sampler: Sampler) -> None:
    """The groups' final offsets, the input and the eos group's output."""
    plan = obs.plan
    # The workers were killed idle, but one may have been between poll and commit: its
    # transaction ends by the transaction timeout (10 s) or the session timeout (KIP-1309).
    deadline = time.monotonic() + 20
    while (open_txns := _open_transactions(broker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    obs.open_transactions = open_txns
    for g in GROUPS:
        with contextlib.suppress(OSError, ConnectionError, AssertionError):
            final = sampler.read(plan.group(g))
            if final is not None:
                obs.final_offsets[plan.group(g)] = final
    try:
        msgs = consume_confluent(broker.bootstrap, f"{plan.kind}-in", sum(obs.ends), timeout=60)
        obs.inputs = {(m.partition(), m.offset()): m.value() for m in msgs}
    except AssertionError as exc:
        obs.errors.append(f"reading the input back: {exc}")
    eos = obs.final(plan.group("eos"))
    archived = {k for k, n in obs.max_delivery_counts("eos").items() if n >= DELIVERY_LIMIT}
    expected = sum(1 for (p, o), v in obs.inputs.items()
                   if o < eos[p] and not v.endswith(POISON) and (p, o) not in archived)
    obs.outputs = read_all(broker.bootstrap, f"{plan.kind}-out", at_least=expected, idle=2.0,
                           timeout=60)


def read_events(work: Path, plan: Plan) -> dict[str, list[Event]]:
    """The workers' events files, by group (`alo`, `eos`), in file order per worker."""
    out: dict[str, list[Event]] = {g: [] for g in GROUPS}
    for g in GROUPS:
        for slot in range(SLOTS):
            name = f"{g}-{slot}"
            path = work / f"events-{name}.txt"
            if not path.exists():
                continue
            incarnation = 0
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue  # a line cut short (cannot happen with one write(2) per batch)
                if parts[1] == "S":
                    incarnation += 1
                    continue
                out[g].append(Event(float(parts[0]), name, incarnation, parts[1],
                                    tuple(parts[2:])))
    return out
