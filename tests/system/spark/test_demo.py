"""`exactly demo`: its options, its place beside the connector, a short run with a driver kill
that the demo verifies itself, and its verdict (exactly.demo.verdict) on constructed outputs: a
pipeline that has not caught up is told apart from records lost, duplicated or wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exactly.demo.pipeline import REGIONS
from exactly.demo.verdict import (
    CatchUp,
    Fed,
    OutputCheck,
    check_outputs,
    expected_stats,
    headline,
    offsets,
    verdict,
)
from tests.helpers.demo.verified import assert_verified

EXACTLY = Path(sys.executable).parent / "exactly"


def test_demo_help_lists_the_demos_options() -> None:
    proc = subprocess.run([str(EXACTLY), "demo", "--help"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    for option in ("--crashes", "--seconds", "--rate", "--trigger-seconds", "--delivery",
                   "--seed", "--catch-up-seconds", "--cluster", "--master", "--bootstrap-server"):
        assert option in proc.stdout, proc.stdout


def test_a_bootstrap_server_that_is_not_there_is_said_plainly() -> None:
    proc = subprocess.run([str(EXACTLY), "demo", "--bootstrap-server", "127.0.0.1:1",
                           "--seconds", "1"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cannot create the demo's topics" in proc.stdout
    assert "127.0.0.1:1" in proc.stdout and "Traceback" not in proc.stderr


def test_the_connector_does_not_import_the_demo() -> None:
    code = ("import sys, exactly.spark; "
            "print(sorted(m for m in sys.modules if m.startswith('exactly.demo')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def run_demo(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(EXACTLY), "demo", *args], capture_output=True, text=True,
                          timeout=900, check=False, env=env)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert_verified(out)
    return out


@pytest.mark.timeout(600)  # three driver starts, one 15 s late: 300 s was not enough beside a load
def test_demo_survives_a_slow_python_worker_and_a_driver_kill_and_verifies(
        tmp_path: Path) -> None:
    """The Python that Spark starts for a streaming query's data source is held back 15 s the
    first time, past Spark's fixed 10 s wait for it to connect back (as on a loaded machine): the
    query ends with "Python worker failed to connect back", the demo's driver starts it again on
    its checkpoint, and the run verifies; then a kill -9 of the driver."""
    held = tmp_path / "held-once"
    python = tmp_path / "python"
    python.write_text(f"""#!/bin/sh
case "$*" in *python_streaming_source_runner*)
    if mkdir {held} 2>/dev/null; then sleep 15; fi;;
