"""The demo's verdict: what came out of the pipeline against what went in, and which failure it
is when they differ.

Two failures give the same table of counts and are told apart here:

- the pipeline has not caught up: when the wait for it ended (`--catch-up-seconds`), its queries
  had not processed the whole input. A record missing from the output past the orders query's
  position in the input is not there yet: it is counted as missing and called pending, not lost.
- records lost, duplicated or wrong: a record missing although the orders query's position is
  past it (every record, once the query has processed the whole input) is lost; one that came
  out twice is duplicated; one that was not fed, or whose fields differ from its event's, or a
  window whose count or total differs from the input's, is wrong.

Then transactions of the queries left open, the driver's exit code and a query's error. Each
finding has counts and a few examples. Plain values in, lines of text out: the demo's run
(exactly.demo.app) gathers the values, the tests construct them.
"""

from __future__ import annotations

import collections
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exactly.demo.pipeline import DLQ_TOPIC, ENRICHED_TOPIC, REGIONS, STATS_TOPIC, WINDOW_SECONDS

EXAMPLES = 3  # examples of each finding
Position = tuple[int, int]  # (partition, offset) of a record in the input topic


@dataclass
class Fed:
    """What the feeder wrote (acknowledged): the expected input of the pipeline, and where each
    record is in the input topic."""
    good: dict[str, dict[str, Any]] = field(default_factory=dict)  # order id -> event
    bad: Counter[bytes] = field(default_factory=Counter)
    total: int = 0
    good_at: dict[str, Position] = field(default_factory=dict)  # order id -> its position
    bad_at: dict[bytes, list[Position]] = field(default_factory=dict)


@dataclass
class CatchUp:
    """How the wait for the pipeline ended. `position`: where the orders query is in the input
    topic, partition -> the offset its last batch ended at (None: no batch reported); `end`: the
    end of the input topic; `windows`: windows in order-stats at the end of the wait, of
    `want_windows`."""
    bound: float  # --catch-up-seconds
    waited: float
    caught_up: bool
    position: dict[int, int] | None
    end: dict[int, int]
    windows: int = 0
    want_windows: int = 0

    def behind(self, at: Position) -> bool:
        """The record at `at` is past the orders query's position: not processed yet."""
        if self.caught_up:
            return False
        partition, offset = at
        return self.position is None or offset >= self.position.get(partition, 0)


@dataclass
class OutputCheck:
    """One output topic against the input: counts, and a few examples of each finding."""
    topic: str
    expected: int
    records: int
    duplicates: int = 0  # copies beyond the first
    lost: int = 0
    pending: int = 0  # missing, past the query's position: not processed yet
    wrong: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)  # finding -> examples

    @property
    def missing(self) -> int:
        return self.lost + self.pending

    def row(self) -> tuple[str, int, int, int, int, int]:
        return (self.topic, self.expected, self.records, self.duplicates, self.missing,
                self.wrong)

    def note(self, finding: str, example: str) -> None:
        found = self.examples.setdefault(finding, [])
        if len(found) < EXAMPLES:
            found.append(example)


def expected_stats(fed: Fed) -> dict[tuple[int, str], tuple[int, float]]:
    """(window start ms, region) -> (orders, total): the windows the stats query should emit."""
    windows: dict[tuple[int, str], list[float]] = collections.defaultdict(list)
    for event in fed.good.values():
        if event["order_id"] == "o-end":
            continue  # its own window is still open
        start = event["ts"] // (WINDOW_SECONDS * 1000) * WINDOW_SECONDS * 1000
        windows[start, REGIONS[event["customer"]]].append(event["amount"])
    return {k: (len(v), round(sum(v), 2)) for k, v in windows.items()}


def _where(at: Position | None) -> str:
    return f" (input partition {at[0]}, offset {at[1]})" if at is not None else ""


