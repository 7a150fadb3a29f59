"""The unit tier refuses sockets and processes (tests/unit/conftest.py), and every test here is
marked `unit` (tests/conftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.unit.conftest import NotInTheUnitTier


def test_a_socket_connect_is_refused() -> None:
    with pytest.raises(NotInTheUnitTier, match="socket.connect"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)


def test_a_listening_socket_is_refused() -> None:
    with socket.socket() as sock, pytest.raises(NotInTheUnitTier, match="socket.bind"):
        sock.bind(("127.0.0.1", 0))


def test_a_process_is_refused() -> None:
    with pytest.raises(NotInTheUnitTier, match="subprocess.Popen"):
        subprocess.run(["true"], check=True)
    with pytest.raises(NotInTheUnitTier, match="os.fork"):
        os.fork()


def test_the_tests_here_are_marked_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("integration") is None
