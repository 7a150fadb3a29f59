"""Consumer groups under faults, short seeded runs: a classic group (confluent-kafka,
`group.protocol=classic`), a KIP-848 consumer group (`group.protocol=consumer`) and a KIP-932
share group (Exactly's ShareConsumer, acknowledging inside a TransactionSession's transaction
for read-process-write, KIP-1289), each while the broker is killed, paused (SIGSTOP) and, when
the power-cut filesystem mounts here, power-cut, and while its workers are killed with SIGKILL
and restarted (tests/helpers/groups/fault_load.py).

The checks (tests/helpers/groups/fault_check.py): every acknowledged record was delivered at least
once; read-process-write output under read_committed is each input exactly once; committed offsets
and share-partition start offsets never go backwards; both groups reach the end of the input
("not caught up" is told apart from "lost" or "duplicated"); no share record is delivered with a
delivery count past `share.delivery.count.limit`, and a killed member's records come back within
the lock duration. One fixed seed per kind; bench/group_faults.py is the long run over many
seeds. A failure's message names the seed, the faults as they ran and every log.

The checker itself is shown to tell the failures apart on observations made up for it, and the
long run's `--inject` shows it catching workers that are wrong on purpose.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.helpers.groups.fault_check import check, report
from tests.helpers.groups.fault_load import KINDS, Event, Observations, Plan, run
from tests.rigs.powercut import PowerCutError
from tests.workers.eos_worker import transform

SEEDS = {"classic": 101, "consumer": 202, "share": 303}


@pytest.mark.parametrize("kind", KINDS)
def test_groups_under_faults_lose_nothing_and_duplicate_nothing(kind: str, tmp_path: Path
                                                                 ) -> None:
    plan = Plan(kind, SEEDS[kind], duration=16, rate=50, power_cuts=True, catch_up_s=40)
    try:
        obs = run(plan, tmp_path / f"{kind}-{plan.seed}", say=print)
    except PowerCutError as exc:  # no FUSE here: the same run without power cuts
        print(f"power cuts left out: {str(exc).splitlines()[0]}")
        plan = dataclasses.replace(plan, power_cuts=False)
        obs = run(plan, tmp_path / f"{kind}-{plan.seed}-no-power-cuts", say=print)
    verdict = check(obs)
    print(verdict.figures)
    assert verdict.ok, report(obs, verdict)
    # The run had something to check: input, every fault type, deliveries to both groups.
    assert verdict.figures["records"] >= 500, report(obs, verdict)
    assert all(n >= 1 for n in obs.faults_by_type().values()), report(obs, verdict)
    assert all(n >= verdict.figures["records"] for n in verdict.figures["deliveries"].values())


def _clean(tmp_path: Path) -> Observations:
    """A classic run's observations with nothing wrong: 10 records on partition 0, both groups
    at offset 10, every record delivered to `alo` and output once by `eos`."""
    values = {(0, o): b"in-%06d" % o for o in range(10)}
    obs = Observations(Plan("classic", 1, catch_up_s=30), tmp_path, schedule=[])
    obs.inputs, obs.acked_inputs, obs.ends = values, set(values.values()), [10, 0, 0]
    obs.caught_up_at, obs.last_fault_end, obs.input_end = 5.0, 2.0, 3.0
    obs.samples = {"classic-alo": [(1.0, [4, -1, -1]), (2.0, [10, -1, -1])],
                   "classic-eos": [(1.0, [6, -1, -1]), (2.0, [10, -1, -1])]}
    obs.events = {"alo": [Event(0.5, "alo-0", 1, "D", ("0", str(o), "0")) for o in range(10)]
                  + [Event(0.6, "alo-0", 1, "C", ("0:10",))], "eos": []}
    obs.outputs = [transform(v).decode() for v in values.values()]
    return obs


def test_the_checker_tells_lost_duplicated_backwards_and_behind_apart(tmp_path: Path) -> None:
    assert check(_clean(tmp_path)).ok

    skipped = _clean(tmp_path)  # committed past a record no worker processed
    skipped.events["alo"] = [e for e in skipped.events["alo"] if e.data[:2] != ("0", "3")]
    assert list(check(skipped).anomalies) == ["lost"]
    assert "0:3=in-000003" in check(skipped).anomalies["lost"][0]

    twice = _clean(tmp_path)  # output twice: exactly once broken
    twice.outputs.append(twice.outputs[7])
    assert list(check(twice).anomalies) == ["duplicated"]

    dropped = _clean(tmp_path)  # the checker's own input short of a record
    dropped.plan = dataclasses.replace(dropped.plan, inject="drop-output")
    assert list(check(dropped).anomalies) == ["lost"]

    back = _clean(tmp_path)  # a committed offset went down
    back.samples["classic-alo"].append((3.0, [7, -1, -1]))
    assert list(check(back).anomalies) == ["backwards"]

    behind = _clean(tmp_path)  # slow, nothing lost: "not caught up", no anomaly
    behind.caught_up_at = None
    behind.samples["classic-eos"] = [(1.0, [8, -1, -1])]
    behind.outputs = behind.outputs[:8]
    verdict = check(behind)
    assert verdict.anomalies == {}
    assert verdict.behind == [("not caught up within 30 s: group classic-eos at 8 of 10 "
                               "records (offsets [8, -1, -1] of [10, 0, 0])")]
