"""Start-up failures the environment causes (issue 14, item 7): one `error: ...` line naming what
is wrong and the key to change, exit status 1, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactly", "broker", *args], capture_output=True,
                          text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def assert_fails_with(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"error: {message}"


@pytest.fixture
def busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s, s.getsockname()[1]
    s.close()


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "plain-file"
    path.write_text("not a directory")
    assert_fails_with(broker("--data-dir", str(path), "--listen", "127.0.0.1:0"),
                      f"cannot use data directory {path}: it is a file, not a directory")


def test_address_not_on_this_host(tmp_path: Path) -> None:
    assert_fails_with(broker("--data-dir", str(tmp_path / "d"), "--listen", "192.0.2.1:9092"),
                      "cannot listen on 192.0.2.1:9092 (listeners): the address is not one of "
                      "this machine's")


def test_unknown_host(tmp_path: Path) -> None:
    proc = broker("--data-dir", str(tmp_path / "d"), "--listen", "no-such-host.invalid:9092")
    assert_fails_with(proc, "cannot listen on no-such-host.invalid:9092 (listeners): "
                            "'no-such-host.invalid' is not a known host name")


def test_kafka_port_in_use(tmp_path: Path, busy_port) -> None:
    _, port = busy_port
    assert_fails_with(broker("--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}"),
                      f"cannot listen on 127.0.0.1:{port} (listeners): the address is in use; "
                      "stop the process using it or choose another port in listeners")


def test_metrics_port_in_use_names_metrics_listen(tmp_path: Path, busy_port) -> None:
    _, port = busy_port
    proc = broker("--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0", "--set",
                  f"metrics.listen=127.0.0.1:{port}")
    assert_fails_with(proc, f"cannot listen on 127.0.0.1:{port} (metrics.listen): the address is "
                            "in use; stop the process using it or choose another port in "
                            "metrics.listen")


@pytest.mark.parametrize("existing", [False, True], ids=["empty", "with-data"])
def test_read_only_data_dir(tmp_path: Path, existing: bool) -> None:
    """A read-only bind mount (root, as the tests run here, writes through file permissions)."""
    data = tmp_path / "d"
    data.mkdir()
    if existing:
        (data / "meta.properties").write_text("version=1\n")
    subprocess.run(["mount", "--bind", str(data), str(data)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(data)], check=True)
        assert_fails_with(broker("--data-dir", str(data), "--listen", "127.0.0.1:0"),
                          f"cannot use data directory {data}: the file system is read-only")
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)
