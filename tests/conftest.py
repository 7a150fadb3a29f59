"""Shared test setup: the embedded-broker fixtures and their failure reports."""

from __future__ import annotations

import pytest

from exactly.testing import broker, broker_factory, pytest_runtest_makereport  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "broker_settings(settings): broker config keys for the `broker` fixture",
    )
    config.addinivalue_line(
        "markers",
        "serial: measures the broker's memory or latency, so `make test` runs it after the "
        "parallel part, alone on the machine",
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # With pytest-xdist (`make test` runs `-n N --dist loadgroup`) the Spark tests share one
    # worker: they share a SparkSession per process, and two Spark runs at once would starve
    # each other of the machine's cores.
    spark = pytest.mark.xdist_group("spark")
    for item in items:
        if "spark" in item.path.relative_to(config.rootpath).parts:
            item.add_marker(spark)