esac
exec {sys.executable} "$@"
""")
    python.chmod(0o755)
    env = {**os.environ, "PYSPARK_PYTHON": str(python)}
    out = run_demo("--seconds", "15", "--rate", "100", "--crashes", "1", "--seed", "7", env=env)
    assert held.is_dir(), "the streaming source's Python worker was never started"
    assert "query ended: Python worker failed to connect back" in out, out[-4000:]
    assert "started again on its checkpoint, 1 of at most 3 times" in out, out[-4000:]
    assert "driver kills: 1" in out


@pytest.mark.timeout(600)  # seven JVMs and three restarts: over 300 s while the suite runs beside
def test_demo_on_a_cluster_survives_driver_executor_and_worker_kills() -> None:
    """`exactly demo --cluster 2`: a standalone master and two workers on this machine; the
    kills take turns: the driver, an executor JVM, a whole worker."""
    out = run_demo("--cluster", "2", "--seconds", "20", "--rate", "100", "--crashes", "3",
                   "--seed", "7")
    assert "starting a Spark cluster: a master and 2 workers" in out
    assert "driver kills: 1   executor kills: 1   worker kills: 1" in out


# -- the verdict, on constructed inputs (no broker, no Spark) ----------------------------------

def fed_input() -> Fed:
    """Eight valid orders, two partitions of four, in two 10-second windows; two malformed events
    at the end of partition 1."""
    fed = Fed()
    for i in range(8):
        event = {"order_id": f"o{i}", "customer": f"c{i % 2:02d}", "amount": 10.0 + i,
                 "ts": 1_000 * i * 2}
        fed.good[event["order_id"]] = event
        fed.good_at[event["order_id"]] = (i % 2, i // 2)
    for k, value in enumerate((b'{"order_id": "o8", "amount": ', b'{"order_id": "o9"}')):
        fed.bad[value] += 1
        fed.bad_at[value] = [(1, 4 + k)]
    fed.total = 10
    return fed


def enriched(fed: Fed, ids: list[str], **changes: object) -> list[bytes]:
    out = []
    for order_id in ids:
        event = fed.good[order_id]
        record = {**event, "region": REGIONS[event["customer"]], "band": "small"}
        out.append(json.dumps({**record, **changes.get(order_id, {})}).encode())  # type: ignore[dict-item]
    return out


def stats(fed: Fed, **totals: float) -> list[bytes]:
    return [json.dumps({"window_start": start, "region": region, "orders": n,
                        "total": totals.get(f"{start}-{region}", total)}).encode()
            for (start, region), (n, total) in sorted(expected_stats(fed).items())]


END = {0: 4, 1: 6}


def caught_up() -> CatchUp:
    return CatchUp(300, 12, True, dict(END), dict(END), 4, 4)


def test_a_run_where_everything_came_out_once_is_verified() -> None:
    fed = fed_input()
    checks = check_outputs(fed, enriched(fed, sorted(fed.good)), list(fed.bad), stats(fed),
                           caught_up())
    assert [c.row() for c in checks] == [("orders-enriched", 8, 8, 0, 0, 0),
                                         ("orders-dlq", 2, 2, 0, 0, 0),
                                         ("order-stats", 4, 4, 0, 0, 0)]
    findings = verdict(checks, caught_up())
    assert findings == []
    assert headline(findings, caught_up(), checks).startswith("verified: every event exactly once")


def test_a_pipeline_behind_is_told_apart_from_lost_records() -> None:
    # The wait ended with the orders query at offsets 2 and 1 of 4 and 6: the orders after
    # those, the malformed events and the windows are not there yet; none is lost.
    fed = fed_input()
    behind = CatchUp(300, 300, False, {0: 2, 1: 1}, dict(END), 0, 4)
    processed = ["o0", "o2", "o1"]  # (0, 0), (0, 1), (1, 0)
    checks = check_outputs(fed, enriched(fed, processed), [], [], behind)
    assert [c.row() for c in checks] == [("orders-enriched", 8, 3, 0, 5, 0),
                                         ("orders-dlq", 2, 0, 0, 2, 0),
                                         ("order-stats", 4, 0, 0, 4, 0)]
    assert [(c.lost, c.pending) for c in checks] == [(0, 5), (0, 2), (0, 4)]
    findings = verdict(checks, behind)
    assert findings[0].startswith(
        "the pipeline has not caught up within 300 s (it is at offset 3 of 10: the orders "
        "query's position in the input, summed over its 2 partitions; order-stats has 0 of 4 "
        "windows)")
    assert "--catch-up-seconds" in findings[0]
    assert not any("lost" in f.split(":")[1] for f in findings[1:])
    assert "orders-enriched: 5 not there yet (past the query's position), e.g. o3 (input " \
           "partition 1, offset 1); o4 (input partition 0, offset 2); o5" in findings[1]
    assert headline(findings, behind, checks) == \
        "VERIFICATION FAILED: the pipeline has not caught up"


def test_records_lost_duplicated_and_wrong_are_counted_with_examples() -> None:
    fed = fed_input()
    ids = ["o0", "o1", "o1", "o2", "o3", "o4", "o6", "o7", "o7", "o7"]  # o5 lost
    out = enriched(fed, ids, o2={"amount": 99.5}, o3={"region": "nowhere"})
    # Window [0, 10 s) of north: o0, o2 and o4, 10 + 12 + 14; its total comes out wrong.
    checks = check_outputs(fed, out, [*fed.bad, *fed.bad], stats(fed, **{"0-north": 1.25}),
                           caught_up())
    assert [c.row() for c in checks] == [("orders-enriched", 8, 10, 3, 1, 2),
                                         ("orders-dlq", 2, 4, 2, 0, 0),
                                         ("order-stats", 4, 4, 0, 0, 1)]
    findings = verdict(checks, caught_up(), open_transactions=1, driver_exit=0)
    assert findings == [
        ("orders-enriched: 1 lost (missing, and the query is past them), e.g. o5 (input "
        "partition 1, offset 2)"),
        "orders-enriched: 3 duplicated (copies beyond the first), e.g. o1 x2; o7 x3",
        ("orders-enriched: 2 wrong, e.g. o2: amount 99.5, fed 12.0; o3: region 'nowhere', "
        "fed 'south'"),
        ("orders-dlq: 2 duplicated (copies beyond the first), e.g. b'{\"order_id\": \"o8\", "
        "\"amount\": ' x2; b'{\"order_id\": \"o9\"}' x2"),
        "order-stats: 1 wrong, e.g. window 0 north: 3 orders, total 1.25 (the input: 3, 36.0)",
        "1 transactions of the queries are left open",
    ]
    assert headline(findings, caught_up(), checks) == \
        "VERIFICATION FAILED: records 1 lost, 5 duplicated, 3 wrong"


def test_a_record_behind_the_queries_position_is_lost_even_when_the_wait_ran_out() -> None:
    fed = fed_input()
    behind = CatchUp(300, 300, False, {0: 4, 1: 4}, dict(END), 4, 4)
    ids = [i for i in sorted(fed.good) if i != "o4"]  # (0, 2): the query is past it
    checks = check_outputs(fed, enriched(fed, ids), [], stats(fed), behind)
    assert [(c.lost, c.pending) for c in checks] == [(1, 0), (0, 2), (0, 0)]
    findings = verdict(checks, behind, driver_exit=None)
    assert "orders-enriched: 1 lost (missing, and the query is past them), e.g. o4 (input " \
           "partition 0, offset 2)" in findings
    assert findings[-1] == "the driver did not stop when asked (killed)"
    assert headline(findings, behind, checks, driver_exit=None) == \
        "VERIFICATION FAILED: the driver did not stop; the pipeline has not caught up; " \
        "records 1 lost"


def test_an_ended_driver_ends_the_wait_early_and_says_so() -> None:
    fed = fed_input()
    ended = CatchUp(300, 3.2, False, None, dict(END), 0, 4)
    checks = check_outputs(fed, [], [], [], ended)
    error = "[STREAM_FAILED] boom\n=== Streaming Query ===\nIdentifier: orders"
    findings = verdict(checks, ended, driver_exit=1, pipeline_error=error)
    assert findings[0] == "the pipeline failed: [STREAM_FAILED] boom"
    assert findings[1].startswith(
        "the pipeline has not caught up when the wait for it ended, after 3 of at most 300 s "
        "(the driver ended, or a query failed) (the orders query has reported no batch; the "
        "input ends at offset 10, summed over its 2 partitions")
    assert findings[-1] == "the driver exited with code 1"
    assert sum(c.pending for c in checks) == 14 and sum(c.lost for c in checks) == 0
    assert headline(findings, ended, checks, driver_exit=1, pipeline_error=error) == \
        "VERIFICATION FAILED: a query failed ([STREAM_FAILED] boom); the driver exited with " \
        "code 1; the pipeline has not caught up"


def test_spark_offsets_are_read_as_json_or_as_a_mapping() -> None:
    assert offsets('{"orders": {"0": 12, "1": 7}}') == {0: 12, 1: 7}
    assert offsets({"orders": {"3": 1}}) == {3: 1}
    assert offsets(None) is None
    assert isinstance(OutputCheck("t", 0, 0).examples, dict)
