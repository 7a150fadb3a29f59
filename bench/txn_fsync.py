"""What `log.flush.policy=fsync` costs a transaction, side by side with `os` in one run.

Two brokers run at once, one per policy, each on a data directory of its own on the same disk;
the runs alternate between them (which goes first alternates too), so that the machine's load
falls on both alike.

1. Sequential 1-record transactions per second from one confluent-kafka producer (init once;
   begin, produce one record, commit, repeat for `--seconds`), and the ratio fsync/os per run;
   with `--producers N`, N such producers at once (threads; their transactional ids land in
   different `__transaction_state` partitions, so a sync round holds several files).
2. With `--count-syncs`: the fsync/fdatasync/syncfs calls of the broker process per
   transaction, and the fdatasyncs it submits through Linux AIO ("fdatasync (aio)", one per
   file in an io_submit), counted by `strace -f` attached to it during a run of `--sync-txns`
   transactions (strace slows the broker down: these runs are not timed).
3. With `--produce`: records per second of 1 KiB records, acks=all, idempotent, one
   confluent-kafka producer, each run into a topic of its own (so no run meets the dirty pages
   of the runs before it); beside them, what load distorts less: the producer's mean Produce
   round trip (librdkafka's `rtt` statistic: the time a request waits for its answer) and the
   broker's CPU seconds per GB (/proc), and the whole machine's busy CPU seconds per GB (the
   clients' too, the same under both policies) over the timed run and an `os.sync()` after it
   (/proc/stat; each run starts after a sync): under `os` the kernel writes the run's pages out
   after the run, and that work is counted too. `--produce-processes N` shares the records
   among N producer processes instead (where one producer is the limit; no round trip figure
   then, but the producer processes' own CPU seconds per GB). With `--count-syncs` too, one
   more produce run per policy under `strace -f -T` (not timed) gives the time the broker's
   threads spend in fdatasync/fsync per MiB produced: the disk work a sync round waits for.
4. With `--trace` (needs perf, and root or perf_event_paranoid <= 0): where the time of a
   1-record transaction goes, from `perf record` over `--trace-txns` transactions per policy:
   the broker's system calls, and the kernel's fdatasyncs of the broker's files (ext4's
   tracepoints, system-wide, told apart by inode). Per request, from its read to its answer's
   write; under fsync, per sync round: the request to its append (pwritev2), the append to the
   round's io_submit, the io_submit to the kernel's start of the fdatasync (in a kworker), the
   fdatasync itself, its end to the event loop's read of the eventfd, and that read to the
   answer. perf slows the broker a little: these runs are not timed.

    .venv/bin/python bench/txn_fsync.py [--runs N] [--seconds S] [--count-syncs] [--produce]
                                        [--produce-processes N] [--trace]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import CoreSampler, cpu_seconds, produce_in_processes

from exactly.testing import EmbeddedBroker

POLICIES = ("os", "fsync")
T = TypeVar("T")
PARTITIONS = 4


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)


def transactions(bootstrap: str, topic: str, *, seconds: float | None = None,
                 count: int | None = None) -> tuple[int, float]:
    """(transactions, seconds) of 1-record transactions run for `seconds` or `count` of them,
    after `init_transactions` and one transaction not counted."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "transactional.id": f"bench-fsync-{time.monotonic_ns()}"})
    producer.init_transactions(30)

    def one() -> None:
        producer.begin_transaction()
        producer.produce(topic, b"x" * 100)
        producer.commit_transaction(30)

    one()
    done = 0
    started = time.perf_counter()
    while (count is None or done < count) and (
            seconds is None or time.perf_counter() - started < seconds):
        one()
        done += 1
    return done, time.perf_counter() - started


