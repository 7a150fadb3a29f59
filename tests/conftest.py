"""Shared test setup: the embedded-broker fixtures, the failure reports that show the logs of
every process a failed test ran (exactly.testing.logs), and the tier markers.

The tests lie in three tiers, by directory (the markers are registered in pyproject.toml):
- tests/unit: no process and no socket (tests/unit/conftest.py refuses both): codecs, the log,
  the sans-IO coordinators, the client's state machines; `make check` runs them.
- tests/integration: a broker process (EmbeddedBroker), PostgreSQL, and real clients over TCP.
- tests/system: Spark, power cuts, Apache Kafka, outside clients (interop), soak runs.
Code the tests share lies in tests/helpers, the processes they start in tests/workers.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from exactly.testing import broker, broker_factory, logs  # noqa: F401
from tests.rigs.kafka import apache_kafka, apache_kafka_factory  # noqa: F401

# Short-lived JVMs: Spark drivers and executors read tests/spark_conf/spark-defaults.conf (the
# reason is written there); a standalone cluster's master and workers read SPARK_DAEMON_JAVA_OPTS.
# Set before any test starts a process, so every Spark JVM of the run inherits them.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "spark_conf"))
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SHORT_LIVED_JVM)

# Ctrl-C as a terminal gives it, in every process a test starts, however the run was started.
# A run started in the background of a non-interactive shell (`nohup make test &`) ignores
# SIGINT, and an ignored signal stays ignored across fork and exec: the CLI's Ctrl-C tests would
# send SIGINT to children that never see it (Python installs its KeyboardInterrupt handler only
# over the default action). A caught signal is reset to the default action by exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    # A plugin, not hooks imported here: a conftest's hooks do not see the setup of the
    # session-scoped fixtures, whose node (the session) lies above this directory.
    if not config.pluginmanager.has_plugin(logs.__name__):
        config.pluginmanager.register(logs, logs.__name__)


TIERS = ("unit", "integration", "system")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier, from its directory (`-m unit` selects as `tests/unit` does)."""
    root = Path(__file__).parent
    for item in items:
        if not item.path.is_relative_to(root):
            continue  # a pytester test's file
        if (tier := item.path.relative_to(root).parts[0]) in TIERS:
            item.add_marker(tier)
