"""The client tests' fixtures (tests.helpers.client.fixtures)."""

from tests.helpers.client.fixtures import (  # noqa: F401 (fixtures)
    exactly_broker,
    mock_bootstrap,
)