def concurrent_transactions(bootstrap: str, topic: str, producers: int, seconds: float
                            ) -> float:
    """Transactions per second of `producers` producers running `transactions` at once."""
    done: list[tuple[int, float]] = []
    threads = [threading.Thread(target=lambda: done.append(
        transactions(bootstrap, topic, seconds=seconds))) for _ in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(n / elapsed for n, elapsed in done)


class ProduceRun(NamedTuple):
    rate: float  # records per second
    rtt_ms: float  # mean Produce round trip, as the producer saw it (nan with processes)
    cpu_per_gb: float  # broker CPU seconds per GB produced
    machine_per_gb: float = 0.0  # the machine's busy CPU seconds per GB, writeback included
    client_per_gb: float = float("nan")  # the producer processes' CPU seconds per GB
    started: float = 0.0  # time.monotonic() at the start of the timed part


def written_out(run: Callable[[], ProduceRun], records: int) -> ProduceRun:
    """`run` of `records` 1 KiB records between two `os.sync()`s: it starts with nothing dirty,
    and the machine's busy CPU seconds per GB are counted over its timed part and the sync after
    it, so that the disk work `os` leaves to the kernel's writeback after a run counts as
    fsync's within it does (client processes' start-up, before the timed part, does not)."""
    os.sync()
    cores = CoreSampler()
    cores.start()
    try:
        result = run()
        sync_started = time.monotonic()
        os.sync()
        synced = time.monotonic()
        timed = records / result.rate  # the run's timed part, from result.started
        busy = (cores.cores(result.started, result.started + timed)[0] * timed
                + cores.cores(sync_started, synced)[0] * (synced - sync_started))
    finally:
        cores.stop()
    return result._replace(machine_per_gb=busy / (records * 1024 / 1e9))


def produce_processes(bootstrap: str, topic: str, records: int, broker_pid: int,
                      processes: int) -> ProduceRun:
    """`records` 1 KiB records shared by `processes` producer processes (bench/measure.py)."""
    done = produce_in_processes({"bootstrap.servers": bootstrap}, [topic], 1024, records,
                                processes=processes, broker_pid=broker_pid)
    return ProduceRun(records / done.seconds, float("nan"), done.cpu_per_gb or 0.0,
                      client_per_gb=done.client_cpu_per_gb, started=done.started)


def produce(bootstrap: str, topic: str, records: int, broker_pid: int) -> ProduceRun:
    """`records` 1 KiB records, acks=all, from one idempotent producer."""
    rtts: list[tuple[float, int]] = []  # (mean µs, requests) of each statistics window

    def statistics_window(text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            if broker["nodeid"] >= 0 and broker["rtt"]["cnt"]:
                rtts.append((broker["rtt"]["avg"], broker["rtt"]["cnt"]))

    # A local queue that holds every record (librdkafka keeps up to 1 GiB): never full.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": max(records, 100_000),
                         "statistics.interval.ms": 100, "stats_cb": statistics_window})
    producer.produce(topic, b"warm-up")  # the producer id comes asynchronously: not timed
    producer.flush(30)
    producer.poll(0.2)  # the warm-up's statistics window goes out before the timed run
    rtts.clear()
    payload = os.urandom(1024)
    cpu_before, started = cpu_seconds(broker_pid), time.monotonic()
    for i in range(records):
        producer.produce(topic, payload)
        if i % 1000 == 0:
            producer.poll(0)  # delivery reports
    if producer.flush(120):
        raise RuntimeError("records left unsent after 120 s")
    elapsed, cpu = time.monotonic() - started, cpu_seconds(broker_pid) - cpu_before
    producer.poll(0.2)  # the last statistics window
    requests = sum(n for _, n in rtts)
    rtt_ms = sum(avg * n for avg, n in rtts) / requests / 1000 if requests else float("nan")
    return ProduceRun(records / elapsed, rtt_ms, cpu / (records * 1024 / 1e9), started=started)