def check_enriched(fed: Fed, values: Iterable[bytes], catch_up: CatchUp) -> OutputCheck:
    """orders-enriched: each valid order once, its fields those of its event."""
    got: Counter[str] = Counter()
    check = OutputCheck(ENRICHED_TOPIC, len(fed.good), 0)
    for value in values:
        check.records += 1
        record = json.loads(value)
        order_id = record["order_id"]
        got[order_id] += 1
        event = fed.good.get(order_id)
        if got[order_id] > 1:
            continue  # a duplicate: counted below
        if event is None:
            check.wrong += 1
            check.note("wrong", f"{order_id} was not fed as a valid order")
            continue
        differs = [f"{name} {record.get(name)!r}, fed {want!r}" for name, want in (
            ("customer", event["customer"]), ("amount", event["amount"]), ("ts", event["ts"]),
            ("region", REGIONS.get(event["customer"], "unknown"))) if record.get(name) != want]
        if differs:
            check.wrong += 1
            check.note("wrong", f"{order_id}: {' and '.join(differs)}")
    for order_id, n in sorted(got.items()):
        if n > 1:
            check.duplicates += n - 1
            check.note("duplicated", f"{order_id} x{n}")
    for order_id in sorted(set(fed.good) - set(got)):
        at = fed.good_at.get(order_id)
        if at is not None and catch_up.behind(at):
            check.pending += 1
            check.note("pending", f"{order_id}{_where(at)}")
        else:
            check.lost += 1
            check.note("lost", f"{order_id}{_where(at)}")
    return check


def check_dead_letters(fed: Fed, values: Iterable[bytes], catch_up: CatchUp) -> OutputCheck:
    """orders-dlq: each malformed event once, as it came."""
    got = Counter(values)
    check = OutputCheck(DLQ_TOPIC, sum(fed.bad.values()), sum(got.values()))
    for value, n in sorted(got.items()):
        if value not in fed.bad:
            check.wrong += n
            check.note("wrong", f"{value[:60]!r} was not fed as a malformed event")
        elif n > fed.bad[value]:
            check.duplicates += n - fed.bad[value]
            check.note("duplicated", f"{value[:60]!r} x{n}")
    for value, n in sorted(fed.bad.items()):
        short = n - got[value]
        if short <= 0:
            continue
        places = sorted(fed.bad_at.get(value, []))
        at = places[-1] if places else None
        if at is not None and catch_up.behind(at):
            check.pending += short
            check.note("pending", f"{value[:60]!r}{_where(at)}")
        else:
            check.lost += short
            check.note("lost", f"{value[:60]!r}{_where(at)}")
    return check


def check_stats(fed: Fed, values: Iterable[bytes], catch_up: CatchUp) -> OutputCheck:
    """order-stats: each closed window once, with the input's count and total."""
    want = expected_stats(fed)
    got: Counter[tuple[int, str]] = Counter()
    check = OutputCheck(STATS_TOPIC, len(want), 0)
    for value in values:
        check.records += 1
        stat = json.loads(value)
        key = (stat["window_start"], stat["region"])
        got[key] += 1
        expected = want.get(key)
        if expected is None:
            check.wrong += 1
            check.note("wrong", f"window {key[0]} {key[1]}: {stat['orders']} orders, total "
                                f"{stat['total']} (no such window in the input)")
        elif expected[0] != stat["orders"] or abs(expected[1] - stat["total"]) > 0.011:
            check.wrong += 1
            check.note("wrong", f"window {key[0]} {key[1]}: {stat['orders']} orders, total "
                                f"{stat['total']} (the input: {expected[0]}, {expected[1]})")
    for key, n in sorted(got.items()):
        if n > 1:
            check.duplicates += n - 1
            check.note("duplicated", f"window {key[0]} {key[1]} x{n}")
    for key in sorted(set(want) - set(got)):
        # A window comes out once the watermark passes it: before the wait ended, it may not
        # have yet.
        finding = "lost" if catch_up.caught_up else "pending"
        setattr(check, finding, getattr(check, finding) + 1)
        check.note(finding, f"window {key[0]} {key[1]}")
    return check


