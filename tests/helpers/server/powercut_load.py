"""Power cuts under load: a broker on the power-cut filesystem (powercut.py) with
`log.flush.policy=fsync`, real clients writing to it over TCP, and, after each cut and restart,
a check of everything the broker acknowledged (DESIGN invariants 1-3 and 7; issue 14, item 6).

A round: the load runs for a random time (seeded), then the broker is killed (`kill -9`; or
stopped cleanly, or killed and cut again right after its restart: see `PowerCutLoad.round`)
and the power cut (everything not fsynced is dropped), the broker starts again on what is left,
and the clients still running finish what they were doing against it. Then every transactional
id of the load is initialized again (which ends what the cut left open), and the check reads
the topics with read_committed from the beginning. The load:

- idempotent producers (confluent-kafka, acks=all) into `idem`: each record acknowledged must
  be in the log once, at the offset it was acknowledged at;
- transactional producers into `txn`, one transaction in five aborted: two with confluent-kafka,
  one with this project's client whose transactions commit a group's offsets half of the time
  (`send_offsets_to_transaction`, so `__consumer_offsets` takes part). A transaction the client
  was told committed is complete, one it aborted or never committed is invisible, one whose
  commit got no answer is all there or not at all, and the group's committed offset is that of
  the newest visible transaction that set one;
- a consumer committing offsets of a group (OffsetCommit, synchronous): the committed offset is
  the last acknowledged one, or the one in flight at the cut;
- an admin client creating topics, adding a partition to some, giving each an acknowledged
  record per partition, and deleting some: every topic whose creation was acknowledged exists,
  with its partitions and records, and none whose deletion was.

Values are unique (round, worker, sequence), so "once" and "where" are plain dictionary checks.
The broker's log after each start must hold no ERROR line and no traceback, a client error
before the cut is a problem too (the broker was healthy then), and a cut after a clean stop must
find nothing unsynced.

A test tool (tests/system/server/test_power_cut.py, bench/power_cut.py), kept out of the installed
package: it drives an unchanged client (confluent-kafka) beside this project's own on purpose,
since invariants 1-3 must hold whichever client wrote, and confluent-kafka is needed by tests
and benchmarks only (issue 18).
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from exactly.client import Producer as ExactlyProducer
from exactly.testing import EmbeddedBroker
from tests.rigs.powercut import PowerCutFS

IDEMPOTENT_TOPIC = "idem"
TXN_TOPIC = "txn"
SOURCE_TOPIC = "src"  # the topic whose offsets the groups commit (it holds no records)
PLAIN_GROUP = "plain-committer"
TXN_WORKERS = 3
IDEMPOTENT_WORKERS = 2
RECORD_BYTES = 120
HOW = ("kill", "stop", "kill-twice")  # how a round ends the broker before the cut

# Small segments of every topic, internal ones included, so that rolls, producer snapshots and
# compaction (of __transaction_state and __consumer_offsets) happen during the load; frequent
# recovery-point checkpoints, which write snapshots and a checkpoint file each time.
BROKER_SETTINGS = {
    "log.flush.policy": "fsync",
    "log.flush.offset.checkpoint.interval.ms": 1000,
    "log.segment.bytes": 65536,
    "transaction.state.log.segment.bytes": 16384,
    "offsets.topic.segment.bytes": 16384,
    "log.cleaner.backoff.ms": 500,
    # A producer's metadata refresh would create a deleted topic again (librdkafka asks for it).
    "auto.create.topics.enable": "false",
}

_CLIENT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
           "retry.backoff.ms": 50, "socket.connection.setup.timeout.ms": 5000}
_PRODUCER = {**_CLIENT, "acks": "all", "linger.ms": 2, "batch.size": 16384,
             "queue.buffering.max.messages": 2000, "message.timeout.ms": 30000}
_TIMEOUT = 15.0  # seconds a transactional call may take (the restart is about one)

Placement = tuple[str, int, int]  # topic, partition, offset
_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)  # the load's own doing


@dataclass
class Txn:
    """One transaction of the load and what the client was told."""

    transactional_id: str
    values: list[bytes] = field(default_factory=list)
    placed: dict[bytes, Placement] = field(default_factory=dict)
    # "open" (never ended by the client), "aborted" (abort asked), "in doubt" (commit asked, no
    # answer) or "committed" (commit answered).
    outcome: str = "open"
    group: str | None = None  # the group whose offset it commits
    source_offset: int = -1


@dataclass
class Ledger:
    """What the broker acknowledged, over all rounds."""

    acked: dict[bytes, Placement] = field(default_factory=dict)
    txns: list[Txn] = field(default_factory=list)
    created: dict[str, int] = field(default_factory=dict)  # topic -> partitions
    # topic -> partitions asked by a CreatePartitions not answered: either count may be found
    growing: dict[str, int] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    plain_acked: int = -1  # the last offset PLAIN_GROUP's commit of was answered
    plain_attempted: int = -1  # the last one asked
    sent: int = 0
    client_errors: list[str] = field(default_factory=list)  # before a cut: a problem
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, where: str, error: object, *, before_cut: bool) -> None:
        if before_cut:
            with self.lock:
                self.client_errors.append(f"{where}: {error}")


@dataclass
class RoundReport:
    round: int
    how: str  # one of HOW
    load_seconds: float
    cut: dict[str, int]
    problems: list[str]
    restart_seconds: float
    check_seconds: float


class PowerCutLoad:
    """A broker on `fs` and the load against it, round after round (see the module docstring).

    `say` receives a line per event worth printing (the seed, each cut and what it dropped)."""

    def __init__(self, fs: PowerCutFS, *, seed: int, say: Callable[[str], None] = print,
                 broker_settings: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.fs = fs
        self.seed = seed
        self.rng = random.Random(seed)
        self.say = say
        self.ledger = Ledger()
        self.broker = EmbeddedBroker(data_dir=fs.make_durable_dir("data"),
                                     settings={**BROKER_SETTINGS, **(broker_settings or {})},
                                     env=env)
        self.rounds = 0
        self._txn_seq = [0] * TXN_WORKERS
        self._cut_at = float("inf")  # time.monotonic() of the kill: errors before it count

    # -- the run --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the broker and create the load's topics (acknowledged: checked like the rest)."""
        self.say(f"power-cut load: seed {self.seed}")
        self.broker.start()
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        topics = {IDEMPOTENT_TOPIC: 3, TXN_TOPIC: 3, SOURCE_TOPIC: 1}
        futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()],
                                      operation_timeout=10)
        for name, future in futures.items():
            future.result(timeout=30)
            self.ledger.created[name] = topics[name]

    def round(self, load_seconds: float, how: str | None = None) -> RoundReport:
        """Load for `load_seconds`, end the broker, cut the power, start it again, let the
        clients finish, and check everything acknowledged so far. `how` the broker ends (one
        of HOW; drawn from the seed when None): `kill` (kill -9), `stop` (a clean stop, which
        must leave nothing for the cut to take) or `kill-twice` (kill -9 and a cut again right
        after the restart, before any client: a cut of what recovery wrote)."""
        self.rounds += 1
        if how is None:
            how = self.rng.choices(HOW, weights=(3, 1, 1))[0]
        stop = threading.Event()
        self._cut_at = float("inf")
        workers = self._workers(stop)
        for worker in workers:
            worker.start()
        time.sleep(load_seconds)
        self._cut_at = time.monotonic()
        if how == "stop":
            self.broker.stop()
        else:
            self.broker.kill()
        cut = self.fs.cut()
        stop.set()
        started = time.monotonic()
        problems = self._start_broker()
        if how == "kill-twice" and not problems:
            self.broker.kill()
            again = self.fs.cut()
            cut = {key: value + cut[key] if key.startswith(("dropped", "entries")) else value
                   for key, value in again.items()}
            problems = self._start_broker()
        if how == "stop" and cut["dropped_bytes"] + cut["entries_gone"]:
            problems.append(f"a cut after a clean stop dropped {cut['dropped_bytes']} bytes and "
                            f"{cut['entries_gone']} directory entries: the stop left them unsynced")
        restart_seconds = time.monotonic() - started
        for worker in workers:  # they finish against the restarted broker
            worker.join(60)
            if worker.is_alive():
                frame = sys._current_frames().get(worker.ident or 0)
                stack = "".join(traceback.format_stack(frame)[-4:]) if frame else ""
                problems.append(f"{worker.name} did not finish within 60 s of the restart, "
                                f"in:\n{stack}")
        checked = time.monotonic()
        finish_seconds = checked - started - restart_seconds
        if not problems:
            problems = self.check()
        check_seconds = time.monotonic() - checked
        self.say(f"round {self.rounds}: {how}, cut after {load_seconds:.2f}s of load dropped "
                 f"{cut['dropped_bytes']} unsynced bytes, {cut['dropped_files']} files, "
                 f"{cut['entries_gone']} directory entries (and brought {cut['entries_back']} "
                 f"back); restart {restart_seconds:.2f}s, clients done {finish_seconds:.2f}s "
                 f"later, check {check_seconds:.2f}s; "
                 f"{len(problems)} problem(s)")
        return RoundReport(self.rounds, how, load_seconds, cut, problems, restart_seconds,
                           check_seconds)

    def close(self) -> None:
        self.broker.close()

    def _start_broker(self) -> list[str]:
        """Start the broker on what the cut left; its log must show no error."""
        since = len(self.broker.log_text())
        try:
            self.broker.start()
        except Exception as exc:  # noqa: BLE001 - a broker that does not start is the finding
            return [f"the broker did not start after the cut: {exc}"]
        text = self.broker.log_text()[since:]
        return [f"the broker logged after the cut: {line.strip()[:300]}"
                for line in text.splitlines() if " ERROR " in line or "Traceback" in line]

    # -- the check ------------------------------------------------------------------------------

    def check(self) -> list[str]:
        """End what the cut left open, then read everything back and compare with the ledger."""
        problems: list[str] = []
        for k in range(TXN_WORKERS):  # a new producer with the id ends its old transaction
            producer = Producer({**_PRODUCER, "bootstrap.servers": self.broker.bootstrap,
                                 "transactional.id": f"txn-{k}"})
            try:
                producer.init_transactions(60)
            except KafkaException as exc:
                problems.append(f"init_transactions of txn-{k} after the restart failed: {exc}")
            finally:
                producer.flush(5)
        if problems:
            return problems
        return check(self.ledger, self.broker.bootstrap)

    # -- the workers ----------------------------------------------------------------------------

    def _workers(self, stop: threading.Event) -> list[threading.Thread]:
        r = self.rounds
        seeds = [self.rng.randrange(1 << 30) for _ in range(TXN_WORKERS + 1)]
        workers = [threading.Thread(target=self._idempotent, args=(stop, f"i{r}-{k}"),
                                    name=f"idempotent-{k}") for k in range(IDEMPOTENT_WORKERS)]
        workers += [threading.Thread(target=self._transactional, args=(stop, k, seeds[k]),
                                     name=f"transactional-{k}") for k in range(TXN_WORKERS - 1)]
        k = TXN_WORKERS - 1
        workers.append(threading.Thread(target=self._own_transactional, args=(stop, k, seeds[k]),
                                        name=f"transactional-{k}"))
        workers.append(threading.Thread(target=self._plain_commits, args=(stop,),
                                        name="offset-commits"))
        workers.append(threading.Thread(target=self._create_topics,
                                        args=(stop, r, seeds[-1]), name="create-topics"))
        return workers

    def _before_cut(self) -> bool:
        return time.monotonic() < self._cut_at

    def _on_delivery(self, where: str, into: dict[bytes, Placement]
                     ) -> Callable[[KafkaError | None, Message], None]:
        ledger = self.ledger

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                value = msg.value()
                assert isinstance(value, bytes)
                with ledger.lock:
                    into[value] = (str(msg.topic()), int(msg.partition() or 0),
                                   int(msg.offset() or 0))
            elif err.code() not in _PURGED:
                ledger.error(where, err, before_cut=self._before_cut())
        return delivered

    def _producer(self, where: str, **config: Any) -> Producer:
        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.ledger.error(where, f"fatal: {err}", before_cut=True)
        return Producer({**_PRODUCER, "bootstrap.servers": self.broker.bootstrap,
                         "error_cb": on_error, **config})

    def _idempotent(self, stop: threading.Event, name: str) -> None:
        producer = self._producer(name, **{"enable.idempotence": True})
        delivered = self._on_delivery(name, self.ledger.acked)
        n = 0
        while not stop.is_set():
            value = f"{name}-{n}".encode().ljust(RECORD_BYTES, b".")
            try:
                producer.produce(IDEMPOTENT_TOPIC, value, key=str(n % 11).encode(),
                                 on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)
                continue
            n += 1
            producer.poll(0)
        self._finish(producer)
        with self.ledger.lock:
            self.ledger.sent += n

    @staticmethod
    def _finish(producer: Producer) -> None:
        """Send nothing new; let what is in flight be answered by the restarted broker."""
        producer.purge(in_queue=True, in_flight=False)
        producer.flush(_TIMEOUT)
        producer.purge()
        producer.flush(1)

    def _new_txn(self, tid: str) -> Txn:
        txn = Txn(tid)
        with self.ledger.lock:
            self.ledger.txns.append(txn)
        return txn

    def _transactional(self, stop: threading.Event, k: int, seed: int) -> None:
        """confluent-kafka transactions, without offsets: librdkafka's send_offsets_to_transaction
        can hang past its timeout when the coordinator restarts (librdkafka issues 5456, 5511),
        so the worker with offsets uses this project's client (_own_transactional)."""
        rng = random.Random(seed)
        tid = f"txn-{k}"
        producer = self._producer(tid, **{"transactional.id": tid})
        try:
            producer.init_transactions(_TIMEOUT)
            while not stop.is_set():
                seq = self._txn_seq[k]
                self._txn_seq[k] += 1
                txn = self._new_txn(tid)
                delivered = self._on_delivery(tid, txn.placed)
                producer.begin_transaction()
                for j in range(rng.randint(1, 12)):
                    value = f"{tid}-{seq}-{j}".encode().ljust(RECORD_BYTES, b".")
                    txn.values.append(value)
                    producer.produce(TXN_TOPIC, value, key=str(j).encode(),
                                     on_delivery=delivered)
                    producer.poll(0)
                self._end(txn, rng, lambda: producer.commit_transaction(_TIMEOUT),
                          lambda: producer.abort_transaction(_TIMEOUT))
        except KafkaException as exc:
            self.ledger.error(tid, exc, before_cut=self._before_cut())
        finally:
            producer.purge()
            with contextlib.suppress(KafkaException):  # a fenced producer raises here too
                producer.flush(1)

    def _own_transactional(self, stop: threading.Event, k: int, seed: int) -> None:
        """This project's client: transactions that also commit a group's offsets."""
        rng = random.Random(seed)
        tid, group = f"txn-{k}", f"txn-group-{k}"
        producer = ExactlyProducer({"bootstrap.servers": self.broker.bootstrap,
                                    "transactional.id": tid, "linger.ms": 2,
                                    "request.timeout.ms": 5000, "delivery.timeout.ms": 20000,
                                    "transaction.timeout.ms": 60000})
        try:
            producer.init_transactions()
            while not stop.is_set():
                seq = self._txn_seq[k]
                self._txn_seq[k] += 1
                txn = self._new_txn(tid)
                producer.begin_transaction()
                futures = []
                for j in range(rng.randint(1, 12)):
                    value = f"{tid}-{seq}-{j}".encode().ljust(RECORD_BYTES, b".")
                    txn.values.append(value)
                    futures.append((value, producer.send(TXN_TOPIC, value, key=str(j))))
                if rng.random() < 0.5:
                    txn.group, txn.source_offset = group, seq + 1
                    producer.send_offsets_to_transaction({(SOURCE_TOPIC, 0): seq + 1}, group)
                try:
                    self._end(txn, rng, producer.commit_transaction, producer.abort_transaction)
                finally:
                    for value, future in futures:
                        if future.done() and future.exception() is None:
                            meta = future.result()
                            txn.placed[value] = (meta.topic, meta.partition, meta.offset)
        except Exception as exc:  # noqa: BLE001 - any error of the client is reported alike
            self.ledger.error(tid, exc, before_cut=self._before_cut())
        finally:
            with contextlib.suppress(Exception):
                producer.close(5)

    @staticmethod
    def _end(txn: Txn, rng: random.Random, commit: Callable[[], None],
             abort: Callable[[], None]) -> None:
        """Abort one transaction in five, commit the others; the outcome as the client knows it."""
        if rng.random() < 0.2:
            txn.outcome = "aborted"
            abort()
        else:
            txn.outcome = "in doubt"
            commit()
            txn.outcome = "committed"

    def _plain_commits(self, stop: threading.Event) -> None:
        consumer = Consumer({**_CLIENT, "bootstrap.servers": self.broker.bootstrap,
                             "group.id": PLAIN_GROUP, "enable.auto.commit": False})
        ledger = self.ledger
        try:
            while not stop.wait(0.02):
                offset = max(ledger.plain_attempted, ledger.plain_acked) + 1
                ledger.plain_attempted = offset
                consumer.commit(offsets=[TopicPartition(SOURCE_TOPIC, 0, offset)],
                                asynchronous=False)
                ledger.plain_acked = offset
        except KafkaException as exc:
            ledger.error(PLAIN_GROUP, exc, before_cut=self._before_cut())
        finally:
            consumer.close()

    def _create_topics(self, stop: threading.Event, r: int, seed: int) -> None:
        rng = random.Random(seed)
        admin = AdminClient({**_CLIENT, "bootstrap.servers": self.broker.bootstrap})
        producer = self._producer("create-topics", **{"enable.idempotence": True})
        delivered = self._on_delivery("create-topics", self.ledger.acked)
        n = 0
        while not stop.wait(rng.uniform(0.1, 0.4)):
            name, partitions = f"new-{r}-{n}", rng.randint(1, 3)
            n += 1
            try:
                admin.create_topics([NewTopic(name, partitions, 1)],
                                    operation_timeout=10)[name].result(timeout=_TIMEOUT)
                with self.ledger.lock:
                    self.ledger.created[name] = partitions
                if rng.random() < 0.3:  # CreatePartitions: the topic metadata written again
                    with self.ledger.lock:  # cut before its answer, it may have taken effect
                        self.ledger.growing[name] = partitions + 1
                    admin.create_partitions([NewPartitions(name, partitions + 1)],
                                            operation_timeout=10)[name].result(timeout=_TIMEOUT)
                    partitions += 1
                    with self.ledger.lock:
                        self.ledger.created[name] = partitions
                        del self.ledger.growing[name]
            except KafkaException as exc:
                self.ledger.error(f"create {name}", exc, before_cut=self._before_cut())
                break
            for p in range(partitions):
                producer.produce(name, f"{name}/{p}".encode(), partition=p,
                                 on_delivery=delivered)
            producer.flush(_TIMEOUT)
            if rng.random() < 0.15 and not self._delete_topic(admin, f"new-{r}-{rng.randrange(n)}"):
                break
        self._finish(producer)

    def _delete_topic(self, admin: AdminClient, name: str) -> bool:
        """DeleteTopics: once acknowledged, the topic must stay gone. Until then it may or may
        not be, so it and its records leave the ledger first. False on an error."""
        ledger = self.ledger
        with ledger.lock:
            if ledger.created.pop(name, None) is None:
                return True  # deleted already, or never created
            for value in [v for v, (topic, _, _) in ledger.acked.items() if topic == name]:
                del ledger.acked[value]
        try:
            admin.delete_topics([name], operation_timeout=10)[name].result(timeout=_TIMEOUT)
        except KafkaException as exc:
            ledger.error(f"delete {name}", exc, before_cut=self._before_cut())
            return False
        with ledger.lock:
            ledger.deleted.add(name)
        return True


