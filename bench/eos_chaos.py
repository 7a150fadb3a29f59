"""Run tests/system/test_eos_pipeline.py's broker-kill test over many seeds, keeping what failed.

The test kills the broker 5 times at moments drawn from EXACTLY_CHAOS_SEED (3 librdkafka
consume-transform-produce workers, send_offsets_to_transaction, a classic group) and checks that
the output is exactly the transformed input and that the group's committed offsets reach the end.
`make test` runs one seed; this runs many, each in its own pytest process, with the broker's data
directory and log and the workers' logs kept for every failing seed
(EXACTLY_KEEP_BROKER_DATA=1; the paths are in the report, which is saved too). With
`--debug cgrp,fetch,eos` the workers log those librdkafka contexts and each transaction's input
offsets (tests/workers/eos_worker.py). With `--unguarded` the workers do not leave out records
below the group's committed offsets, which librdkafka can hand out after a reassignment (see
docs/reliability.md).

    .venv/bin/python bench/eos_chaos.py --seeds 1-50 --json eos_chaos.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/system/test_eos_pipeline.py::test_broker_killed_at_random_moments_during_transactions"


def seeds(text: str) -> list[int]:
    """`1-50`, `7`, or `3,9,12-14`."""
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def run(seed: int, reports: Path, timeout: float, debug: str | None,
        unguarded: bool) -> dict[str, object]:
    env = {**os.environ, "EXACTLY_CHAOS_SEED": str(seed), "EXACTLY_KEEP_BROKER_DATA": "1"}
    if debug:
        env["EXACTLY_WORKER_DEBUG"] = debug
    if unguarded:
        env["EXACTLY_WORKER_UNGUARDED"] = "1"
    basetemp = reports.resolve() / f"tmp-seed-{seed}"  # the workers' logs: kept if it fails
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly",
                               "-p", "no:cacheprovider", f"--basetemp={basetemp}", TEST],
                              cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status, output = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}"
    seconds = time.monotonic() - started
    data = re.search(r"broker data in (\S+)", str(output))
    result: dict[str, object] = {"seed": seed, "status": status, "seconds": round(seconds, 1)}
    # Records the workers left out as below the group's committed offsets (librdkafka's stale
    # records after a reassignment; tests/workers/eos_worker.py): how often the guard acted.
    result["left_out"] = sum(log.read_text(errors="replace").count("left out ")
                             for log in basetemp.glob("**/worker-*.log"))
    if status == 0:  # a passing seed's broker directory and worker logs are not needed
        if data:
            subprocess.run(["rm", "-rf", str(Path(data.group(1)).parent)], check=False)
        subprocess.run(["rm", "-rf", str(basetemp)], check=False)
        return result
    report = reports / f"seed-{seed}.txt"
    report.write_text(str(output))
    errors = [line[2:].strip() for line in str(output).splitlines() if line.startswith("E ")]
    result.update(report=str(report), worker_logs=str(basetemp),
                  kept=str(Path(data.group(1)).parent) if data else None,
                  error=errors[0] if errors else None)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-20", help="e.g. 1-50 or 3,9,12-14 (default 1-20)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--reports", type=Path, default=Path("eos-chaos-reports"),
                        help="where failing seeds' pytest reports go")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per seed")
    parser.add_argument("--debug", help="librdkafka debug contexts for the workers, e.g. "
                        "cgrp,fetch,eos")
    parser.add_argument("--unguarded", action="store_true",
                        help="workers process records below the group's committed offsets too "
                        "(librdkafka's stale records after a reassignment then duplicate output)")
    args = parser.parse_args()
    args.reports.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in seeds(args.seeds):
        result = run(seed, args.reports, args.timeout, args.debug, args.unguarded)
        results.append(result)
        error = f" -- {result['error']}" if result.get("error") else ""
        kept = f" (kept {result['kept']})" if result.get("kept") else ""
        print(f"seed {seed}: {'ok' if result['status'] == 0 else 'FAILED'} in "
              f"{result['seconds']} s, {result['left_out']} stale batches left out{error}{kept}",
              flush=True)
    failed = [r for r in results if r["status"] != 0]
    print(f"{len(results)} seeds, {len(results) - len(failed)} passed, {len(failed)} failed")
    if args.json:
        args.json.write_text(json.dumps({
            "benchmark": "eos_chaos", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "test": TEST, "results": results}, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
