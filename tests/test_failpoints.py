"""exactly.failpoints: parsing, the @batch condition, raise, and crash killing the whole session."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from exactly import failpoints


def test_points_parse_and_bad_entries_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "a.b=crash@3; c=raise")
    assert failpoints.active() == {"a.b": ("crash", 3), "c": ("raise", 0)}
    for bad in ("a=explode", "noequals", "a=crash@x", "=raise"):
        monkeypatch.setenv(failpoints.ENV, bad)
        with pytest.raises(ValueError, match="bad EXACTLY_FAILPOINTS entry"):
            failpoints.active()


def test_raise_fires_from_its_batch_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "spark.task.write=raise@2")
    failpoints.hit("spark.task.write", batch=1)  # before its batch: nothing
    failpoints.hit("other.point", batch=5)       # not listed: nothing
    with pytest.raises(failpoints.FailpointError, match="spark.task.write"):
        failpoints.hit("spark.task.write", batch=2)
    monkeypatch.delenv(failpoints.ENV)
    failpoints.hit("spark.task.write", batch=9)


def test_crash_kills_every_process_of_the_session(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        from exactly import failpoints
        child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setpgid(0, 0); "
                                  "open({str(tmp_path / 'child')!r}, 'w').write(str(os.getpid())); "
                                  "time.sleep(60)"])
        time.sleep(1.0)
        failpoints.hit("driver.point")
        print("survived", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], env={
        **__import__("os").environ, failpoints.ENV: "driver.point=crash"},
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
