"""Consumer groups under faults, the long run: tests/system/groups/test_group_faults.py's seeded
runs over many seeds, with a line per run, a summary and a JSON file.

Each run (tests/helpers/groups/fault_load.py) starts a broker, feeds an input topic for `--duration`
seconds, and has two groups of two worker processes consume it: `alo` at least once and `eos`
read-process-write exactly once. Kind `classic`: confluent-kafka, `group.protocol=classic`,
send_offsets_to_transaction; `consumer`: the same on KIP-848's `group.protocol=consumer`;
`share`: Exactly's ShareConsumer (KIP-932), ACCEPT + commit_sync, and acknowledgements inside a
TransactionSession's transaction (KIP-1289). Meanwhile the faults of a schedule drawn from the
seed: the broker killed (`kill -9`) and restarted, paused (SIGSTOP 1-4 s, SIGCONT), power-cut
(on tests.rigs.powercut, `log.flush.policy=fsync`; when FUSE is there), and workers killed
with SIGKILL and restarted. The run then waits up to `--catch-up` seconds for both groups to
reach the end, and the checker (tests/helpers/groups/fault_check.py) judges it: anomalies (lost,
duplicated, backwards, beyond end, delivery limit, lock, output ahead, open transaction...)
apart from "not caught up within N s".

Not a speed benchmark, so no peer runs beside it: it is the broker's (and the clients') behaviour
under faults that is measured, by the count of anomalies (0 expected) and by how long the groups
take to reach the end after the last fault.

    .venv/bin/python bench/group_faults.py                         # 17 seeds of each kind
    .venv/bin/python bench/group_faults.py --kind share --seed 7   # one run again
    .venv/bin/python bench/group_faults.py --kind classic --seeds 3 --inject skip-processing

Flags (defaults in brackets):
    --kind K           classic, consumer, share or all [all]
    --seeds N          seeds --first-seed .. --first-seed + N - 1 of each kind [17]
    --seed S           one seed instead
    --first-seed S     [1]
    --duration S       seconds of input, with the faults among them [40]
    --rate R           input records per second [60]
    --catch-up S       how long the groups may take to reach the end [90]
    --power-cuts M     auto (when the power-cut filesystem mounts), on, off [auto]
    --inject WHAT      a fault on purpose, to see the checker catch it: skip-processing,
                       no-txn-offsets (workers), drop-output (checker) [none]
    --json OUT         where the results go [bench/results/group_faults-<time>.json]
    --work-dir DIR     where each run's directory goes [a new /tmp/group-faults-*]
    --keep             keep the directories of clean runs too (a run with a finding always
                       keeps its own: broker, worker and event logs)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.groups.fault_check import Verdict, check, report
from tests.helpers.groups.fault_load import INJECTIONS, KINDS, Plan, power_cuts_available, run

RESULTS = Path(__file__).resolve().parent / "results"


def one(plan: Plan, work: Path, keep: bool) -> dict[str, Any]:
    """Run and judge one plan; its JSON record. The directory goes unless a finding (or --keep)
    keeps it."""
    started = time.monotonic()
    record: dict[str, Any] = {"kind": plan.kind, "seed": plan.seed, "dir": str(work)}
    try:
        obs = run(plan, work)
    except Exception:  # noqa: BLE001 - a run that cannot go on is a finding, with its logs
        record.update(ok=False, anomalies={"run": [traceback.format_exc()]}, behind=[],
                      figures={}, seconds=round(time.monotonic() - started, 1))
        return record
    verdict: Verdict = check(obs)
    record.update(ok=verdict.ok, anomalies=verdict.anomalies, behind=verdict.behind,
                  figures=verdict.figures, executed=obs.executed,
                  seconds=round(time.monotonic() - started, 1))
    if not verdict.ok:
        record["report"] = report(obs, verdict)
    elif not keep:
        shutil.rmtree(work, ignore_errors=True)
        record["dir"] = None
    return record


def line(r: dict[str, Any]) -> str:
    f = r["figures"]
    if "run" in r["anomalies"]:
        return (f"{r['kind']:8} seed {r['seed']:4}: RUN STOPPED ({r['seconds']}s): "
                f"{r['anomalies']['run'][0].strip().splitlines()[-1]}; logs in {r['dir']}")
    faults = ", ".join(f"{k} {v}" for k, v in f["faults"].items())
    end = (f"end {f['end_after_last_fault_s']:.1f}s after the last fault"
           if f["caught_up"] else "NOT CAUGHT UP")
    redelivery = f["max_redelivery_after_kill_s"]
    share = (f", {f['poison']} poison, {f['archived_at_limit']} archived at the limit, "
             + (f"redelivery after a kill <= {redelivery}s" if redelivery is not None
                else "no redelivery after a kill measured")
             if r["kind"] == "share" else "")
    verdict = "ok" if r["ok"] else (
        f"{sum(len(v) for v in r['anomalies'].values())} ANOMALIES "
        f"{sorted(r['anomalies'])}{' + behind' if r['behind'] else ''}, logs in {r['dir']}")
    return (f"{r['kind']:8} seed {r['seed']:4}: {f['records']} records ({faults}); {end}; "
            f"{f['worker_starts']} worker starts, own exits {f['worker_exits']}{share}; "
            f"{r['seconds']}s; {verdict}")


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in [*KINDS, "all"]:
        mine = [r for r in runs if kind in ("all", r["kind"])]
        if not mine:
            continue
        faults: Counter[str] = Counter()
        for r in mine:
            faults.update(r["figures"].get("faults", {}))
        ends = [r["figures"]["end_after_last_fault_s"] for r in mine
                if r["figures"].get("caught_up")]
        out[kind] = {
            "runs": len(mine),
            "records": sum(r["figures"].get("records", 0) for r in mine),
            "faults": dict(faults),
            "anomalies": sum(sum(len(v) for v in r["anomalies"].values()) for r in mine),
            "runs_with_anomalies": [r["seed"] for r in mine if r["anomalies"]],
            "runs_not_caught_up": [r["seed"] for r in mine if r["behind"]],
            "end_after_last_fault_s": ({"median": round(statistics.median(ends), 2),
                                        "max": round(max(ends), 2)} if ends else None),
            "archived_at_limit": sum(r["figures"].get("archived_at_limit", 0) for r in mine),
            "max_redelivery_after_kill_s": max(
                (r["figures"].get("max_redelivery_after_kill_s") or 0 for r in mine), default=0),
            "worker_exits": dict(sum((Counter(r["figures"].get("worker_exits", {}))
                                      for r in mine), Counter())),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/group_faults.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=[*KINDS, "all"], default="all")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, default=17)
    seeds.add_argument("--seed", type=int)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--rate", type=float, default=60.0)
    parser.add_argument("--catch-up", type=float, default=90.0)
    parser.add_argument("--power-cuts", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--inject", choices=INJECTIONS, default="none")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="group-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    out = args.json or RESULTS / f"group_faults-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    power_cuts = args.power_cuts == "on"
    if args.power_cuts == "auto":
        why = power_cuts_available(work / "powercut-probe")
        power_cuts = why is None
        print(f"power cuts: {'on' if power_cuts else f'off ({why})'}", flush=True)
    kinds = list(KINDS) if args.kind == "all" else [args.kind]
    seed_list = [args.seed] if args.seed is not None else list(
        range(args.first_seed, args.first_seed + args.seeds))
    print(f"{len(kinds) * len(seed_list)} runs of {args.duration:g}s of input at "
          f"{args.rate:g}/s; runs in {work}; results to {out}", flush=True)
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    for seed in seed_list:  # kinds interleaved: a long run stopped early has all three
        for kind in kinds:
            plan = Plan(kind, seed, duration=args.duration, rate=args.rate,
                        power_cuts=power_cuts, catch_up_s=args.catch_up, inject=args.inject)
            r = one(plan, work / f"{kind}-{seed}", args.keep)
            runs.append(r)
            print(line(r), flush=True)
            if "report" in r:
                print(r["report"], flush=True)
            out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                       "power_cuts": power_cuts, "runs": runs,
                                       "summary": summary(runs)}, indent=1, default=str))
    total = summary(runs)
    print(f"\nsummary ({time.monotonic() - started:.0f}s, JSON in {out}):")
    for kind, s in total.items():
        end = s["end_after_last_fault_s"]
        ends = f"median {end['median']:.1f}s, max {end['max']:.1f}s" if end else "-"
        print(f"  {kind:8}: {s['runs']} runs, {s['records']} records, faults {s['faults']}, "
              f"{s['anomalies']} anomalies (runs {s['runs_with_anomalies']}), not caught up: "
              f"{s['runs_not_caught_up']}, end after the last fault: {ends}"
              + f", workers' own exits {s['worker_exits']}"
              + (f", {s['archived_at_limit']} archived at the delivery limit, redelivery after "
                 f"a holder's kill within {s['max_redelivery_after_kill_s']}s"
                 if kind == "share" else ""))
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