# -- reading back ---------------------------------------------------------------------------------

def read_committed(bootstrap: str, topics: Mapping[str, int], *, timeout: float = 120
                   ) -> tuple[dict[bytes, list[Placement]], list[str]]:
    """Every record of `topics` (name -> partitions) visible to read_committed: value -> where
    it is. Problems: a partition read_committed cannot read to its end (an open transaction)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "power-cut-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    found: dict[bytes, list[Placement]] = {}
    problems: list[str] = []
    pending = {(t, p) for t, n in topics.items() for p in range(n)}
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(pending)])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            where = (str(msg.topic()), int(msg.partition() or 0))
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(where)
                else:
                    problems.append(f"reading {where[0]}-{where[1]}: {err}")
                    pending.discard(where)
                continue
            value = msg.value()
            assert isinstance(value, bytes)
            found.setdefault(value, []).append((*where, int(msg.offset() or 0)))
        problems += [f"{t}-{p}: read_committed did not reach the end within {timeout:g}s"
                     for t, p in sorted(pending)]
        for t, n in topics.items():
            for p in range(n):
                position = consumer.position([TopicPartition(t, p)])[0].offset
                _, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10,
                                                         cached=False)
                if 0 <= position < high:
                    problems.append(f"{t}-{p}: read_committed stops at offset {position} below "
                                    f"the last stable offset {high}: a transaction is left open")
    finally:
        consumer.close()
    return found, problems


def committed_offset(bootstrap: str, group: str) -> int:
    """The offset `group` committed for SOURCE_TOPIC-0 (-1 if none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offset: int = consumer.committed([TopicPartition(SOURCE_TOPIC, 0)], timeout=30)[0].offset
    finally:
        consumer.close()
    return offset if offset >= 0 else -1


def check(ledger: Ledger, bootstrap: str) -> list[str]:
    """Everything `ledger` says the broker acknowledged, against what it serves now."""
    problems = [f"client error before the cut: {e}" for e in ledger.client_errors]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = {name: len(meta.partitions)
                for name, meta in admin.list_topics(timeout=30).topics.items()}
    for name, partitions in sorted(ledger.created.items()):
        if existing.get(name) not in (partitions, ledger.growing.get(name, partitions)):
            problems.append(f"topic {name} was created with {partitions} partition(s) and "
                            f"acknowledged; now it has {existing.get(name, 'none')}")
    problems += [f"topic {name} is back: its deletion was acknowledged"
                 for name in sorted(ledger.deleted & existing.keys())]
    topics = {name: n for name, n in existing.items() if not name.startswith("__")}
    found, read_problems = read_committed(bootstrap, topics)
    problems += read_problems
    problems += _check_records(ledger, found)
    problems += _check_groups(ledger, found, bootstrap)
    return problems


def _check_records(ledger: Ledger, found: Mapping[bytes, list[Placement]]) -> list[str]:
    problems = [f"record {v[:40]!r} is in the log {len(where)} times: {where[:3]}"
                for v, where in found.items() if len(where) > 1]
    problems += _where(ledger.acked.items(), found, "acknowledged records")
    for txn in ledger.txns:
        visible = [v for v in txn.values if v in found]
        if txn.outcome == "committed":
            problems += _where(txn.placed.items(), found,
                               f"records of a committed transaction of {txn.transactional_id}")
            if len(visible) != len(txn.values):
                problems.append(f"committed transaction of {txn.transactional_id} shows "
                                f"{len(visible)} of its {len(txn.values)} records")
        elif txn.outcome == "in doubt":
            if visible and len(visible) != len(txn.values):
                problems.append(f"the transaction of {txn.transactional_id} whose commit got no "
                                f"answer shows {len(visible)} of its {len(txn.values)} records")
        elif visible:
            problems.append(f"{txn.outcome} transaction of {txn.transactional_id} (never "
                            f"committed) shows {len(visible)} of its {len(txn.values)} records, "
                            f"e.g. {visible[0][:40]!r}")
    return problems


def _where(expected: Iterable[tuple[bytes, Placement]], found: Mapping[bytes, list[Placement]],
           what: str) -> list[str]:
    lost: list[str] = []
    moved: list[str] = []
    for value, placement in expected:
        where = found.get(value)
        if where is None:
            lost.append(f"{value[:40]!r} at {placement}")
        elif placement not in where:
            moved.append(f"{value[:40]!r} acknowledged at {placement}, found at {where[0]}")
    problems = []
    if lost:
        problems.append(f"{what}: {len(lost)} lost, e.g. {lost[:3]}")
    if moved:
        problems.append(f"{what}: {len(moved)} moved, e.g. {moved[:3]}")
    return problems


def _check_groups(ledger: Ledger, found: Mapping[bytes, list[Placement]], bootstrap: str
                  ) -> list[str]:
    problems: list[str] = []
    if ledger.plain_attempted >= 0:
        got = committed_offset(bootstrap, PLAIN_GROUP)
        if not ledger.plain_acked <= got <= ledger.plain_attempted:
            problems.append(f"group {PLAIN_GROUP} has offset {got}; its commit of "
                            f"{ledger.plain_acked} was acknowledged, {ledger.plain_attempted} "
                            "the last asked")
    expected: dict[str, int] = {}
    for txn in ledger.txns:
        if txn.group is None:
            continue
        expected.setdefault(txn.group, -1)
        visible = txn.outcome == "committed" or (
            txn.outcome == "in doubt" and any(v in found for v in txn.values))
        if visible:
            expected[txn.group] = max(expected[txn.group], txn.source_offset)
    for group, offset in sorted(expected.items()):
        got = committed_offset(bootstrap, group)
        if got != offset:
            problems.append(f"group {group} has offset {got}; the newest visible transaction "
                            f"that committed its offsets set {offset}")
    return problems
