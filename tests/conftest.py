"""Shared test setup: the embedded-broker fixtures and their failure reports."""

from __future__ import annotations

import pytest

from exactly.testing import broker, broker_factory, pytest_runtest_makereport  # noqa: F401
from exactly.testing.kafka import apache_kafka, apache_kafka_factory  # noqa: F401


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
        "serial: measures the broker's memory or latency, so `make test` runs it after the "
        "parallel part, alone on the machine",
    )
