"""The unit tier: no process and no socket. Every test here runs with socket connect and bind,
subprocess and fork refused, so that a test needing them fails here and is moved to
tests/integration instead of slowing `make check` down."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator

import pytest


class NotInTheUnitTier(RuntimeError):
    """A unit test opened a socket or started a process."""


def _refuse(what: str) -> Callable[..., None]:
    def refused(*args: object, **kwargs: object) -> None:
        raise NotInTheUnitTier(f"{what} in a unit test: tests/unit starts no process and opens "
                               f"no socket (such a test belongs in tests/integration)")
    return refused


@pytest.fixture(autouse=True, scope="module")
def _no_process_and_no_socket() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in ("connect", "connect_ex", "bind"):
            patch.setattr(socket.socket, name, _refuse(f"socket.{name}"))
        patch.setattr(subprocess.Popen, "__init__", _refuse("subprocess.Popen"))
        patch.setattr(os, "fork", _refuse("os.fork"))
        patch.setattr(os, "posix_spawn", _refuse("os.posix_spawn"))
        yield
