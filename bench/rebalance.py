"""Rebalance time when one member of a group restarts (issue 17's benchmark): 8 confluent-kafka
consumers (one process each) over 32 partitions, classic dynamic membership against classic
static membership (KIP-345, `group.instance.id`), side by side in one run on one broker.

A producer thread writes one record to every partition every 20 ms (its value: the time it was
produced). Once every member consumes, one member is restarted as a rolling restart does it:
SIGINT, `close()` (a dynamic member sends LeaveGroup, a static one does not), a new process with
the same configuration. Measured from the SIGINT, by the records' arrival at the driver:

- every partition back: seconds until every partition has delivered a record produced after the
  restart began (the restarted member's own partitions wait for its new process to start);
- others' longest stall: the longest gap between two records of any partition the restarted
  member did not own, or between another member's revoke and its next assignment (dynamic:
  every member revokes and waits for all to rejoin; static: nobody should);
- others revoked: rebalance callbacks (on_revoke) the other 7 members saw.

    .venv/bin/python bench/rebalance.py             # 3 restarts per mode, the median printed
    .venv/bin/python bench/rebalance.py --rounds 5
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import create_topic

from exactly.testing import EmbeddedBroker

MEMBERS, PARTITIONS, TOPIC = 8, 32, "rebalance-bench"
PRODUCE_EVERY = 0.02

WORKER = textwrap.dedent("""\
    import sys
    from confluent_kafka import Consumer
    bootstrap, group, instance = sys.argv[1:4]
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
              "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
              "fetch.wait.max.ms": 20, "partition.assignment.strategy": "range"}
    if instance != "-":
        config["group.instance.id"] = instance
    c = Consumer(config)
    c.subscribe([sys.argv[4]], on_revoke=lambda _c, ps: print("revoked", len(ps), flush=True),
                on_assign=lambda _c, ps: print("assigned", len(ps), flush=True))
    try:
        while True:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                print(m.partition(), m.value().decode(), flush=True)
    except KeyboardInterrupt:
        pass
    c.close()
    """)


class Group:
    """MEMBERS worker processes; every record line goes to `arrivals` as (partition, produced,
    arrived, member)."""

    def __init__(self, bootstrap: str, group: str, static: bool) -> None:
        self.bootstrap, self.group, self.static = bootstrap, group, static
        self.arrivals: list[tuple[int, float, float, int]] = []
        self.callbacks: list[tuple[float, int, str]] = []  # (when, member, "revoked"/"assigned")
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[str]] = [self._spawn(i) for i in range(MEMBERS)]

    def _spawn(self, i: int) -> subprocess.Popen[str]:
        instance = f"member-{i}" if self.static else "-"
        proc = subprocess.Popen([sys.executable, "-c", WORKER, self.bootstrap, self.group,
                                 instance, TOPIC], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, args=(proc, i), daemon=True).start()
        return proc

    def _read(self, proc: subprocess.Popen[str], member: int) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            first, second = line.split()
            with self.lock:
                if first in ("revoked", "assigned"):
                    self.callbacks.append((time.time(), member, first))
                else:
                    self.arrivals.append((int(first), float(second), time.time(), member))

    def since(self, t: float) -> list[tuple[int, float, float, int]]:
        with self.lock:
            return [a for a in self.arrivals if a[2] >= t]

    def all_consuming(self, t: float) -> bool:
        recent = self.since(t)
        return ({p for p, *_ in recent} == set(range(PARTITIONS))
                and {m for *_, m in recent} == set(range(MEMBERS)))

    def restart(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGINT)
        self.procs[i].wait()
        self.procs[i] = self._spawn(i)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_for(condition, what: str, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def one_restart(group: Group, member: int) -> tuple[float, float, int]:
    """Restart `member`; (seconds until every partition is back, others' longest stall,
    revocations the other members saw)."""
    wait_for(lambda: group.all_consuming(time.time() - 1.0), "every member consuming")
    before = group.since(time.time() - 1.0)
    owned = {p for p, _, _, m in before if m == member}
    t0 = time.time()
    group.restart(member)

    def back() -> bool:
        return {p for p, produced, _, _ in group.since(t0) if produced > t0} == \
            set(range(PARTITIONS))

    wait_for(back, "every partition consumed again")
    after = group.since(t0)
    every_back = max(min(arrived for p, produced, arrived, _ in after
                         if p == q and produced > t0) for q in range(PARTITIONS)) - t0
    time.sleep(2.0)  # let a late second rebalance (dynamic: the new member's join) show
    window = group.since(t0 - 0.5)
    stall = 0.0
    for q in set(range(PARTITIONS)) - owned:
        times = sorted(arrived for p, _, arrived, _ in window if p == q)
        stall = max([stall] + [b - a for a, b in itertools.pairwise(times)])
    with group.lock:
        others = [(when, m, kind) for when, m, kind in group.callbacks
                  if when >= t0 and m != member]
    revoked = sum(1 for _, _, kind in others if kind == "revoked")
    # The stop-the-world pause: from a member's revoke to its next assignment.
    for _, m, _ in others:
        mine = [(when, kind) for when, mm, kind in others if mm == m]
        for (t_revoke, a), (t_assign, b) in itertools.pairwise(mine):
            if (a, b) == ("revoked", "assigned"):
                stall = max(stall, t_assign - t_revoke)
    return every_back, stall, revoked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, int]]] = {}
    with EmbeddedBroker(settings={"log.flush.policy": "os",
                                  "group.initial.rebalance.delay.ms": "0"}) as broker:
        create_topic(broker.bootstrap, TOPIC, partitions=PARTITIONS)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        stop = threading.Event()

        def produce() -> None:
            while not stop.is_set():
                now = repr(time.time()).encode()
                for p in range(PARTITIONS):
                    producer.produce(TOPIC, now, partition=p)
                producer.poll(0)
                time.sleep(PRODUCE_EVERY)
            producer.flush(10)

        producing = threading.Thread(target=produce, daemon=True)
        producing.start()
        try:
            for mode in ("dynamic", "static"):
                group = Group(broker.bootstrap, f"bench-{mode}", static=mode == "static")
                try:
                    results[mode] = [one_restart(group, r % MEMBERS) for r in range(args.rounds)]
                finally:
                    group.stop()
        finally:
            stop.set()
            producing.join(15)
    print(f"\n{MEMBERS} consumers, {PARTITIONS} partitions, one member restarted "
          f"({args.rounds} times per mode, median; cpu count {os.cpu_count()})")
    print(f"{'membership':<12}{'every partition back (s)':>26}{'others longest stall (s)':>26}"
          f"{'others revoked':>16}")
    for mode, rows in results.items():
        back, stall, revoked = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"{mode:<12}{back:>26.2f}{stall:>26.2f}{revoked:>16g}")
    d, s = (statistics.median(r[0] for r in results[m]) for m in ("dynamic", "static"))
    print(f"every partition back, static / dynamic: {s / d:.2f}")


if __name__ == "__main__":
    main()
