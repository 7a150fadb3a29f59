"""The judge of a group fault run (tests/helpers/groups/fault_load.py): what its `Observations` show
that must never happen, kept apart from a run that merely did not finish in time.

Anomalies, by category (none is expected; each says which records and where):

- `lost`: a record acknowledged by the at-least-once group (below an offset it committed, or
  below its share-partition start offset, or ACCEPTed with an answer) that none of its workers
  ever logged as delivered; or a record below the exactly-once group's committed offsets (share:
  start offset) with no output, unless the share group archived it at its delivery count limit.
- `duplicated`: a record with more than one output under read_committed (exactly once broken).
- `output ahead`: output of a record the exactly-once group has not committed past (the
  transaction's output and its offsets did not commit together), or of a poison record, which
  is never ACCEPTed.
- `backwards`: a group's committed offset (share: start offset) smaller than one seen before or
  than one an OffsetCommit was answered for. A fenced zombie's commit must be refused, so a
  decrease is never legitimate.
- `beyond end`: a committed offset or start offset past the input's end.
- `delivery limit`: a share record delivered with a delivery count above
  `share.delivery.count.limit`, or delivered more times than the limit allows (the count of an
  acquisition is not written, KIP-932, so each broker crash may give one delivery more; a power
  cut may take back every unsynced one: `limit` more).
- `lock`: a record held by a share worker killed with SIGKILL delivered again later than
  `share.record.lock.duration.ms` (+ the transaction session timeout if it was staged in a
  transaction, KIP-1309) + LOCK_SLACK_S after the kill, with no broker fault in between.
- `input lost`, `input duplicated`, `producer`: the input producer's acknowledged records not
  all in the log once (invariants 1, 2), or its records not acknowledged.
- `open transaction`: a transaction still open after the run (invariant 7).
- `broker error`: an ERROR line or a traceback in the broker's log (invariant 8).
- `run`: the run itself could not go on (the broker did not start again, the input unreadable).

Not an anomaly but a failure of its own: `behind`, "not caught up within N s: at X of Y".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.groups.fault_load import (
    DELIVERY_LIMIT,
    GROUPS,
    LOCK_MS,
    POISON,
    TXN_SESSION_MS,
    Observations,
)
from tests.workers.eos_worker import transform
from tests.workers.group_fault_worker import ERROR_EXIT
from tests.workers.rdkafka_watchdog import EXIT_STATUS as WATCHDOG_EXIT

LOCK_SLACK_S = 15.0  # a restart of the worker processes, a group join, a loaded machine
SHOWN = 8  # findings listed per category


@dataclass
class Verdict:
    anomalies: dict[str, list[str]] = field(default_factory=dict)
    behind: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.anomalies and not self.behind

    def count(self) -> int:
        return sum(len(v) for v in self.anomalies.values())

    def add(self, category: str, finding: str) -> None:
        self.anomalies.setdefault(category, []).append(finding)


def check(obs: Observations) -> Verdict:
    v = Verdict()
    plan = obs.plan
    for error in obs.errors:
        v.add("run", error)
    if obs.errors:  # the rest was never observed: its checks would say nothing true
        v.figures = {"records": len(obs.inputs), "faults": obs.faults_by_type(),
                     "anomalies": v.count(), "caught_up": False, "phases_s": obs.phases}
        return v
    inputs = obs.inputs
    _check_input(obs, v)
    outputs = obs.outputs[1:] if plan.inject == "drop-output" else obs.outputs
    for g in GROUPS:
        _check_offsets(obs, g, v)
    if plan.kind == "share":
        _at_least_once_share(obs, v)
    else:
        _at_least_once(obs, v)
    archived = _exactly_once(obs, outputs, v)
    if plan.kind == "share":
        _delivery_limit(obs, v)
    redelivery = _lock_release(obs, v) if plan.kind == "share" else []
    _broker_log(obs, v)
    if obs.open_transactions:
        v.add("open transaction", f"{len(obs.open_transactions)} transaction(s) still open "
                                  f"after the run: {obs.open_transactions}")
    if obs.caught_up_at is None:
        for g in GROUPS:
            final, ends = obs.final(plan.group(g)), obs.ends
            done = sum(min(max(c, 0), e) for c, e in zip(final, ends, strict=True))
            if [max(c, 0) for c in final] != ends:
                v.behind.append(f"not caught up within {plan.catch_up_s:g} s: group "
                                f"{plan.group(g)} at {done} of {sum(ends)} records "
                                f"(offsets {final} of {ends})")
    end = max(obs.last_fault_end, obs.input_end)
    deliveries = {g: sum(e.kind == "D" for e in obs.events.get(g, ())) for g in GROUPS}
    v.figures = {
        "records": len(inputs),
        "poison": sum(val.endswith(POISON) for val in inputs.values()),
        "faults": obs.faults_by_type(),
        "anomalies": v.count(),
        "caught_up": obs.caught_up_at is not None,
        "end_after_last_fault_s": (round(obs.caught_up_at - obs.last_fault_end, 2)
                                   if obs.caught_up_at is not None else None),
        "end_after_input_s": (round(obs.caught_up_at - end, 2)
                              if obs.caught_up_at is not None else None),
        "deliveries": deliveries,
        "outputs": len(outputs),
        "archived_at_limit": len(archived),
        "worker_starts": sum(obs.starts.values()),
        "worker_exits": _exits(obs),
        "refused": {g: sum(e.kind == "R" for e in obs.events.get(g, ())) for g in GROUPS},
        "max_redelivery_after_kill_s": round(max(redelivery), 2) if redelivery else None,
        "phases_s": obs.phases,
    }
    return v


def _exits(obs: Observations) -> dict[str, int]:
    """The workers' own exits (not the run's kills) by why: an error (crash-only), the watchdog
    of a transactional call stuck in librdkafka (tests/workers/rdkafka_watchdog.py), other."""
    why = {ERROR_EXIT: "error", WATCHDOG_EXIT: "watchdog"}
    return dict(Counter(why.get(code, f"code {code}") for codes in obs.exits.values()
                        for code in codes))


def _broker_log(obs: Observations, v: Verdict) -> None:
    try:
        text = (obs.work / "broker.log").read_text(errors="replace")
    except FileNotFoundError:
        return
    bad = [line.strip()[:300] for line in text.splitlines()
           if " ERROR " in line or line.startswith("Traceback")]
    for line in bad[:SHOWN]:
        v.add("broker error", line)


def _where(obs: Observations, keys: Iterable[tuple[int, int]]) -> str:
    keys = sorted(keys)
    shown = ", ".join(f"{p}:{o}={obs.inputs.get((p, o), b'?').decode()}" for p, o in
                      keys[:SHOWN])
    return f"{len(keys)} record(s): {shown}{' ...' if len(keys) > SHOWN else ''}"


def _check_input(obs: Observations, v: Verdict) -> None:
    values = Counter(obs.inputs.values())
    if obs.inputs:
        gone = obs.acked_inputs - set(values)
        if gone:
            v.add("input lost", f"{len(gone)} acknowledged input record(s) not in the log: "
                                f"{sorted(gone)[:SHOWN]}")
    twice = [val for val, n in values.items() if n > 1]
    if twice:
        v.add("input duplicated", f"{len(twice)} input value(s) in the log more than once: "
                                  f"{sorted(twice)[:SHOWN]}")
    for error in obs.input_errors[:SHOWN]:
        v.add("producer", f"input record not acknowledged: {error}")


def _check_offsets(obs: Observations, g: str, v: Verdict) -> None:
    """Never backwards, never past the end: the samples in order, then the final reading, and
    every offset an OffsetCommit was answered for (at-least-once classic/KIP-848 workers)."""
    group = obs.plan.group(g)
    seen: dict[int, tuple[int, str]] = {}
    readings = [(f"t={t - obs.t0:.2f}s", offs) for t, offs in obs.samples.get(group, ())]
    if group in obs.final_offsets:
        readings.append(("the end", obs.final_offsets[group]))
    for when, offsets in readings:
        for p, offset in enumerate(offsets):
            before = seen.get(p)
            if before is not None and offset < before[0]:
                v.add("backwards", f"{group} partition {p}: {before[0]} ({before[1]}) then "
                                   f"{offset} ({when})")
            if before is None or offset > before[0]:
                seen[p] = (offset, when)
            if obs.ends and offset > obs.ends[p]:
                v.add("beyond end", f"{group} partition {p}: {offset} ({when}) past the "
                                    f"input's end {obs.ends[p]}")
    if obs.plan.kind == "share" or not readings:
        return
    final = readings[-1][1]
    for e in obs.events.get(g, ()):
        if e.kind in ("C", "T"):
            for item in e.data:
                p, o = map(int, item.split(":"))
                if o > final[p]:
                    v.add("backwards", f"{group} partition {p}: {e.worker} (incarnation "
                                       f"{e.incarnation}) had commit {o} answered at "
                                       f"t={e.t - obs.t0:.2f}s, the group ends at {final[p]}")


def _acknowledged_upto(obs: Observations, g: str) -> list[int]:
    """Per partition, the highest offset the group was seen to have committed."""
    upto = [max(c, 0) for c in obs.final(obs.plan.group(g))]
    for _, offsets in obs.samples.get(obs.plan.group(g), ()):
        upto = [max(a, b) for a, b in zip(upto, offsets, strict=True)]
    for e in obs.events.get(g, ()):
        if e.kind in ("C", "T"):
            for item in e.data:
                p, o = map(int, item.split(":"))
                upto[p] = max(upto[p], o)
    return upto


def _delivered(obs: Observations, g: str) -> set[tuple[int, int]]:
    return {(int(e.data[0]), int(e.data[1])) for e in obs.events.get(g, ()) if e.kind == "D"}


def _at_least_once(obs: Observations, v: Verdict) -> None:
    upto = _acknowledged_upto(obs, "alo")
    acked = {k for k in obs.inputs if k[1] < upto[k[0]]}
    missing = acked - _delivered(obs, "alo")
    if missing:
        v.add("lost", f"group {obs.plan.group('alo')} committed past {_where(obs, missing)} "
                      "that no worker of it logged as delivered")


def _at_least_once_share(obs: Observations, v: Verdict) -> None:
    start = _acknowledged_upto(obs, "alo")
    accepted = {(int(p), int(o)) for e in obs.events.get("alo", ()) if e.kind == "A"
                for p, o in (item.split(":") for item in e.data)}
    acked = {k for k in obs.inputs if k[1] < start[k[0]]} | accepted
    missing = acked - _delivered(obs, "alo")
    if missing:
        v.add("lost", f"share group {obs.plan.group('alo')} acknowledged (start offset past it, "
                      f"or ACCEPTed) {_where(obs, missing)} that no worker of it logged as "
                      "delivered")


def _exactly_once(obs: Observations, outputs: list[str], v: Verdict) -> set[tuple[int, int]]:
    """Output == the transformed input below the eos group's offsets, each once; returns the
    share records missing because archived at the delivery limit."""
    group = obs.plan.group("eos")
    final = [max(c, 0) for c in obs.final(group)]
    by_output = {transform(val).decode(): k for k, val in obs.inputs.items()}
    counts = Counter(outputs)
    unknown = [o for o in counts if o not in by_output]
    if unknown:
        v.add("output ahead", f"{len(unknown)} output value(s) of no input record: "
                              f"{unknown[:SHOWN]}")
    twice = {by_output[o]: n for o, n in counts.items() if n > 1 and o in by_output}
    if twice:
        v.add("duplicated", f"group {group}: {_where(obs, twice)} with more than one output "
                            f"(counts {sorted(twice.values(), reverse=True)[:SHOWN]})")
    produced = {by_output[o] for o in counts if o in by_output}
    poison = {k for k, val in obs.inputs.items() if val.endswith(POISON)}
    ahead = {k for k in produced if k[1] >= final[k[0]]}
    if ahead:
        v.add("output ahead", f"group {group} ends at offsets {final}: output of "
                              f"{_where(obs, ahead)} it never committed past")
    if produced & poison:
        v.add("output ahead", f"group {group}: output of poison {_where(obs, produced & poison)}"
                              ", never ACCEPTed")
    expected = {k for k in obs.inputs if k[1] < final[k[0]]} - poison
    counts_seen = obs.max_delivery_counts("eos")
    archived = {k for k in expected - produced if counts_seen.get(k, 0) >= DELIVERY_LIMIT} \
        if obs.plan.kind == "share" else set()
    missing = expected - produced - archived
    if missing:
        v.add("lost", f"group {group} ends at offsets {final}: no output (read_committed) for "
                      f"{_where(obs, missing)}")
    return archived


def _crashes(obs: Observations) -> tuple[int, int]:
    types = [e["type"] for e in obs.executed]
    return types.count("broker-kill"), types.count("power-cut")


def _delivery_limit(obs: Observations, v: Verdict) -> None:
    kills, cuts = _crashes(obs)
    bound = DELIVERY_LIMIT + kills + DELIVERY_LIMIT * cuts
    for g in GROUPS:
        times: Counter[tuple[int, int]] = Counter()
        over: dict[tuple[int, int], int] = {}
        for e in obs.events.get(g, ()):
            if e.kind == "D":
                key, n = (int(e.data[0]), int(e.data[1])), int(e.data[2])
                times[key] += 1
                if n > DELIVERY_LIMIT:
                    over[key] = max(over.get(key, 0), n)
        group = obs.plan.group(g)
        if over:
            v.add("delivery limit", f"group {group}: {_where(obs, over)} delivered with a "
                                    f"delivery count above the limit {DELIVERY_LIMIT} "
                                    f"(up to {max(over.values())})")
        many = {k: n for k, n in times.items() if n > bound}
        if many:
            v.add("delivery limit", f"group {group}: {_where(obs, many)} delivered more than "
                                    f"{bound} times (limit {DELIVERY_LIMIT}, {kills} broker "
                                    f"kill(s), {cuts} power cut(s)): up to "
                                    f"{max(many.values())}")


def _lock_release(obs: Observations, v: Verdict) -> list[float]:
    """For each record a killed share worker held (delivered to it, not settled by it): when it
    was delivered again, counted from the kill. Returns the delays measured (no broker fault in
    between)."""
    delays: list[float] = []
    for g in GROUPS:
        bound = LOCK_MS / 1000 + (TXN_SESSION_MS / 1000 if g == "eos" else 0) + LOCK_SLACK_S
        events = obs.events.get(g, ())
        deliveries: dict[tuple[int, int], list[float]] = {}
        for e in events:
            if e.kind == "D":
                deliveries.setdefault((int(e.data[0]), int(e.data[1])), []).append(e.t)
        for t_kill, worker, incarnation in obs.kills:
            if not worker.startswith(g):
                continue
            mine = [e for e in events if e.worker == worker and e.incarnation == incarnation]
            settled = {tuple(map(int, item.split(":"))) for e in mine if e.kind in ("A", "T")
                       for item in e.data}
            held = {(int(e.data[0]), int(e.data[1])): e.t for e in mine if e.kind == "D"}
            for key, t_held in held.items():
                if key in settled or obs.inputs.get(key, b"").endswith(POISON):
                    continue
                later = [t for t in deliveries.get(key, ()) if t > t_held]
                if not later or later[0] < t_kill:
                    continue  # settled unseen, or gone from the holder before its kill
                if any(start < later[0] and end > t_kill for start, end in obs.broker_faults):
                    continue
                delay = later[0] - t_kill
                delays.append(delay)
                if delay > bound:
                    v.add("lock", f"group {obs.plan.group(g)}: {_where(obs, [key])} held by "
                                  f"{worker} (incarnation {incarnation}), killed at "
                                  f"t={t_kill - obs.t0:.2f}s, delivered again only "
                                  f"{delay:.1f}s later (bound {bound:g}s)")
    return delays


def report(obs: Observations, verdict: Verdict) -> str:
    """What a failure's message says: the seed, the faults as they ran, the findings, the
    figures and where the logs are."""
    plan = obs.plan
    rerun = (f".venv/bin/python bench/group_faults.py --kind {plan.kind} --seed {plan.seed} "
             f"--duration {plan.duration:g} --rate {plan.rate:g} --power-cuts "
             f"{'on' if plan.power_cuts else 'off'} --inject {plan.inject}")
    head = (f"group fault run kind={plan.kind} seed={plan.seed} (duration {plan.duration:g}s, "
            f"{plan.rate:g} records/s, power cuts {'on' if plan.power_cuts else 'off'}, "
            f"inject {plan.inject}); rerun: {rerun}")
    lines = [head, "faults as they ran (t from the first input record):"]
    lines += [f"  {e['type']} planned t={e['planned_at']:.2f}s, ran t={e['at']:.2f}s-"
              f"{e['end']:.2f}s {e['target']} {e['seconds']:g}s {e['note']}".rstrip()
              for e in obs.executed] or ["  (none ran)"]
    for category, findings in verdict.anomalies.items():
        lines.append(f"ANOMALY {category}:")
        lines += [f"  {f}" for f in findings[:SHOWN]]
    lines += verdict.behind
    lines.append(f"figures: {verdict.figures}")
    lines.append(f"logs (in {obs.work}):")
    lines += [f"  {p}" for p in obs.logs()]
    return "\n".join(lines)
