"""Shared test setup: the embedded-broker fixtures and their failure reports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exactly.testing import broker, broker_factory, pytest_runtest_makereport  # noqa: F401
from exactly.testing.kafka import apache_kafka, apache_kafka_factory  # noqa: F401

# Short-lived JVMs: Spark drivers and executors read tests/spark_conf/spark-defaults.conf (the
# reason is written there); a standalone cluster's master and workers read SPARK_DAEMON_JAVA_OPTS.
# Set before any test starts a process, so every Spark JVM of the run inherits them.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "spark_conf"))
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SHORT_LIVED_JVM)


def pytest_configure(config: pytest.Config) -> None:
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