def under_strace(broker: EmbeddedBroker, options: list[str], work: Callable[[], T]
                 ) -> tuple[T, str]:
    """`work()`'s result, and what `strace -f OPTIONS` attached to the broker wrote meanwhile."""
    assert broker.process is not None
    out = Path(tempfile.mkdtemp(prefix="txn-fsync-strace-")) / "strace"
    strace = subprocess.Popen(["strace", "-f", *options, "-o", str(out),
                               "-p", str(broker.process.pid)], stderr=subprocess.PIPE, text=True)
    try:
        try:
            assert strace.stderr is not None
            # strace says "Process N attached" once per thread; the first means it is in.
            line = strace.stderr.readline()
            if "attached" not in line:
                raise RuntimeError(f"strace did not attach: {line!r}")
            time.sleep(0.2)  # the other threads
            result = work()
        finally:
            strace.send_signal(signal.SIGINT)
            strace.wait(30)
        return result, out.read_text()
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


# A sync call of the broker: a system call, or a sync submitted through Linux AIO (the broker's
# sync rounds, server/appends.py), one `IOCB_CMD_FDSYNC` per file in an io_submit.
_SYNC_SYSCALL = re.compile(r"\b(?P<name>fsync|fdatasync|syncfs)\(")
_AIO_SYNC = re.compile(r"IOCB_CMD_(?P<name>FDSYNC|FSYNC)\b")
_AIO_NAMES = {"FDSYNC": "fdatasync", "FSYNC": "fsync"}
_TRACE_SYNCS = ["-s", "4096", "-e", "trace=fsync,fdatasync,syncfs,io_submit"]


def sync_calls(trace: str) -> Counter[str]:
    """The sync calls in `strace -f` output, by name ("fdatasync (aio)": submitted through AIO)."""
    calls: Counter[str] = Counter()
    for row in trace.splitlines():
        if "io_submit(" in row:
            calls.update(f"{_AIO_NAMES[m['name']]} (aio)" for m in _AIO_SYNC.finditer(row))
        elif m := _SYNC_SYSCALL.search(row):
            calls[m["name"]] += 1
    return calls


def syncs_per_transaction(broker: EmbeddedBroker, topic: str, txns: int) -> dict[str, float]:
    """The broker's sync calls per transaction, by name, over `txns` transactions."""
    def work() -> int:
        done, _ = transactions(broker.bootstrap, topic, count=txns)
        time.sleep(0.3)  # the last markers, written after the last commit is answered
        return done

    done, trace = under_strace(broker, _TRACE_SYNCS, work)
    return {name: n / done for name, n in sync_calls(trace).items()}


_SYNC_CALL = re.compile(r"\b(?:fdatasync|fsync)\(.*= 0 <(?P<seconds>[\d.]+)>$|"
                        r"<\.\.\. (?:fdatasync|fsync) resumed>.*= 0 <(?P<resumed>[\d.]+)>$")


def sync_ms_per_mib(broker: EmbeddedBroker, topic: str, records: int
                    ) -> tuple[float | None, int]:
    """(milliseconds the broker's threads spent in fdatasync/fsync per MiB, calls) over a produce
    run of `records` 1 KiB records, each call timed by `strace -T`. Syncs submitted through AIO
    run in the kernel's workers, where strace does not time them: None then."""
    _, calls = under_strace(broker, ["-T", *_TRACE_SYNCS],
                            lambda: produce(broker.bootstrap, topic, records, broker_pid(broker)))
    aio = sum(n for name, n in sync_calls(calls).items() if name.endswith("(aio)"))
    seconds = [float(m["seconds"] or m["resumed"]) for row in calls.splitlines()
               if (m := _SYNC_CALL.search(row))]
    if aio:
        return None, aio + len(seconds)
    return sum(seconds) * 1000 / (records / 1024), len(seconds)


_TRACE_BROKER = ("syscalls:sys_enter_read", "syscalls:sys_exit_read", "syscalls:sys_enter_write",
                 "syscalls:sys_enter_pwritev2", "syscalls:sys_enter_io_submit")
