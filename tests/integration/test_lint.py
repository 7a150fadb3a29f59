"""`make lint` inside `make test`: ruff over all the Python of the repository (the package, the
benchmarks, the tests) and mypy over the package and the test rigs, with the settings of
pyproject.toml. CI runs `make test` only, so a lint error fails CI here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

BIN = Path(sys.executable).parent


def _make_variable(name: str) -> list[str]:
    """A `NAME := a b c` line of the Makefile, so that the test checks what `make lint` checks."""
    found = re.search(rf"^{name} := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert found, f"{name} is not set in the Makefile"
    return found.group(1).split()


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)


def test_ruff() -> None:
    paths = _make_variable("RUFF_PATHS")
    assert {"src", "bench", "tests"} <= set(paths)
    result = _run(str(BIN / "ruff"), "check", "--no-cache", "--output-format", "concise", *paths)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy(tmp_path: Path) -> None:
    paths = _make_variable("MYPY_PATHS")
    assert paths == ["src/exactly", "tests/rigs"]
    result = _run(str(BIN / "mypy"), "--cache-dir", str(tmp_path / "cache"), *paths)
    assert result.returncode == 0, result.stdout + result.stderr
