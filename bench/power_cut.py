"""Power cuts, the long run: tests/system/server/test_power_cut.py's load and check
for many more cuts, with a summary, and the same load under `log.flush.policy=os` side by side.

A broker with `log.flush.policy=fsync` runs on the power-cut filesystem
(tests.rigs.powercut, LazyFS's model: every write and directory entry not fsynced is lost
at a cut). Round after round, a load of idempotent and transactional producers, offset commits
and topic creations runs for a random time (seeded), the broker is killed (or stopped cleanly,
or killed and cut again right after its restart), the power is cut, the broker starts again,
and everything acknowledged since the broker's first start is checked
(tests/helpers/server/powercut_load.py). Every `--cuts-per-broker` cuts the run starts over with a
fresh filesystem and broker (seeded from the run's seed), so that the data and the check, which
reads everything back, stay small. The run stops at the first round with a problem, printing the
seed of that broker's load (the moments of the cuts and the load's choices; the timing of a run is
never quite the same).

The peer: the same load with `log.flush.policy=os` (acknowledged once the page cache has it) for
`--peer-cuts` cuts. It must lose acknowledged writes: it shows that the check sees what a
power cut takes from a broker that does not fsync.

    .venv/bin/python bench/power_cut.py                 # 60 cuts
    .venv/bin/python bench/power_cut.py --cuts 10 --seed 42

Flags (defaults in brackets):
    --cuts N              cuts of the fsync run [60]
    --cuts-per-broker N   cuts before starting over on a fresh filesystem and broker [10]
    --seed N              the seed [random, printed]
    --load-seconds A,B    each round's load lasts a random time in [A, B] seconds [0.5,5]
    --fsync-latency-ms M  how long each fsync takes on the filesystem [1]
    --peer-cuts N         cuts of the log.flush.policy=os peer; 0: none [3]
    --work-dir DIR        where the mount points go [a temporary directory]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.server.powercut_load import PowerCutLoad, RoundReport
from tests.rigs.powercut import PowerCutFS


def run(work: Path, *, seed: int, cuts: int, cuts_per_broker: int,
        load_seconds: tuple[float, float], fsync_latency_ms: float, policy: str,
        stop_at_problem: bool) -> tuple[list[PowerCutLoad], list[RoundReport], Counter[str]]:
    """Rounds of load and cuts, `cuts_per_broker` per fresh mount and broker; the loads (their
    ledgers), the rounds, and the filesystems' counters added up."""
    rng = random.Random(seed)
    loads: list[PowerCutLoad] = []
    reports: list[RoundReport] = []
    fs_stats: Counter[str] = Counter()
    while len(reports) < cuts and not (stop_at_problem and any(r.problems for r in reports)):
        with PowerCutFS(work / f"{policy}-{len(loads)}", fsync_latency_ms=fsync_latency_ms) as fs:
            load = PowerCutLoad(fs, seed=rng.randrange(1 << 30),
                                broker_settings={"log.flush.policy": policy},
                                say=lambda line: print(f"  [{policy}] {line}", flush=True))
            loads.append(load)
            try:
                load.start()
                for _ in range(min(cuts_per_broker, cuts - len(reports))):
                    report = load.round(load.rng.uniform(*load_seconds))
                    reports.append(report)
                    if report.problems and stop_at_problem:
                        break
            finally:
                load.close()
            fs_stats.update(fs.stats())
    return loads, reports, fs_stats


