"""Where things are in the repository, for tests wherever they lie under tests/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
BENCH = REPO / "bench"
DOCS = REPO / "docs"
WORKERS = REPO / "tests" / "workers"
