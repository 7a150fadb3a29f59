"""The CLI's shared helpers without a broker: how an admin call's failure is reported, and which
transaction states `find-hanging` counts as open."""

from __future__ import annotations

import pytest

from exactly.cli.common import admin_call
from exactly.cli.transactions import _is_open
from exactly.client import KafkaError
from exactly.protocol.errors import ErrorCode


def _failing(message: str) -> None:
    raise KafkaError(message, ErrorCode.transactional_id_not_found)


def test_a_failed_call_names_what_was_asked_once(capsys: pytest.CaptureFixture[str]) -> None:
    # The admin client's error already starts with the action: it is not repeated.
    with pytest.raises(SystemExit) as exit_:
        admin_call("describe transaction 'x'",
                   lambda: _failing("describe transaction 'x': TRANSACTIONAL_ID_NOT_FOUND"))
    assert exit_.value.code == 1
    assert capsys.readouterr().err == "error: describe transaction 'x': TRANSACTIONAL_ID_NOT_FOUND\n"


def test_a_failed_call_gets_the_action_as_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        admin_call("list ACLs", lambda: _failing("describe ACLs: CLUSTER_AUTHORIZATION_FAILED"))
    assert capsys.readouterr().err == "error: list ACLs: describe ACLs: CLUSTER_AUTHORIZATION_FAILED\n"


def test_an_unreachable_broker_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    def refused() -> None:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(SystemExit):
        admin_call("remove ACLs", refused)
    assert capsys.readouterr().err == (
        "error: remove ACLs: cannot reach the broker: connection refused\n")


def test_a_successful_call_returns_its_result() -> None:
    assert admin_call("list", lambda: [1, 2]) == [1, 2]


def test_open_states_are_those_that_hold_partitions() -> None:
    names = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
             "CompleteAbort", "Dead", "PrepareEpochFence", "NotAState"]
    assert [n for n in names if _is_open(n)] == [
        "Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"]
