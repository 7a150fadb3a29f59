"""Fixtures for the group coordinator tests: a real LogManager on tmp_path and small helpers
that drive the sans-IO coordinator with explicit time."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exactly.groups import GroupConfig, GroupCoordinator
from exactly.log import LogManager
from exactly.log.config import LogConfig
from exactly.log.errors import LogError
from tests.helpers.groups.group_helpers import T0


def make_config(**overrides: int) -> GroupConfig:
    values = {"initial_rebalance_delay_ms": 0, "min_session_timeout_ms": 6000,
              "max_session_timeout_ms": 1_800_000, "offsets_topic_num_partitions": 5,
              "offsets_retention_ms": 7 * 24 * 3600 * 1000}
    values.update(overrides)
    return GroupConfig(**values)


@dataclass
class Env:
    path: Path
    logs: LogManager
    config: GroupConfig
    coordinator: GroupCoordinator
    opened: list[LogManager] = field(default_factory=list)

    def restart(self, now_ms: int) -> GroupCoordinator:
        """Close the logs, reopen the directory and build a fresh coordinator on it."""
        self.logs.close()
        self.logs = LogManager(self.path, LogConfig(flush_policy="os"))
        self.opened.append(self.logs)
        self.coordinator = GroupCoordinator(self.logs, self.config, now_ms=now_ms)
        return self.coordinator


@pytest.fixture
def make_env(tmp_path: Path) -> Iterator[Callable[..., Env]]:
    envs: list[Env] = []

    def build(**overrides: int) -> Env:
        path = tmp_path / f"data{len(envs)}"
        logs = LogManager(path, LogConfig(flush_policy="os"))
        config = make_config(**overrides)
        env = Env(path, logs, config, GroupCoordinator(logs, config, now_ms=T0), [logs])
        envs.append(env)
        return env

    yield build
    for env in envs:
        for logs in env.opened:
            with contextlib.suppress(LogError, OSError):  # closing twice is fine
                logs.close()


@pytest.fixture
def env(make_env: Callable[..., Env]) -> Env:
    return make_env()
