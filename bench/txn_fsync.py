"""What `log.flush.policy=fsync` costs a transaction, side by side with `os` in one run.

Two brokers run at once, one per policy, each on a data directory of its own on the same disk;
the runs alternate between them (which goes first alternates too), so that the machine's load
falls on both alike.

1. Sequential 1-record transactions per second from one confluent-kafka producer (init once;
   begin, produce one record, commit, repeat for `--seconds`), and the ratio fsync/os per run;
   with `--producers N`, N such producers at once (threads; their transactional ids land in
   different `__transaction_state` partitions, so a sync round holds several files).
2. With `--count-syncs`: the fsync/fdatasync/syncfs calls of the broker process per
   transaction, counted by `strace -f -c` attached to it during a run of `--sync-txns`
   transactions (strace slows the broker down: these runs are not timed).
3. With `--produce`: records per second of 1 KiB records, acks=all, idempotent, one
   confluent-kafka producer, each run into a topic of its own (so no run meets the dirty pages
   of the runs before it).

    .venv/bin/python bench/txn_fsync.py [--runs N] [--seconds S] [--count-syncs] [--produce]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.testing import EmbeddedBroker

POLICIES = ("os", "fsync")
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


def produce(bootstrap: str, topic: str, records: int) -> float:
    """Records per second of `records` 1 KiB records, acks=all."""
    # A local queue that holds every record (librdkafka keeps up to 1 GiB): never full.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": max(records, 100_000)})
    producer.produce(topic, b"warm-up")  # the producer id comes asynchronously: not timed
    producer.flush(30)
    payload = os.urandom(1024)
    started = time.perf_counter()
    for i in range(records):
        producer.produce(topic, payload)
        if i % 1000 == 0:
            producer.poll(0)  # delivery reports
    if producer.flush(120):
        raise RuntimeError("records left unsent after 120 s")
    return records / (time.perf_counter() - started)


_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(?P<calls>\d+)\s+(?:\d+\s+)?(?P<name>\w+)$")


def syncs_per_transaction(broker: EmbeddedBroker, topic: str, txns: int) -> dict[str, float]:
    """The broker's sync calls per transaction, by name, over `txns` transactions."""
    assert broker.process is not None
    out = Path(tempfile.mkdtemp(prefix="txn-fsync-strace-")) / "summary"
    strace = subprocess.Popen(
        ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,syncfs", "-o", str(out),
         "-p", str(broker.process.pid)], stderr=subprocess.PIPE, text=True)
    try:
        assert strace.stderr is not None
        # strace says "Process N attached" once per thread; the first means it is in.
        line = strace.stderr.readline()
        if "attached" not in line:
            raise RuntimeError(f"strace did not attach: {line!r}")
        time.sleep(0.2)  # the other threads
        done, _ = transactions(broker.bootstrap, topic, count=txns)
        time.sleep(0.3)  # the last markers, written after the last commit is answered
    finally:
        strace.send_signal(signal.SIGINT)
        strace.wait(30)
    calls: dict[str, float] = {}
    for row in out.read_text().splitlines():
        if (m := _STRACE_ROW.match(row)) and m["name"] != "total":
            calls[m["name"]] = int(m["calls"]) / done
    shutil.rmtree(out.parent)
    return calls


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
    args = parser.parse_args()

    brokers = {policy: EmbeddedBroker(settings={"log.flush.policy": policy})
               for policy in POLICIES}
    try:
        for broker in brokers.values():
            broker.start()
            create_topic(broker.bootstrap, "tiny")
        tps: dict[str, list[float]] = {p: [] for p in POLICIES}
        rates: dict[str, list[float]] = {p: [] for p in POLICIES}
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
        if args.produce:
            print(f"{'run':>4} {'os rec/s':>10} {'fsync rec/s':>12} {'fsync/os':>9}  "
                  f"(1 KiB, acks=all)", flush=True)
            for run in range(args.runs):
                for policy in POLICIES if run % 2 == 0 else POLICIES[::-1]:
                    topic = f"produce-{run}"
                    bootstrap = brokers[policy].bootstrap
                    create_topic(bootstrap, topic)
                    rates[policy].append(produce(bootstrap, topic, args.records))
                    admin = AdminClient({"bootstrap.servers": bootstrap})
                    admin.delete_topics([topic])[topic].result(timeout=30)
                print(f"{run + 1:>4} {rates['os'][-1]:>10,.0f} {rates['fsync'][-1]:>12,.0f} "
                      f"{rates['fsync'][-1] / rates['os'][-1]:>8.2f}x", flush=True)
            median = {p: statistics.median(v) for p, v in rates.items()}
            print(f"{'med':>4} {median['os']:>10,.0f} {median['fsync']:>12,.0f} "
                  f"{median['fsync'] / median['os']:>8.2f}x", flush=True)
    finally:
        for broker in brokers.values():
            broker.close()


if __name__ == "__main__":
    main()