def summary(loads: list[PowerCutLoad], reports: list[RoundReport], fs: Counter[str],
            seconds: float) -> list[str]:
    outcomes = Counter(txn.outcome for load in loads for txn in load.ledger.txns)
    kinds = Counter(r.how for r in reports)
    restarts = [r.restart_seconds for r in reports]
    acked = sum(len(load.ledger.acked) for load in loads)
    sent = sum(load.ledger.sent for load in loads)
    created = sum(len(load.ledger.created) for load in loads)
    deleted = sum(len(load.ledger.deleted) for load in loads)
    commits = sum(load.ledger.plain_acked + 1 for load in loads)

    def total(key: str) -> int:
        return sum(r.cut[key] for r in reports)

    return [
        (f"{len(reports)} cuts of {len(loads)} brokers in {seconds / 60:.1f} min "
         f"({', '.join(f'{n} {how}' for how, n in sorted(kinds.items()))})"),
        (f"acknowledged: {acked} records (of {sent} sent by the idempotent producers), "
         f"{outcomes['committed']} transactions committed, {outcomes['aborted']} aborted, "
         f"{outcomes['in doubt']} with a commit unanswered, {outcomes['open']} cut open; "
         f"{created + deleted} topics created, {deleted} of them deleted; {commits} offset "
         "commits"),
        (f"the cuts dropped {total('dropped_bytes')} unsynced bytes, {total('dropped_files')} "
         f"files and {total('entries_gone')} directory entries, and brought back "
         f"{total('entries_back')} entries removed since their directory's last fsync"),
        (f"filesystem: {fs['file_fsyncs']} file fsyncs, {fs['dir_fsyncs']} directory fsyncs, "
         f"{fs['bytes_written'] / 2**20:.1f} MiB written"),
        (f"restart after a cut: median {statistics.median(restarts):.2f} s, "
         f"max {max(restarts):.2f} s") if restarts else "no restart",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuts", type=int, default=60, help="cuts of the fsync run")
    parser.add_argument("--cuts-per-broker", type=int, default=10,
                        help="cuts before starting over on a fresh filesystem and broker")
    parser.add_argument("--seed", type=int, default=None, help="the seed (random if not given)")
    parser.add_argument("--load-seconds", default="0.5,5",
                        help="A,B: each round's load lasts a random time in [A, B] seconds")
    parser.add_argument("--fsync-latency-ms", type=float, default=1.0,
                        help="how long each fsync takes on the filesystem")
    parser.add_argument("--peer-cuts", type=int, default=3,
                        help="cuts of the log.flush.policy=os peer (0: none)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the mount points go (a temporary directory if not given)")
    args = parser.parse_args()
    low, _, high = args.load_seconds.partition(",")
    load_seconds = (float(low), float(high or low))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="exactly-power-cut-"))

    print(f"log.flush.policy=fsync: {args.cuts} cuts, seed {seed}", flush=True)
    started = time.monotonic()
    loads, reports, fs = run(work, seed=seed, cuts=args.cuts,
                             cuts_per_broker=args.cuts_per_broker, load_seconds=load_seconds,
                             fsync_latency_ms=args.fsync_latency_ms, policy="fsync",
                             stop_at_problem=True)
    lines = summary(loads, reports, fs, time.monotonic() - started)
    failed = [r for r in reports if r.problems]
    for report in failed:
        lines.append(f"PROBLEMS at cut {report.round} of the broker whose load has seed "
                     f"{loads[-1].seed} ({report.how} after {report.load_seconds:.2f}s of load):")
        lines += [f"  {p[:400]}" for p in report.problems[:20]]
    if not failed:
        lines.append("no problem: every acknowledged write survived every cut")

    peer: list[str] = []
    if args.peer_cuts:
        print(f"log.flush.policy=os (the peer): {args.peer_cuts} cuts, seed {seed}", flush=True)
        started = time.monotonic()
        os_loads, os_reports, os_fs = run(
            work, seed=seed, cuts=args.peer_cuts, cuts_per_broker=args.cuts_per_broker,
            load_seconds=load_seconds, fsync_latency_ms=args.fsync_latency_ms, policy="os",
            stop_at_problem=False)
        peer = summary(os_loads, os_reports, os_fs, time.monotonic() - started)
        for report in os_reports:
            peer.append(f"cut {report.round} ({report.how}): {len(report.problems)} problem(s)"
                        + "".join(f"\n  {p[:200]}" for p in report.problems[:3]))
        rates = [(f["file_fsyncs"] + f["dir_fsyncs"]) / max(f["bytes_written"] / 2**20, 1e-9)
                 for f in (fs, os_fs)]
        peer.append(f"fsyncs per MiB written: fsync {rates[0]:.0f}, os {rates[1]:.0f} "
                    f"(ratio {rates[0] / max(rates[1], 1e-9):.2f})")

    print("\n== log.flush.policy=fsync ==")
    print("\n".join(lines))
    if peer:
        print("\n== log.flush.policy=os (the peer: acknowledged writes may be lost) ==")
        print("\n".join(peer))
    if args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)  # the mount points, unmounted by now
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
