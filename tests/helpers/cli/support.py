"""Running the `exactly` command as a subprocess, as an operator would."""

from __future__ import annotations

import subprocess
import sys


def exactly(*args: str, check: bool = True, timeout: float = 60,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `exactly ARGS...`; `input` is its stdin (none by default)."""
    proc = subprocess.run([sys.executable, "-m", "exactly", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, input=input,
                          stdin=subprocess.DEVNULL if input is None else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"exactly {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def table(output: str) -> list[dict[str, str]]:
    """The rows of a table the CLI printed, as dicts by column header."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    headers = lines[0].split()
    return [dict(zip(headers, line.split(None, len(headers) - 1), strict=False))
            for line in lines[1:]]