def check_outputs(fed: Fed, enriched: Iterable[bytes], dead_letters: Iterable[bytes],
                  stats: Iterable[bytes], catch_up: CatchUp) -> list[OutputCheck]:
    """Each output topic (the values read_committed reads) against the input."""
    return [check_enriched(fed, enriched, catch_up),
            check_dead_letters(fed, dead_letters, catch_up),
            check_stats(fed, stats, catch_up)]


def offsets(end: Any) -> dict[int, int] | None:
    """A Spark source offset of the input topic ({"orders": {"0": 12, ...}}, or its JSON) as
    partition -> offset."""
    if end is None:
        return None
    if isinstance(end, str):
        end = json.loads(end)
    by_partition: Mapping[str, int] = next(iter(end.values()), {}) if end else {}
    return {int(p): int(o) for p, o in by_partition.items()}


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def verdict(checks: list[OutputCheck], catch_up: CatchUp, *, open_transactions: int = 0,
            driver_exit: int | None = 0, pipeline_error: str | None = None) -> list[str]:
    """What went wrong, one finding a line, each with its counts and a few examples; empty if
    every event came out exactly once and nothing was left open."""
    findings: list[str] = []
    if pipeline_error is not None:  # its first line; the rest is in the driver's log
        findings.append(f"the pipeline failed: {_first_line(pipeline_error)}")
    if not catch_up.caught_up:
        of = sum(catch_up.end.values())
        if catch_up.position is None:
            where = f"the orders query has reported no batch; the input ends at offset {of}"
        else:
            where = (f"it is at offset {sum(catch_up.position.values())} of {of}: the orders "
                     "query's position in the input")
        within = (f"within {catch_up.bound:g} s" if catch_up.waited >= catch_up.bound else
                  f"when the wait for it ended, after {catch_up.waited:.0f} of at most "
                  f"{catch_up.bound:g} s (the driver ended, or a query failed)")
        findings.append(
            f"the pipeline has not caught up {within} ({where}, summed over "
            f"its {len(catch_up.end)} partitions; order-stats has {catch_up.windows} of "
            f"{catch_up.want_windows} windows): what it has not processed yet is missing from "
            "the output, not lost; a busy machine may need a larger --catch-up-seconds")
    for check in checks:
        for finding, count, what in (
                ("lost", check.lost, "lost (missing, and the query is past them)"),
                ("duplicated", check.duplicates, "duplicated (copies beyond the first)"),
                ("wrong", check.wrong, "wrong"),
                ("pending", check.pending, "not there yet (past the query's position)")):
            if count:
                examples = "; ".join(check.examples.get(finding, []))
                findings.append(f"{check.topic}: {count} {what}, e.g. {examples}")
    if open_transactions:
        findings.append(f"{open_transactions} transactions of the queries are left open")
    if driver_exit is None:
        findings.append("the driver did not stop when asked (killed)")
    elif driver_exit != 0:
        findings.append(f"the driver exited with code {driver_exit}")
    return findings


def headline(findings: list[str], catch_up: CatchUp, checks: list[OutputCheck], *,
             driver_exit: int | None = 0, pipeline_error: str | None = None) -> str:
    """The demo's last line: verified, or which failure it is: "VERIFICATION FAILED: the
    pipeline has not caught up", "...: records 2 lost, 1 duplicated", "...: a query failed; the
    driver exited with code 1; the pipeline has not caught up", or else the first finding."""
    if not findings:
        return "verified: every event exactly once, no transaction left open"
    parts = []
    if pipeline_error is not None:
        parts.append(f"a query failed ({_first_line(pipeline_error)[:120]})")
    if driver_exit is None or driver_exit != 0:
        parts.append("the driver did not stop" if driver_exit is None
                     else f"the driver exited with code {driver_exit}")
    if not catch_up.caught_up:
        parts.append("the pipeline has not caught up")
    counts = [f"{n} {name}" for name, n in (
        ("lost", sum(c.lost for c in checks)), ("duplicated", sum(c.duplicates for c in checks)),
        ("wrong", sum(c.wrong for c in checks))) if n]
    if counts:
        parts.append(f"records {', '.join(counts)}")
    return f"VERIFICATION FAILED: {'; '.join(parts or findings[:1])}"