_TRACE_KERNEL = ("ext4:ext4_sync_file_enter", "ext4:ext4_sync_file_exit")
_PERF_ROW = re.compile(r"^\s*(?P<time>\d+\.\d+):\s+(?P<event>\S+):\s*(?P<args>.*)$")
_ARG = re.compile(r"\b(?P<name>fd|count|ino):? (?P<value>0x[0-9a-f]+|\d+)")
# The steps of a request that waits for a round, and the phases between them.
_MARKS = ("request", "append", "io_submit", "sync starts", "sync ends", "eventfd read", "answer")
PHASES = ("request -> append", "append -> io_submit", "io_submit -> sync starts", "sync",
          "sync ends -> eventfd read", "eventfd read -> answer")


class Trace(NamedTuple):
    answers: list[float]  # µs from each request's read to its answer's write
    rounds: dict[str, list[float]]  # µs of each phase of the rounds requests waited for


def perf_script(path: Path) -> str:
    """The events `perf record` wrote to `path`, as text: time, event, arguments."""
    return subprocess.run(["perf", "script", "-i", str(path), "-F", "time,event,trace"],
                          capture_output=True, text=True, check=True).stdout


def perf_rows(text: str) -> list[tuple[float, str, dict[str, int]]]:
    """(seconds, event, arguments) of each event in `perf script` output."""
    rows = []
    for line in text.splitlines():
        if m := _PERF_ROW.match(line):
            args = {a["name"]: int(a["value"], 0) for a in _ARG.finditer(m["args"])}
            if m["event"] == "syscalls:sys_exit_read":  # the bytes read, or -errno
                args["count"] = ctypes.c_int64(int(m["args"].split()[-1], 0)).value
            rows.append((float(m["time"]), m["event"], args))
    return rows


def trace_transactions(broker: EmbeddedBroker, topic: str, txns: int) -> Trace:
    """The timeline of `txns` transactions, from `perf record` of the broker's system calls and
    of the kernel's syncs of its files. perf takes a moment to attach: on a busy machine it
    may miss a whole run, which is then traced again, waiting longer for perf."""
    for wait in (1.0, 3.0, 6.0):
        trace = _trace_once(broker, topic, txns, wait)
        if trace.answers:
            return trace
        print(f"perf saw no transaction after a {wait:.0f} s wait for it to attach; again",
              file=sys.stderr)
    raise SystemExit("perf recorded none of the transactions (is perf allowed to trace this "
                     "process? perf_event_paranoid, root)")


