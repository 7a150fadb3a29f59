"""exactly.failpoints: the syntax of EXACTLY_FAILPOINTS, the rule of @N with and without a count,
raise, pause (sync and async), crash killing the whole session; and the catalogue, the call sites
in src/exactly and the points the crash tests fire being one and the same set."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from exactly import failpoints
from exactly.failpoints import Failpoint
from tests.helpers.dualwrite.helpers import CONSUME_STEPS, PREFIX, RECOVERY_STEPS, STEPS
from tests.paths import REPO

# The tests that fire the points with a real broker, Spark driver or dual-write application.
FIRING_TESTS = ("tests/integration/server/test_fault_points.py",
                "tests/integration/server/test_markers_after_answer.py",
                "tests/system/spark/test_stream_faults.py", "tests/system/spark/test_batch_eos.py",
                "tests/integration/server/test_cleaner_crash.py",
                "tests/integration/server/test_request_memory.py",
                "tests/integration/server/test_handling_failures.py")
SKIPPING_TESTS = ("tests/system/server/test_power_cut.py",  # the tests that leave SKIPS' steps out
                  "tests/system/server/test_produce_turns.py")
# tests/integration/dualwrite's parametrized crashes:
DUALWRITE_TESTS = STEPS + RECOVERY_STEPS + CONSUME_STEPS


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """No fault point switched on, and no hit counted yet."""
    monkeypatch.delenv(failpoints.ENV, raising=False)
    monkeypatch.setattr(failpoints, "_hits", Counter())


def test_entries_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, " txn.after_prepare=crash@3; spark.task.write=raise;"
                                       "txn.before_markers = pause:2.5 @ 1;")
    assert failpoints.active() == {
        "txn.after_prepare": Failpoint("crash", at=3),
        "spark.task.write": Failpoint("raise"),
        "txn.before_markers": Failpoint("pause", at=1, seconds=2.5),
    }
    monkeypatch.setenv(failpoints.ENV, "")
    assert failpoints.active() == {}


@pytest.mark.parametrize("bad", ["txn.after_prepare=explode", "txn.after_prepare",
                                 "=raise", "txn.after_prepare=crash@x",
                                 "txn.after_prepare=crash@-1", "txn.after_prepare=crash:1",
                                 "txn.before_markers=pause", "txn.before_markers=pause:soon",
                                 "txn.before_markers=pause:-1", "txn.before_markers=pause:inf"])
def test_bad_entries_are_refused_with_the_syntax(monkeypatch: pytest.MonkeyPatch, bad: str
                                                 ) -> None:
    monkeypatch.setenv(failpoints.ENV, f"spark.task.write=raise;{bad}")
    with pytest.raises(ValueError, match=f"bad EXACTLY_FAILPOINTS entry .* use {failpoints.SYNTAX}"):
        failpoints.active()
    with pytest.raises(ValueError, match="bad EXACTLY_FAILPOINTS entry"):
        failpoints.hit("spark.task.write")


def test_an_unknown_point_is_refused_naming_the_known_ones(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv(failpoints.ENV, "txn.after_prepare=crash;txn.after_prepared=crash")
    with pytest.raises(ValueError, match="unknown fault point 'txn.after_prepared'") as refused:
        failpoints.active()
    assert all(point in str(refused.value) for point in failpoints.CATALOGUE)


def test_a_malformed_variable_is_refused_at_import() -> None:
    proc = subprocess.run([sys.executable, "-c", "import exactly.failpoints"],
                          env={**os.environ, failpoints.ENV: "spark.task.write=maybe"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "bad EXACTLY_FAILPOINTS entry" in proc.stderr


def test_hit_of_a_point_not_in_the_catalogue_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="'no.such.point' is not in .*CATALOGUE"):
        failpoints.hit("no.such.point")  # even with the variable unset


def test_unlisted_points_and_an_unset_variable_do_nothing(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    failpoints.hit("spark.task.write")
    monkeypatch.setenv(failpoints.ENV, "spark.task.write=raise")
    failpoints.hit("txn.after_prepare")
    with pytest.raises(failpoints.FailpointError):
        failpoints.hit("spark.task.write")
    monkeypatch.delenv(failpoints.ENV)
    failpoints.hit("spark.task.write")


def test_without_count_at_n_fires_from_the_nth_hit_of_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "dualwrite.3-send=raise@3;dualwrite.5-update-data=raise")
    failpoints.hit("dualwrite.3-send")
    failpoints.hit("dualwrite.3-send")
    failpoints.hit("spark.task.write")  # other points count apart
    for n in (3, 4):
        with pytest.raises(failpoints.FailpointError, match=f"dualwrite.3-send \\(n={n}\\)"):
            failpoints.hit("dualwrite.3-send")
    with pytest.raises(failpoints.FailpointError, match="n=1"):  # without @N: the first hit on
        failpoints.hit("dualwrite.5-update-data")


def test_with_count_at_n_compares_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "spark.task.write=raise@2;spark.driver.mid_complete=raise")
    for _ in range(3):  # however often the process reaches it: batch 1 is before batch 2
        failpoints.hit("spark.task.write", count=1)
    with pytest.raises(failpoints.FailpointError, match="n=2"):
        failpoints.hit("spark.task.write", count=2)
    with pytest.raises(failpoints.FailpointError, match="n=7"):
        failpoints.hit("spark.task.write", count=7)
    with pytest.raises(failpoints.FailpointError, match="n=0"):  # without @N: from batch 0 on
        failpoints.hit("spark.driver.mid_complete", count=0)


def test_pause_sleeps_in_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(failpoints.time, "sleep", slept.append)
    monkeypatch.setenv(failpoints.ENV, "txn.before_markers=pause:0.25@2")
    failpoints.hit("txn.before_markers")
    assert slept == []
    failpoints.hit("txn.before_markers")
    assert slept == [0.25]


def test_pause_in_hit_async_lets_the_event_loop_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(failpoints.asyncio, "sleep", sleep)
    monkeypatch.setenv(failpoints.ENV, "txn.before_markers=pause:30")

    async def scenario() -> list[str]:
        events: list[str] = []

        async def other() -> None:
            events.append("other request served")

        served = asyncio.create_task(other())
        await failpoints.hit_async("txn.before_markers")
        events.append("resumed")
        await served
        return events

    assert asyncio.run(scenario()) == ["other request served", "resumed"]
    assert slept == [30.0]


def test_skip_leaves_a_step_out_from_the_nth_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert failpoints.skip("log.roll.fsync_dir") is False  # the variable unset
    monkeypatch.setenv(failpoints.ENV, "log.roll.fsync_dir=skip@2")
    assert failpoints.active() == {"log.roll.fsync_dir": Failpoint("skip", at=2)}
    assert [failpoints.skip("log.roll.fsync_dir") for _ in range(3)] == [False, True, True]


@pytest.mark.parametrize(("entry", "why"), [
    ("txn.after_prepare=skip", "txn.after_prepare is a moment, not a step"),
    ("log.roll.fsync_dir=crash", "skip is the one action of the points of SKIPS"),
    ("log.roll.fsync_dir=skip:1", "unknown action"),
])
def test_skip_only_where_a_step_can_be_left_out(monkeypatch: pytest.MonkeyPatch, entry: str,
                                                why: str) -> None:
    monkeypatch.setenv(failpoints.ENV, entry)
    with pytest.raises(ValueError, match=why):
        failpoints.active()


def test_skip_of_a_point_not_in_skips_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="'txn.after_prepare' is not in .*SKIPS"):
        failpoints.skip("txn.after_prepare")


def test_hit_async_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "txn.after_markers=raise")
    with pytest.raises(failpoints.FailpointError, match="txn.after_markers"):
        asyncio.run(failpoints.hit_async("txn.after_markers"))


def test_crash_kills_every_process_of_the_session(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        from exactly import failpoints
        child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setpgid(0, 0); "
                                  "open({str(tmp_path / 'child')!r}, 'w').write(str(os.getpid())); "
                                  "time.sleep(60)"])
        time.sleep(1.0)
        failpoints.hit("spark.driver.after_decision", count=3)
        print("survived", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], env={
        **os.environ, failpoints.ENV: "spark.driver.after_decision=crash@3"},
        capture_output=True, text=True, start_new_session=True, timeout=60, check=False)
    assert proc.returncode == -9 and "survived" not in proc.stdout
    child = int((tmp_path / "child").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the child, in a process group of its own, died too
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"process {child} of the crashed session is still running")


# -- one set: the catalogue, the call sites, the points the tests fire ----------------------------

def _call_sites(functions: tuple[str, ...] = ("hit", "hit_async")) -> dict[str, list[str]]:
    """Point -> where src/exactly calls failpoints.hit/hit_async (or `functions`) with it."""
    sites: dict[str, list[str]] = {}
    for path in sorted((REPO / "src" / "exactly").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and node.module == "exactly.failpoints":
                assert not {a.name for a in node.names} & {"hit", "hit_async", "skip"}, (
                    f"{where}: call failpoints.hit(...), so that this check sees the call")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in functions
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "failpoints"):
                point = node.args[0] if node.args else None
                assert isinstance(point, ast.Constant) and isinstance(point.value, str), (
                    f"{where}: name the fault point with a string literal")
                sites.setdefault(point.value, []).append(where)
    return sites


def _fired_by_tests(tests: tuple[str, ...] = FIRING_TESTS,
                    known: dict[str, str] = failpoints.CATALOGUE) -> set[str]:
    """The points of `known` that `tests` set in EXACTLY_FAILPOINTS."""
    fired = {PREFIX + step for step in DUALWRITE_TESTS} if known is failpoints.CATALOGUE else set()
    for name in tests:
        for node in ast.walk(ast.parse((REPO / name).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for entry in node.value.split(";"):
                    point = entry.partition("=")[0].strip()
                    if point in known:
                        fired.add(point)
    return fired


def test_the_catalogue_the_call_sites_and_the_tests_name_the_same_points() -> None:
    catalogue = set(failpoints.CATALOGUE)
    sites = _call_sites()
    assert set(sites) == catalogue, (
        f"called but not in the catalogue: {sorted(set(sites) - catalogue)}; in the catalogue "
        f"but never called: {sorted(catalogue - set(sites))}")
    fired = _fired_by_tests()
    assert fired == catalogue, f"no test fires {sorted(catalogue - fired)}"
    assert all(d.strip() and "\n" not in d for d in failpoints.CATALOGUE.values())


def test_the_skips_the_call_sites_and_the_tests_name_the_same_steps() -> None:
    skips = set(failpoints.SKIPS)
    sites = _call_sites(("skip",))
    assert set(sites) == skips, (
        f"skipped but not in SKIPS: {sorted(set(sites) - skips)}; in SKIPS but never asked: "
        f"{sorted(skips - set(sites))}")
    fired = _fired_by_tests(SKIPPING_TESTS, failpoints.SKIPS)
    assert fired == skips, f"no test skips {sorted(skips - fired)}"
    assert not skips & set(failpoints.CATALOGUE)
    assert all(d.strip() and "\n" not in d for d in failpoints.SKIPS.values())


def test_every_point_is_documented() -> None:
    docs = (REPO / "docs" / "architecture.md").read_text()
    section = docs.partition("## Fault injection")[2].partition("\n## ")[0]
    missing = [p for p in failpoints.CATALOGUE if f"`{p}`" not in section]
    assert section and not missing, f"docs/architecture.md, Fault injection, lacks {missing}"
