"""Fixtures for the transaction coordinator tests: a real LogManager and ProducerIdManager on
tmp_path, and a coordinator driven with explicit times."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from exactly.log import LogManager
from exactly.log.config import LogConfig
from exactly.log.errors import LogError
from exactly.txn import ProducerIdManager, TransactionCoordinator, TxnConfig

T0 = 1_700_000_000_000
TXN = "txn-a"
TIMEOUT = 60_000


def make_config(**overrides: Any) -> TxnConfig:
    values: dict[str, Any] = {"num_partitions": 5, "max_timeout_ms": 900_000,
                              "transactional_id_expiration_ms": 604_800_000,
                              "coordinator_epoch": 3}
    values.update(overrides)
    return TxnConfig(**values)


@dataclass
class Env:
    path: Path
    logs: LogManager
    config: TxnConfig
    coordinator: TransactionCoordinator
    opened: list[LogManager] = field(default_factory=list)

    def restart(self, now_ms: int) -> TransactionCoordinator:
        """Close the logs, reopen the directory and build a fresh coordinator on it."""
        self.logs.close()
        self.logs = LogManager(self.path / "logs", LogConfig(flush_policy="os"))
        self.opened.append(self.logs)
        pids = ProducerIdManager(self.path / "producer_ids")
        self.coordinator = TransactionCoordinator(self.logs, pids, self.config, now_ms=now_ms)
        return self.coordinator


@pytest.fixture
def make_env(tmp_path: Path) -> Iterator[Callable[..., Env]]:
    envs: list[Env] = []

    def build(**overrides: Any) -> Env:
        path = tmp_path / f"data{len(envs)}"
        path.mkdir()
        logs = LogManager(path / "logs", LogConfig(flush_policy="os"))
        config = make_config(**overrides)
        pids = ProducerIdManager(path / "producer_ids")
        env = Env(path, logs, config, TransactionCoordinator(logs, pids, config, now_ms=T0),
                  [logs])
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


@pytest.fixture
def coord(env: Env) -> TransactionCoordinator:
    return env.coordinator