def _trace_once(broker: EmbeddedBroker, topic: str, txns: int, wait: float) -> Trace:
    out = Path(tempfile.mkdtemp(prefix="txn-fsync-perf-"))
    try:
        records = [subprocess.Popen(["perf", "record", "-q", *options, "-e", ",".join(events),
                                     "-o", str(out / name)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for name, options, events in (
                       ("broker", ["-p", str(broker_pid(broker))], _TRACE_BROKER),
                       ("kernel", ["-a"], _TRACE_KERNEL))]
        time.sleep(wait)  # perf is in
        transactions(broker.bootstrap, topic, count=txns)
        time.sleep(0.3)  # the last markers
        for record in records:
            record.send_signal(signal.SIGINT)
            record.wait(30)
        inodes = {path.stat().st_ino for path in broker.data_dir.rglob("*") if path.is_file()}
        rows = sorted(perf_rows(perf_script(out / "broker")) + [
            row for row in perf_rows(perf_script(out / "kernel"))
            if row[2].get("ino") in inodes])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return timeline(rows)


def timeline(rows: list[tuple[float, str, dict[str, int]]]) -> Trace:
    """Requests (a read of a connection: a count above 8) and their answers (the next write to
    that connection), and the sync rounds between: the eventfd is read 8 bytes at a time."""
    trace = Trace([], {phase: [] for phase in PHASES})
    requests: dict[int, dict[str, float]] = {}  # connection -> times of its request's steps
    reading: tuple[float, int, int] | None = None  # a read begun: (time, fd, count)
    current: dict[str, float] | None = None  # the request the loop works on
    for at, event, args in rows:
        if event == "syscalls:sys_enter_read":
            reading = (at, args["fd"], args["count"])
        elif event == "syscalls:sys_exit_read" and reading is not None:
            began, fd, count = reading
            reading = None
            if count == 8 and current is not None and "sync ends" in current:
                current.setdefault("eventfd read", began)
            elif count > 8 and args["count"] > 8 and fd not in requests:
                current = requests[fd] = {"request": began}
        elif event == "syscalls:sys_enter_pwritev2" and current is not None:
            current.setdefault("append", at)
        elif event == "syscalls:sys_enter_io_submit" and current is not None:
            current.setdefault("io_submit", at)
        elif event == "ext4:ext4_sync_file_enter" and current is not None \
                and "io_submit" in current:
            current.setdefault("sync starts", at)
        elif event == "ext4:ext4_sync_file_exit" and current is not None \
                and "sync starts" in current:
            current["sync ends"] = at  # a round of several files ends with its last
        elif event == "syscalls:sys_enter_write" and (steps := requests.pop(args["fd"], None)):
            trace.answers.append((at - steps["request"]) * 1e6)
            steps["answer"] = at
            if all(mark in steps for mark in _MARKS):
                for phase, start, end in zip(PHASES, _MARKS, _MARKS[1:]):
                    trace.rounds[phase].append((steps[end] - steps[start]) * 1e6)
            if steps is current:
                current = None
    return trace


def quartiles(values: list[float]) -> str:
    """p25/median/p75 of `values`, rounded."""
    if len(values) < 4:
        return "-"
    q = statistics.quantiles(values, n=4)
    return f"{q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f}"


def broker_pid(broker: EmbeddedBroker) -> int:
    assert broker.process is not None
    return broker.process.pid


def with_topic(broker: EmbeddedBroker, topic: str,
               work: Callable[[EmbeddedBroker, str], T]) -> T:
    """`work` on a new topic of `broker`, deleted after it."""
    create_topic(broker.bootstrap, topic)
    try:
        return work(broker, topic)
    finally:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([topic])[topic].result(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per policy (default 3)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per run (default 5)")
    parser.add_argument("--producers", type=int, default=1,
                        help="producers running transactions at once (default 1)")
    parser.add_argument("--count-syncs", action="store_true",
                        help="count the broker's sync calls per transaction with strace")
    parser.add_argument("--sync-txns", type=int, default=300,
                        help="transactions of the counting run (default 300)")
    parser.add_argument("--produce", action="store_true",
                        help="1 KiB acks=all produce throughput too")
    parser.add_argument("--records", type=int, default=200_000,
                        help="records per produce run (default 200000)")
    parser.add_argument("--produce-processes", type=int, default=1,
                        help="producer processes sharing a produce run's records (default 1)")
    parser.add_argument("--trace", action="store_true",
                        help="where a transaction's time goes, from perf record")
    parser.add_argument("--trace-txns", type=int, default=300,
                        help="transactions of the traced run (default 300)")
    args = parser.parse_args()

    brokers = {policy: EmbeddedBroker(settings={"log.flush.policy": policy})
               for policy in POLICIES}
    try:
        for broker in brokers.values():
            broker.start()
            create_topic(broker.bootstrap, "tiny")
        tps: dict[str, list[float]] = {p: [] for p in POLICIES}
        produced: dict[str, list[ProduceRun]] = {p: [] for p in POLICIES}
        print(f"{'run':>4} {'os txns/s':>10} {'fsync txns/s':>13} {'fsync/os':>9}  "
              f"({args.producers} producer(s))", flush=True)
        for run in range(args.runs):
            for policy in POLICIES if run % 2 == 0 else POLICIES[::-1]:
                tps[policy].append(concurrent_transactions(
                    brokers[policy].bootstrap, "tiny", args.producers, args.seconds))
            print(f"{run + 1:>4} {tps['os'][-1]:>10,.0f} {tps['fsync'][-1]:>13,.0f} "
                  f"{tps['fsync'][-1] / tps['os'][-1]:>8.2f}x", flush=True)
        median = {p: statistics.median(v) for p, v in tps.items()}
        print(f"{'med':>4} {median['os']:>10,.0f} {median['fsync']:>13,.0f} "
              f"{median['fsync'] / median['os']:>8.2f}x", flush=True)
        if args.count_syncs:
            for policy in POLICIES:
                calls = syncs_per_transaction(brokers[policy], "tiny", args.sync_txns)
                text = ", ".join(f"{name} {n:.2f}" for name, n in sorted(calls.items()))
                print(f"syncs per transaction, {policy}: {sum(calls.values()):.2f} "
                      f"({text or 'none'})", flush=True)
        if args.trace:
            for policy in POLICIES:
                trace = trace_transactions(brokers[policy], "tiny", args.trace_txns)
                waited = len(trace.rounds[PHASES[0]])
                print(f"request -> answer, {policy}: {quartiles(trace.answers)} µs (p25/med/p75 "
                      f"of {len(trace.answers)} requests, {waited} of them waited for a round)",
                      flush=True)
                if waited:
                    print("  per round: " + "; ".join(
                        f"{phase} {quartiles(trace.rounds[phase])}" for phase in PHASES),
                        flush=True)
        if args.produce:
            print(f"{'run':>4} {'os rec/s':>10} {'fsync rec/s':>12} {'fsync/os':>9} "
                  f"{'rtt ms os/fsync':>16} {'CPU s/GB os/fsync':>18} "
                  f"{'machine s/GB os/fsync':>22} {'producers s/GB':>15}  (1 KiB, acks=all, "
                  f"{args.produce_processes} producer process(es))", flush=True)

            def one_run(broker: EmbeddedBroker, topic: str) -> ProduceRun:
                if args.produce_processes > 1:
                    return produce_processes(broker.bootstrap, topic, args.records,
                                             broker_pid(broker), args.produce_processes)
                return produce(broker.bootstrap, topic, args.records, broker_pid(broker))

            for run in range(args.runs):
                for policy in POLICIES if run % 2 == 0 else POLICIES[::-1]:
                    produced[policy].append(with_topic(
                        brokers[policy], f"produce-{run}",
                        lambda broker, topic: written_out(lambda: one_run(broker, topic),
                                                          args.records)))
                os_run, fsync_run = produced["os"][-1], produced["fsync"][-1]
                print(f"{run + 1:>4} {os_run.rate:>10,.0f} {fsync_run.rate:>12,.0f} "
                      f"{fsync_run.rate / os_run.rate:>8.2f}x "
                      f"{os_run.rtt_ms:>8.2f}/{fsync_run.rtt_ms:<7.2f} "
                      f"{os_run.cpu_per_gb:>9.2f}/{fsync_run.cpu_per_gb:<8.2f} "
                      f"{os_run.machine_per_gb:>11.2f}/{fsync_run.machine_per_gb:<10.2f} "
                      f"{os_run.client_per_gb:>7.2f}/{fsync_run.client_per_gb:<7.2f}",
                      flush=True)
            median = {p: statistics.median(r.rate for r in v) for p, v in produced.items()}
            print(f"{'med':>4} {median['os']:>10,.0f} {median['fsync']:>12,.0f} "
                  f"{median['fsync'] / median['os']:>8.2f}x", flush=True)
            if args.count_syncs:
                for policy in POLICIES:
                    ms, sync_calls_made = with_topic(
                        brokers[policy], "produce-strace",
                        lambda broker, topic: sync_ms_per_mib(broker, topic, args.records))
                    spent = "not seen (through AIO)" if ms is None else f"{ms:.2f} ms"
                    print(f"fdatasync/fsync per MiB produced, {policy}: {spent} "
                          f"({sync_calls_made} calls)", flush=True)
    finally:
        for broker in brokers.values():
            broker.close()


if __name__ == "__main__":
    main()
