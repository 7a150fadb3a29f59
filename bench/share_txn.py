"""Read-process-write with transactional acknowledgements (KIP-1289, issue 16's benchmark): a
share group's loop against the same loop on a classic consumer group, side by side in one run.

Against one broker process (`EmbeddedBroker`, `log.flush.policy=os`), for each transaction size
B (records per transaction, default 1, 10 and 100): `--transactions` x B records of `--size`
bytes are written to an input topic of one partition, and both loops read all of them, each
with Exactly's client in this process, each poll's records transformed (upper-cased) and written
to an output topic of its own in one TransactionSession transaction that then commits:

- share:   a `ShareConsumer` (explicit mode, max.poll.records=B) of a fresh share group, the
           input acknowledged with `acknowledge_transactionally` (TxnShareAcknowledge);
- classic: a `Consumer` (read_committed, max.poll.records=B) of a fresh classic group, the next
           offset committed with `send_offsets_to_transaction` (AddOffsetsToTxn +
           TxnOffsetCommit), the peer.

The clock runs from a loop's first records (the group join is not timed) to its last commit.
Printed per run: records/s, transactions/s, the broker's CPU seconds (utime + stime from
/proc/<pid>/stat) and CPU microseconds per record, and the share loop's ratio to the classic
one. The checks (not timed): every record's output committed once, and for the share loop the
share-partition start offset at the end of the topic (every record acknowledged).

    .venv/bin/python bench/share_txn.py                          # 300 transactions per run
    .venv/bin/python bench/share_txn.py --transactions 100 --batches 1 10
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from share_groups import cpu_seconds  # bench/ is the script's directory
from tests.helpers.share.helpers import create_topic, set_group_configs
from tests.helpers.share.raw import start_offset

from exactly.client import Consumer, Producer, ShareConsumer, TransactionSession
from exactly.testing import EmbeddedBroker


class Loop:
    """A read-process-write loop's shared half: a session, a producer bound to it, counters."""

    def __init__(self, b: EmbeddedBroker, name: str, out: str) -> None:
        self.out = out
        self.session = TransactionSession({"bootstrap.servers": b.bootstrap,
                                           "transactional.id": name})
        self.session.initialize()
        self.producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0},
                                 session=self.session)
        self.records = self.transactions = 0

    def run(self, b: EmbeddedBroker, total: int, poll: Callable[[], list],
            settle: Callable[[list], None]) -> tuple[float, float]:
        """Transactions of each poll's records until `total` records are committed: (seconds,
        broker CPU seconds) from the first records on."""
        assert b.process is not None
        t0 = cpu0 = 0.0
        while self.records < total:
            records = poll()
            if not records:
                continue
            if not self.transactions:
                t0, cpu0 = time.monotonic(), cpu_seconds(b.process.pid)
            self.session.begin_transaction()
            for r in records:
                self.producer.send(self.out, value=(r.value or b"").upper(), key=r.key,
                                   partition=0)
            settle(records)
            self.session.commit_transaction()
            self.records += len(records)
            self.transactions += 1
        return time.monotonic() - t0, cpu_seconds(b.process.pid) - cpu0

    def close(self) -> None:
        self.producer.close()
        self.session.close()


def share_run(b: EmbeddedBroker, topic: str, batch: int, total: int) -> tuple[float, float, int]:
    group = f"{topic}-share"
    set_group_configs(b, group, share_auto_offset_reset="earliest")
    consumer = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "max.poll.records": batch})
    consumer.subscribe([topic])
    loop = Loop(b, f"{group}-txn", f"{group}-out")
    try:
        elapsed, cpu = loop.run(b, total, lambda: consumer.poll(200), lambda records: (
            consumer.acknowledge_transactionally(loop.session, {(topic, 0): [
                r.offset for r in records]})))
    finally:
        loop.close()
        consumer.close()
    assert start_offset(b, group, topic, 0) == total, "not every record acknowledged"
    return elapsed, cpu, loop.transactions


def classic_run(b: EmbeddedBroker, topic: str, batch: int, total: int) -> tuple[float, float, int]:
    group = f"{topic}-classic"
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "max.poll.records": batch})
    consumer.subscribe([topic])
    loop = Loop(b, f"{group}-txn", f"{group}-out")
    try:
        elapsed, cpu = loop.run(b, total, lambda: consumer.poll(200), lambda records: (
            loop.session.send_offsets_to_transaction({(topic, 0): records[-1].offset + 1},
                                                     consumer.group_metadata())))
    finally:
        loop.close()
        consumer.close()
    return elapsed, cpu, loop.transactions


def committed_count(b: EmbeddedBroker, topic: str) -> int:
    with Consumer({"bootstrap.servers": b.bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, 0)])
        n = 0
        while batch := consumer.poll(1000):
            n += len(batch)
        return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=300,
                        help="transactions per run (records = this x the batch)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 10, 100],
                        help="records per transaction")
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    rows = []
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as b:
        for i, batch in enumerate(args.batches):
            topic, total = f"rpw-{batch}", args.transactions * batch
            create_topic(b, topic)
            with Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5}) as p:
                value = b"x" * args.size
                for n in range(total):
                    p.send(topic, value=value, key=b"%d" % n, partition=0)
                p.flush()
            runs = {"classic": classic_run, "share": share_run}
            order = ["classic", "share"] if i % 2 == 0 else ["share", "classic"]
            got = {kind: runs[kind](b, topic, batch, total) for kind in order}
            for kind in order:
                out = f"{topic}-{kind}-out"
                assert committed_count(b, out) == total, f"{out}: not every record's output once"
            rows.append((batch, total, got))
    print(f"read-process-write, Exactly's client, one partition, {args.size}-byte records, "
          f"{args.transactions} transactions per run; broker CPU from /proc/<pid>/stat")
    print(f"{'records/txn':>11} {'loop':8} {'records':>7} {'txns':>5} {'records/s':>10} "
          f"{'txns/s':>7} {'CPU s':>6} {'CPU us/rec':>10} {'share/classic':>13}")
    for batch, total, got in rows:
        peer = total / got["classic"][0]
        for kind in ("classic", "share"):
            elapsed, cpu, txns = got[kind]
            rate = total / elapsed
            ratio = f"{rate / peer:.2f}" if kind == "share" else ""
            print(f"{batch:>11} {kind:8} {total:>7} {txns:>5} {rate:>10.0f} "
                  f"{txns / elapsed:>7.0f} {cpu:>6.2f} {cpu * 1e6 / total:>10.1f} {ratio:>13}")


if __name__ == "__main__":
    main()
