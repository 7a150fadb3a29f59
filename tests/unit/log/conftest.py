from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exactly.log import LogConfig, PartitionLog
from tests.helpers.log.log_helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., PartitionLog]]:
    opened: list[PartitionLog] = []

    def _open(config: LogConfig | None = None, name: str = "t-0") -> PartitionLog:
        plog = PartitionLog.open(tmp_path / name, config or LogConfig(), clock=clock)
        opened.append(plog)
        return plog

    yield _open
    for plog in opened:
        plog.delete()
