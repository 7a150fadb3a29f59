"""EXACTLY_SPARK_LOG_LEVEL: the connector's logging in Spark's Python workers, which nobody
configures, sent to their stderr; a value that is not a level is a clear error."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = ("import logging, exactly.spark; "
        "logging.getLogger('exactly.spark.stream_sink').info('event=probe')")


def run(level: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EXACTLY_SPARK_LOG_LEVEL"}
    if level is not None:
        env["EXACTLY_SPARK_LOG_LEVEL"] = level
    return subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_info_goes_to_stderr_only_when_asked() -> None:
    quiet, loud = run(None), run("info")
    assert quiet.returncode == loud.returncode == 0, quiet.stderr + loud.stderr
    assert "event=probe" not in quiet.stderr
    assert "INFO exactly.spark.stream_sink event=probe" in loud.stderr


def test_a_value_that_is_not_a_level_is_named_in_the_error() -> None:
    proc = run("chatty")
    assert proc.returncode != 0
    assert "EXACTLY_SPARK_LOG_LEVEL='chatty' is not a logging level" in proc.stderr
