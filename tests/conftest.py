"""Shared test setup: the embedded-broker fixtures, and the failure reports that show the logs of
every process a failed test ran (exactly.testing.logs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exactly.testing import broker, broker_factory, logs  # noqa: F401
from exactly.testing.kafka import apache_kafka, apache_kafka_factory  # noqa: F401

# Short-lived JVMs: Spark drivers and executors read tests/spark_conf/spark-defaults.conf (the
# reason is written there); a standalone cluster's master and workers read SPARK_DAEMON_JAVA_OPTS.
# Set before any test starts a process, so every Spark JVM of the run inherits them.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "spark_conf"))
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SHORT_LIVED_JVM)


def pytest_configure(config: pytest.Config) -> None:
    # A plugin, not hooks imported here: a conftest's hooks do not see the setup of the
    # session-scoped fixtures, whose node (the session) lies above this directory.
    if not config.pluginmanager.has_plugin(logs.__name__):
        config.pluginmanager.register(logs, logs.__name__)
    config.addinivalue_line(
        "markers",
        "broker_settings(settings): broker config keys for the `broker` fixture",
    )
    config.addinivalue_line(
        "markers",
        "kafka_settings(settings): server.properties keys for the `apache_kafka` fixture",
    )
    config.addinivalue_line(
        "markers",
        "serial: measures the broker's memory or latency, or compares answers with Apache "
        "Kafka's that depend on Kafka being served promptly, so `make test` runs it after the "
        "parallel part, alone on the machine",
    )
