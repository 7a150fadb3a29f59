"""`exactly produce` reads stdin with exactly.cli.console.stdin_lines: lines as they come, and a
Ctrl-C noticed even when its signal was handled while no read was interrupted by it.

The second case is the one a blocking read loses: CPython runs a signal's handler in the main
thread once the system call it waits in returns. A signal that lands after Python's check of
pending signals and before the read() has started, or one that the kernel hands to another
thread, leaves a read of stdin waiting for input that never comes. The test makes that state
for certain: the main thread has SIGINT blocked, so the kernel delivers it to another thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from exactly.cli.console import STDIN_CHUNK, stdin_lines
from tests.paths import SRC

CHILD = """
import signal, sys, threading, time
from exactly.cli.console import stdin_lines
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()  # takes SIGINT instead
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
try:
    # "ready" is printed inside the try: the handler may run as soon as the print returns.
    print("ready", flush=True)
    for line in READ:
        pass
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _lines_of(*writes: bytes) -> list[bytes]:
    read, write = os.pipe()

    def writer() -> None:
        for data in writes:
            os.write(write, data)
        os.close(write)

    thread = threading.Thread(target=writer)
    thread.start()
    with os.fdopen(read, "rb") as stream:
        lines = list(stdin_lines(stream))
    thread.join()
    return lines


def test_lines_across_reads_and_a_last_line_without_newline() -> None:
    long = b"x" * (3 * STDIN_CHUNK + 7)
    assert _lines_of(b"a\nb", b"c\n\n", long + b"\nlast") == [
        b"a\n", b"bc\n", b"\n", long + b"\n", b"last"]
    assert _lines_of() == []
    assert _lines_of(b"only\n") == [b"only\n"]


def test_ctrl_c_handled_outside_the_read_still_ends_it() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.replace("READ", "stdin_lines(sys.stdin.buffer)")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGINT)
        child.wait(timeout=10)  # stdin stays open: no end of input ends it
        out = child.stdout.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert (child.returncode, out) == (130, "interrupted\n")
