"""The txn tests' fixtures (tests.helpers.txn.fixtures)."""

from tests.helpers.txn.fixtures import (  # noqa: F401 (fixtures)
    coord,
    env,
    make_env,
)
