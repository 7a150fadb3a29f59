"""`exactly demo` (`make demo`): the Spark pipeline, exactly-once through driver crashes.

It starts an embedded broker, feeds the topic `orders` with JSON order events at a steady rate
(a few percent of them malformed), and runs the pipeline of `exactly.demo.pipeline` as a Spark
driver process. While the events flow it kills the driver with SIGKILL — the whole driver: JVM,
Python, workers — a few times at random moments, and starts it again on its checkpoint. At the
end it waits for the pipeline to process the whole input (at most --catch-up-seconds), reads
every output topic with read_committed and prints what came out against what went in:
duplicates, missing records, wrong records and aggregates, transactions left open. It exits 1 if
any of them is not zero, and says which failure it is (exactly.demo.verdict): the pipeline had
not caught up when the wait ended (where it was in the input), or records were lost, duplicated
or wrong (counts and examples of each). The broker's log and each driver run's log are kept in
the demo's directory (printed at the start).

With --cluster N the pipeline runs on a Spark standalone cluster of N workers started on this
machine (exactly.demo.spark_cluster.SparkCluster; executors are JVMs of their own) and the kills
take turns: the driver, one executor JVM, a whole worker with its executors (started again a few
seconds later). With --master spark://HOST:PORT it runs on a cluster you already have: the `exactly`
package is shipped with the job (exactly.spark.ship) and only the driver, a process of this
machine, is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from exactly import failpoints
from exactly.client import Admin, Consumer, KafkaError, NewTopic, Producer
from exactly.demo.pipeline import (
    DLQ_TOPIC,
    ENRICHED_TOPIC,
    IN_TOPIC,
    OUTPUT_TOPICS,
    QUERIES,
    STATS_TOPIC,
)
from exactly.demo.spark_cluster import SparkCluster
from exactly.demo.verdict import (
    CatchUp,
    Fed,
    check_outputs,
    expected_stats,
    headline,
    offsets,
    verdict,
)
from exactly.protocol.structs import TopicPartition
from exactly.testing import EmbeddedBroker

BAD_SHARE = 0.03
CATCH_UP_SECONDS = 300.0  # --catch-up-seconds: the wait ends as soon as the pipeline is done


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


def make_event(i: int, rng: random.Random, base_ms: int, rate: float) -> tuple[bytes, bytes, bool]:
    """(key, value, valid): the i-th order event; event time advances with i."""
    customer = f"c{rng.randrange(40):02d}"
    amount = rng.randrange(100, 25000) / 100
    event: dict[str, Any] = {"order_id": f"o{i:07d}", "customer": customer,
             "amount": amount, "ts": base_ms + int(i * 1000 / rate)}
    if rng.random() < BAD_SHARE:
        kind = rng.randrange(3)
        if kind == 0:
            return customer.encode(), b'{"order_id": "o%07d", "amount": ' % i, False
        if kind == 1:
            event["amount"] = -amount
        else:
            del event["customer"]
        return customer.encode(), json.dumps(event).encode(), False
    return customer.encode(), json.dumps(event).encode(), True


class Feeder(threading.Thread):
    def __init__(self, bootstrap: str, rate: float, seconds: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.rate, self.seconds = bootstrap, rate, seconds
        self.rng = random.Random(seed)
        self.fed = Fed()
        self.base_ms = int(time.time() * 1000)
        self.count = 0

    def run(self) -> None:
        pending = []
        with Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5}) as producer:
            started = time.monotonic()
            total = int(self.rate * self.seconds)
            for i in range(total):
                delay = started + i / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                key, value, valid = make_event(i, self.rng, self.base_ms, self.rate)
                pending.append((producer.send(IN_TOPIC, value, key), value, valid))
                self.count = i + 1
            # the last event: far ahead in event time, so that every window before it closes
            tick = {"order_id": "o-end", "customer": "c00", "amount": 1.0,
                    "ts": self.base_ms + int(total * 1000 / self.rate) + 3600_000}
            pending.append((producer.send(IN_TOPIC, json.dumps(tick).encode(), b"c00"),
                            json.dumps(tick).encode(), True))
            producer.flush()
        for future, value, valid in pending:
            meta = future.result(timeout=0)  # the idempotent producer wrote each exactly once
            at = (meta.partition, meta.offset)
            if valid:
                event = json.loads(value)
                self.fed.good[event["order_id"]] = event
                self.fed.good_at[event["order_id"]] = at
            else:
                self.fed.bad[value] += 1
                self.fed.bad_at.setdefault(value, []).append(at)
            self.fed.total += 1


class Driver:
    """The Spark driver process (python -m exactly.demo.pipeline) in a session of its own; its
    stderr (Spark's log, Python tracebacks) goes to `log`."""

    def __init__(self, bootstrap: str, checkpoint: Path, delivery: str, trigger: float,
                 spark_args: list[str], log: Path, resume: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
        self.log = log
        with open(log, "ab") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "exactly.demo.pipeline", bootstrap, str(checkpoint),
                 "--delivery", delivery, "--trigger-seconds", str(trigger), *spark_args,
                 *(["--resume", resume] if resume else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                text=True, env=env, start_new_session=True)
        self.batches: Counter[str] = Counter()
        self.progress: dict[str, dict[str, Any]] = {}
        self.rows: Counter[str] = Counter()
        self.ms: Counter[str] = Counter()
        self.errors: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "batch" in msg:
                self.batches[msg["query"]] += 1
                self.rows[msg["query"]] += msg["rows"]
                self.ms[msg["query"]] += msg["ms"]
                self.progress[msg["query"]] = msg
            elif "error" in msg:
                self.errors.put(msg["error"])
            elif "restarted" in msg:
                say(f"the {msg['query']} query ended: {msg['restarted']}")

    def kill(self) -> None:
        failpoints.kill_session(self.proc.pid)
        self.proc.wait()

    def stop(self, timeout: float = 60) -> int | None:
        """Ask the driver to stop between batches; its exit code, or None if it had not ended
        `timeout` s later (then it is killed)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            return self.proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            if self.proc.poll() is not None:
                return self.proc.returncode
            self.kill()
            return None


def assign_to_end(consumer: Consumer, bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    """Assign every partition of `topic` to `consumer`; return where each one ends (for a
    read_committed consumer, its last stable offset)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        parts = admin.describe_topics([topic])[topic].partitions
    tps = [TopicPartition(topic, p.partition) for p in parts]
    consumer.assign(tps)
    consumer.seek_to_end(tps)
    return {tp: consumer.position(tp) for tp in tps}


def read_committed(bootstrap: str, topic: str) -> list[Any]:
    """Every record of `topic`, read_committed, up to the end of each partition."""
    out = []
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as consumer:
        ends = assign_to_end(consumer, bootstrap, topic)
        consumer.seek_to_beginning(list(ends))
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end")
            out.extend(consumer.poll(timeout_ms=500))
    return out


def input_end(bootstrap: str) -> dict[str, dict[str, int]]:
    """The end of the input topic, as Spark writes a batch's end offset: {topic: {partition: n}}."""
    with Consumer({"bootstrap.servers": bootstrap}) as consumer:
        ends = assign_to_end(consumer, bootstrap, IN_TOPIC)
    return {IN_TOPIC: {str(tp.partition): end for tp, end in ends.items()}}


def verify(bootstrap: str, fed: Fed, catch_up: CatchUp) -> tuple[list[Any], int]:
    """Each output topic read_committed against the input (exactly.demo.verdict.OutputCheck),
    and the transactions of the queries left open."""
    checks = check_outputs(fed, [r.value for r in read_committed(bootstrap, ENRICHED_TOPIC)],
                           [r.value for r in read_committed(bootstrap, DLQ_TOPIC)],
                           [r.value for r in read_committed(bootstrap, STATS_TOPIC)], catch_up)
    from exactly.spark import open_transactions  # here: `exactly demo --help` needs no pyspark

    client = {"bootstrap.servers": bootstrap}
    open_txns = sum(len(open_transactions(client, f"exactly-spark-{q}")) for q in QUERIES)
    return checks, open_txns


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    cells = [header] + [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def spark_arguments(cluster: SparkCluster | None, master: str | None) -> list[str]:
    """The pipeline's Spark arguments: a cluster of this machine, a given master, or local."""
    if cluster is not None:
        confs = {**cluster.driver_config(), "spark.task.maxFailures": "8"}
        return ["--master", cluster.master_url,
                *(arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}"))]
    if master is not None:
        return ["--master", master, "--ship", "--conf", "spark.task.maxFailures=8"]
    return []


class Killer:
    """Takes turns at killing: the driver, then (on a cluster of this machine) an executor JVM,
    then a whole worker, which comes back a few seconds later."""

    def __init__(self, cluster: SparkCluster | None, rng: random.Random) -> None:
        self.cluster, self.rng = cluster, rng
        self.kinds = ["driver", "executor", "worker"] if cluster is not None else ["driver"]
        self.done: Counter[str] = Counter()
        self.worker_down: tuple[int, float] | None = None  # (index, when to start it again)

    @property
    def total(self) -> int:
        return sum(self.done.values())

    def next_kind(self) -> str:
        return self.kinds[self.total % len(self.kinds)]

    def kill_executor(self) -> str:
        assert self.cluster is not None
        pids = self.cluster.executor_pids()
        if not pids:
            return "no executor running: nothing killed"
        pid = self.rng.choice(pids)
        self.cluster.kill_executor(pid)
        self.done["executor"] += 1
        return f"kill -9 of executor JVM {pid}; its tasks run again elsewhere"

    def kill_worker(self) -> str:
        assert self.cluster is not None
        index = self.rng.randrange(len(self.cluster.workers))
        self.cluster.kill_worker(index)
        self.worker_down = (index, time.monotonic() + 5)
        self.done["worker"] += 1
        return f"kill -9 of worker {index} with its executors; it comes back in 5 s"

    def revive(self) -> str | None:
        if self.cluster is None or self.worker_down is None or \
                self.worker_down[1] > time.monotonic():
            return None
        index, _ = self.worker_down
        self.worker_down = None
        self.cluster.restart_worker(index)
        return f"worker {index} started again"

    def summary(self) -> str:
        return "   ".join(f"{kind} kills: {self.done[kind]}" for kind in self.kinds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exactly demo", description=__doc__.split("\n")[0])
    parser.add_argument("--crashes", type=int, default=3,
                        help="kills: of the driver, and on --cluster by turns of the driver, an "
                             "executor and a worker (default 3)")
    parser.add_argument("--seconds", type=float, default=60,
                        help="how long events are fed (default 60)")
    parser.add_argument("--rate", type=float, default=200,
                        help="events per second (default 200)")
    parser.add_argument("--trigger-seconds", type=float, default=2.0,
                        help="micro-batch interval of the queries (default 2)")
    parser.add_argument("--delivery", default="exactly-once",
                        choices=["exactly-once", "at-least-once"],
                        help="the sinks' deliveryGuarantee (default exactly-once)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the events and of the kill times (default: random, printed)")
    parser.add_argument("--catch-up-seconds", type=float, default=CATCH_UP_SECONDS, metavar="S",
                        help="once the feeding is done, how long to wait at most for the "
                             "pipeline to process the whole input before the output is checked; "
                             "if it has not, the verdict says where it was (default "
                             f"{CATCH_UP_SECONDS:g})")
    parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,...]",
                        help="run against this broker or cluster (Exactly, or Apache Kafka: "
                             "the sinks then commit with transactionResume=producer-id) instead "
                             "of starting an Exactly broker; the demo's topics must not exist "
                             "there yet")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cluster", type=int, default=None, metavar="N",
                       help="run Spark as a standalone cluster of N workers (1 core each) on "
                            "this machine (default: local[2] in the driver)")
    where.add_argument("--master", default=None, metavar="spark://HOST:PORT",
                       help="run on a Spark cluster you already have (it must reach this "
                            "machine's broker and driver)")
    args = parser.parse_args(argv)
    if args.cluster is not None and args.cluster < 1:
        parser.error("--cluster needs at least 1 worker")
    if args.catch_up_seconds <= 0:
        parser.error("--catch-up-seconds must be more than 0")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    work = Path(tempfile.mkdtemp(prefix="exactly-demo-"))
    with contextlib.ExitStack() as stack:
        cluster = None
        if args.cluster is not None:
            say(f"starting a Spark cluster: a master and {args.cluster} workers of 1 core")
            cluster = stack.enter_context(SparkCluster(args.cluster, work_dir=work / "spark"))
            say(f"Spark master at {cluster.master_url}")
        if args.bootstrap_server:
            return run(args, seed, work, args.bootstrap_server, cluster)
        broker = stack.enter_context(EmbeddedBroker(data_dir=work / "broker",
                                                    log_path=work / "broker.log"))
        return run(args, seed, work, broker.bootstrap, cluster)
    return 1  # not reached: the block returns


def sink_mode(bootstrap: str) -> str:
    """The sinks' transactionResume: keep-prepared where the broker offers KIP-939's
    KeepPreparedTxn, else producer-id (Apache Kafka up to 4.4), said."""
    from exactly.spark.capabilities import check_keep_prepared
    from exactly.spark.options import KEEP_PREPARED, PRODUCER_ID, OptionError

    try:
        check_keep_prepared({"bootstrap.servers": bootstrap}, "exactly-spark-demo")
    except OptionError:
        say("the broker lacks KIP-939's KeepPreparedTxn: the sinks commit with "
            f"transactionResume={PRODUCER_ID} (ordinary transactions resumed by producer id; "
            "a batch not committed within transaction.timeout.ms would be lost, and said so)")
        return PRODUCER_ID
    say(f"the broker offers KIP-939's KeepPreparedTxn: the sinks commit with "
        f"transactionResume={KEEP_PREPARED}")
    return KEEP_PREPARED


def run(args: argparse.Namespace, seed: int, work: Path, bootstrap: str,
        cluster: SparkCluster | None) -> int:
    rng = random.Random(seed)
    started = time.monotonic()
    spark_args = spark_arguments(cluster, args.master)
    say(f"broker on {bootstrap}, data and checkpoints in {work} (seed {seed})")
    try:
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic(IN_TOPIC, 4)] + [NewTopic(t, 2) for t in OUTPUT_TOPICS])
    except KafkaError as exc:  # a broker of one's own (--bootstrap-server) not there, or used
        say(f"cannot create the demo's topics ({IN_TOPIC}, {', '.join(OUTPUT_TOPICS)}) on "
            f"{bootstrap}: {exc}")
        return 1
    resume = sink_mode(bootstrap) if args.delivery == "exactly-once" else None
    feeder = Feeder(bootstrap, args.rate, args.seconds, seed)
    feeder.start()
    killer = Killer(cluster, rng)
    say(f"feeding {IN_TOPIC!r}: {args.rate:.0f} order events/s for {args.seconds:.0f} s, "
        f"~{BAD_SHARE:.0%} malformed; pipeline {args.delivery}, "
        f"{args.trigger_seconds:g} s triggers, {args.crashes} kills "
        f"({', '.join(killer.kinds)})")

    runs = 0

    def new_driver() -> Driver:
        nonlocal runs
        runs += 1
        return Driver(bootstrap, work / "checkpoints", args.delivery, args.trigger_seconds,
                      spark_args, work / f"driver-{runs}.log", resume)

    driver = new_driver()
    last, kill_at, fed_at = time.monotonic(), None, None
    batches, batch_ms = 0, 0

    def status() -> str:
        b = driver.batches
        return (f"fed {feeder.count} events; this driver run: {b['orders']} orders batches, "
                f"{b['stats']} stats batches; kills {killer.total}/{args.crashes}")

    # Kill at random moments, each time once the current driver run is processing batches.
    while killer.total < args.crashes or feeder.is_alive() or killer.worker_down:
        time.sleep(0.25)
        if (revived := killer.revive()) is not None:
            say(revived)
        if killer.total < args.crashes and kill_at is None and driver.batches["orders"] >= 1:
            kill_at = time.monotonic() + rng.uniform(0.5, 4)
        if kill_at is not None and kill_at <= time.monotonic():
            kill_at = None
            kind = killer.next_kind()
            if kind == "driver":
                driver.kill()
                killer.done["driver"] += 1
                batches += driver.batches["orders"]
                batch_ms += driver.ms["orders"]
                say(f"kill -9 of the Spark driver ({status()}); restarting it on its checkpoint")
                driver = new_driver()
            elif kind == "executor":
                say(killer.kill_executor())
            elif killer.worker_down is None:
                say(killer.kill_worker())
        elif time.monotonic() - last > 5:
            last = time.monotonic()
            say(status())
        if driver.proc.poll() is not None:
            break
        if feeder.is_alive() or driver.batches["orders"] or killer.worker_down:
            fed_at = None
        elif fed_at is None:
            fed_at = time.monotonic()
        elif time.monotonic() - fed_at > args.catch_up_seconds:
            say(f"no batch of this driver run in the {args.catch_up_seconds:g} s since the "
                f"feeding ended: the kills left ({args.crashes - killer.total}) are not made")
            break
    feeder.join()
    target = input_end(bootstrap)
    say(f"feeding done: {feeder.fed.total} events; waiting for the pipeline to catch up "
        f"(at most {args.catch_up_seconds:g} s)")
    want_windows = len(expected_stats(feeder.fed))
    waiting = time.monotonic()
    caught_up, windows = False, 0
    while time.monotonic() - waiting < args.catch_up_seconds:
        time.sleep(1)
        if not driver.errors.empty() or driver.proc.poll() is not None:
            break
        if offsets(driver.progress.get("orders", {}).get("end")) != offsets(target):
            continue
        windows = len(read_committed(bootstrap, STATS_TOPIC))
        if windows >= want_windows:
            caught_up = True
            break
    catch_up = CatchUp(args.catch_up_seconds, time.monotonic() - waiting, caught_up,
                       offsets(driver.progress.get("orders", {}).get("end")),
                       offsets(target) or {}, windows, want_windows)
    code = driver.stop() if driver.proc.poll() is None else driver.proc.returncode
    error = None if driver.errors.empty() else driver.errors.get()
    if error is not None:
        say(f"the pipeline failed: {error}")
    elapsed = time.monotonic() - started
    checks, open_txns = verify(bootstrap, feeder.fed, catch_up)
    catch_up.windows = checks[2].records - checks[2].duplicates  # as read by the check
    print()
    print(table([c.row() for c in checks], ("output (read_committed)", "expected", "records",
                                             "duplicates", "missing", "wrong")))
    print(f"\ninput records: {feeder.fed.total}   {killer.summary()}   "
          f"open transactions of the queries: {open_txns}   driver exit: {code}")
    batches += driver.batches["orders"]
    batch_ms += driver.ms["orders"]
    print(f"throughput: the orders query took {batch_ms / 1000:.1f} s of batch time in "
          f"{batches} batches for {feeder.fed.total} events: "
          f"{feeder.fed.total * 1000 / max(1, batch_ms):.0f} events/s "
          f"(fed at {args.rate:.0f}/s; {elapsed:.0f} s in all, driver restarts included)")
    findings = verdict(checks, catch_up, open_transactions=open_txns, driver_exit=code,
                       pipeline_error=error)
    for finding in findings:
        print(f"  - {finding}")
    if findings:
        print(f"  the broker's log: {work / 'broker.log'}; the driver's: "
              f"{', '.join(str(work / f'driver-{n}.log') for n in range(1, runs + 1))}")
    say(headline(findings, catch_up, checks, driver_exit=code, pipeline_error=error))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
