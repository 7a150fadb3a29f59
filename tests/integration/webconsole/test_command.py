"""`exactly console` as a command: the message without the console extra, a bad --listen, and
pages that say the broker cannot be reached instead of failing when there is none."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request

from tests.helpers.webconsole.support import console

# As after `pip install exactly` without the extra: starlette cannot be found.
WITHOUT_STARLETTE = """
import sys
sys.modules["starlette"] = None
from exactly.cli.main import main
sys.argv[0] = "exactly"
main()
"""


def test_without_the_console_extra_it_says_what_to_install() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_STARLETTE, "console", "--listen",
                           "127.0.0.1:0"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert ("exactly console needs the console extra: pip install 'exactly[console]'"
            in done.stderr), done.stderr


def test_a_bad_listen_address_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "exactly", "console", "--listen", "nowhere"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "is not HOST:PORT" in done.stderr, done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_with_no_broker_the_pages_say_so() -> None:
    with console(f"127.0.0.1:{_free_port()}") as url:
        for page in ("/", "/topics", "/transactions", "/groups", "/producers"):
            with urllib.request.urlopen(url + page, timeout=30) as response:
                body = response.read().decode()
            assert response.status == 200 and "cannot reach the broker" in body, (page, body)
