"""Share-group throughput (KIP-932, issue 16's benchmark): 1, 2 and 4 share-consumer processes
on one partition, with a classic consumer group on the same data side by side.

In one run, against one broker process (`EmbeddedBroker`): `--records` records of `--size` bytes
are written to a topic of one partition. Then, for each consumer count, a fresh share group
(`share.auto.offset.reset=earliest`) reads them with that many processes, each a confluent-kafka
`ShareConsumer` in implicit mode (a poll's records are accepted with the next poll). The clock runs
from "go" (every process subscribed) until DescribeShareGroupOffsets shows the share-partition
start offset at the end of the topic: every record acknowledged. Printed per run: records/s
acknowledged, the broker's CPU seconds (utime + stime from /proc/<pid>/stat) and CPU
microseconds per record. The peer: one classic `Consumer` reading the same records (offsets
committed by auto-commit; its clock starts at its first records, after its group join), as
records/s, and the ratio of each share run to it.

    .venv/bin/python bench/share_groups.py                  # 100000 records of 100 bytes
    .venv/bin/python bench/share_groups.py --records 100000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.share.helpers import create_topic, set_group_configs
from tests.helpers.share.raw import start_offset

from exactly.testing import EmbeddedBroker

TOPIC = "bench"

WORKER = textwrap.dedent("""\
    import sys
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2]})
    c.subscribe([sys.argv[3]])
    print("ready", flush=True)
    sys.stdin.readline()  # go
    n = 0
    try:
        while True:
            n += sum(1 for m in c.poll(0.2) if m.error() is None)
    except KeyboardInterrupt:
        pass
    c.close()
    print(n, flush=True)
    """)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def share_run(b: EmbeddedBroker, processes: int, records: int) -> tuple[float, float, list[int]]:
    group = f"share-{processes}"
    set_group_configs(b, group, share_auto_offset_reset="earliest")
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, b.bootstrap, group, TOPIC],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    for w in workers:
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    assert b.process is not None
    cpu0, t0 = cpu_seconds(b.process.pid), time.monotonic()
    for w in workers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    while start_offset(b, group, TOPIC, 0) < records:  # every record acknowledged
        time.sleep(0.02)
    elapsed, cpu = time.monotonic() - t0, cpu_seconds(b.process.pid) - cpu0
    counts = []
    for w in workers:
        w.send_signal(2)  # SIGINT: close() the consumer, print its count
        out, _ = w.communicate(timeout=60)
        counts.append(int(out.split()[-1]))
    return elapsed, cpu, counts


def classic_run(b: EmbeddedBroker, records: int) -> tuple[float, float]:
    assert b.process is not None
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "classic",
                  "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC])
    n = 0
    while n == 0:  # the clock starts with the first records: the join is not timed
        n = sum(1 for m in c.consume(500, 0.2) if m.error() is None)
    cpu0, t0 = cpu_seconds(b.process.pid), time.monotonic()
    while n < records:
        n += sum(1 for m in c.consume(500, 0.2) if m.error() is None)
    elapsed, cpu = time.monotonic() - t0, cpu_seconds(b.process.pid) - cpu0
    c.close()
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as b:
        create_topic(b, TOPIC)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        value = b"x" * args.size
        for i in range(args.records):
            p.produce(TOPIC, value=value, key=b"%d" % i)
            if i % 10_000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        elapsed, cpu = classic_run(b, args.records)
        classic_rate = args.records / elapsed
        rows = [("classic consumer group (peer)", 1, classic_rate, cpu, "", "")]
        for n in args.processes:
            elapsed, cpu, counts = share_run(b, n, args.records)
            rate = args.records / elapsed
            rows.append((f"share group, {n} ShareConsumer process(es)", n, rate, cpu,
                         f"{rate / classic_rate:.2f}", "/".join(map(str, counts))))
    print(f"{args.records} records of {args.size} bytes, one partition; broker CPU from "
          "/proc/<pid>/stat")
    print(f"{'run':44} {'procs':>5} {'records/s':>10} {'CPU s':>7} {'CPU us/rec':>10} "
          f"{'vs peer':>8}  records per process")
    for name, n, rate, cpu, ratio, counts in rows:
        print(f"{name:44} {n:>5} {rate:>10.0f} {cpu:>7.2f} "
              f"{cpu * 1e6 / args.records:>10.1f} {ratio:>8}  {counts}")


if __name__ == "__main__":
    main()
