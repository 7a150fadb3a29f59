"""Concurrent transaction version 2 producers under `log.flush.policy=fsync`: the broker's
transactions per second as producers are added, on this machine's disk and on a slow one.

Each producer is Exactly's asyncio client (`exactly.client.aio`, transaction version 2: its
Produce adds the partition to the transaction) in a process of its own, running sequential
transactions of one 100-byte record into a partition of its own, all of them at once for
`--seconds`. A transaction version 2 Produce that adds a partition waits until the coordinator's
log holds that partition durably before its data is appended (server/admission.py, rule 4);
before issue 19's sixth session the broker made that sync with a blocking fdatasync on its event
loop, so the whole broker waited for the disk once per transaction, whatever the number of
producers. `--fsync-latency-ms N` runs the broker on tests.rigs.powercut with every fsync
taking N ms (a slow disk: a network volume or a spinning one), where that shows most. To compare
two versions of the broker, run this with each on PYTHONPATH (the broker process inherits it),
interleaved.

    .venv/bin/python bench/tv2_fsync.py [--producers 1,4,8] [--fsync-latency-ms 2] [--seconds 4]
                                        [--policy fsync|os] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from exactly.client import aio
from exactly.testing import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.rigs
from tests.rigs.powercut import PowerCutFS

TOPIC, PARTITIONS, WARM_UP = "tv2", 8, 20


def _producer(bootstrap: str, index: int, seconds: float, out: Any, go: Any) -> None:
    async def run() -> float:
        config = {"bootstrap.servers": bootstrap,
                  "transactional.id": f"bench-tv2-{index}-{time.monotonic_ns()}"}
        async with aio.TransactionSession(config) as session, \
                aio.Producer(config, session=session) as producer:
            await session.initialize()

            async def transaction() -> None:
                await session.begin_transaction()
                await producer.send(TOPIC, b"x" * 100, partition=index % PARTITIONS)
                await session.commit_transaction()
            for _ in range(WARM_UP):
                await transaction()
            out.put("ready")
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            done, started = 0, time.monotonic()
            while time.monotonic() - started < seconds:
                await transaction()
                done += 1
            return done / (time.monotonic() - started)
    out.put(asyncio.run(run()))


def measure(producers: int, policy: str, latency_ms: float, seconds: float) -> list[float]:
    """Each producer's transactions per second, all running at once."""
    with contextlib.ExitStack() as stack:
        data_dir = None
        if latency_ms:
            fs = stack.enter_context(PowerCutFS(Path(tempfile.mkdtemp()) / "mnt"))
            data_dir = fs.make_durable_dir("data")
        broker = stack.enter_context(EmbeddedBroker(
            data_dir=data_dir, settings={"log.flush.policy": policy}))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept while it works
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result()
        if latency_ms:  # the broker started quickly; its syncs are slow from here on
            fs.set_fsync_latency(latency_ms)
        out, go = mp.Queue(), mp.Event()
        procs = [mp.Process(target=_producer, args=(broker.bootstrap, i, seconds, out, go))
                 for i in range(producers)]
        for p in procs:
            p.start()
        for _ in procs:
            if out.get(timeout=120) != "ready":
                raise RuntimeError("a producer failed to start")
        go.set()
        rates = [out.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join()
        return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", default="1,4,8", help="comma-separated counts")
    parser.add_argument("--policy", choices=("fsync", "os"), default="fsync")
    parser.add_argument("--fsync-latency-ms", type=float, default=0.0,
                        help="run on the power-cut filesystem with this fsync latency")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    disk = (f"a disk whose fsync takes {args.fsync_latency_ms:g} ms" if args.fsync_latency_ms
            else "this machine's disk")
    print(f"transaction version 2 producers, log.flush.policy={args.policy}, {disk}")
    print(f"{'producers':>9}  {'transactions/s':>14}  {'per producer':>12}")
    for count in (int(c) for c in args.producers.split(",")):
        for _ in range(args.runs):
            rates = measure(count, args.policy, args.fsync_latency_ms, args.seconds)
            print(f"{count:>9}  {sum(rates):>14,.0f}  {min(rates):>5,.0f}-{max(rates):<6,.0f}")


if __name__ == "__main__":
    main()
