"""Named fault points for crash tests, switched on by the environment variable EXACTLY_FAILPOINTS.

    EXACTLY_FAILPOINTS="spark.driver.after_decision=crash@3;spark.task.write=raise"

Each entry is `point=action[@N]`. Code calls `hit(point, batch=...)` at the named place; the
point fires when it is listed and, with `@N`, only once `batch` is N or more. Actions:

- `crash`: SIGKILL, the Unix way to die without cleaning up. Every process of the caller's
  session dies, not just the caller: Spark runs a Python data source's driver-side code in a
  Python worker of the JVM, so killing the caller alone would not crash the driver. Start the
  process under test in a session of its own (subprocess `start_new_session=True`).
- `raise`: raise FailpointError (a task that fails and is retried, say).

With the variable unset, `hit` costs one dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import signal

__all__ = ["ENV", "FailpointError", "active", "hit", "kill_session"]

ENV = "EXACTLY_FAILPOINTS"
ACTIONS = ("crash", "raise")

log = logging.getLogger(__name__)


class FailpointError(RuntimeError):
    """Raised by a fault point whose action is `raise`."""


def _parse(text: str) -> dict[str, tuple[str, int]]:
    points: dict[str, tuple[str, int]] = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        name, sep, action = entry.partition("=")
        action, _, at = action.partition("@")
        if not sep or not name.strip() or action.strip() not in ACTIONS:
            raise ValueError(f"bad {ENV} entry {entry!r}: use point=crash|raise[@batch]")
        try:
            points[name.strip()] = (action.strip(), int(at) if at else 0)
        except ValueError:
            raise ValueError(f"bad {ENV} entry {entry!r}: @ takes a batch number") from None
    return points


def active() -> dict[str, tuple[str, int]]:
    """The fault points the environment switches on: point -> (action, from batch)."""
    return _parse(os.environ.get(ENV, ""))


def hit(point: str, *, batch: int = 0) -> None:
    """Fire `point` if EXACTLY_FAILPOINTS lists it (and `batch` has reached its @N)."""
    if ENV not in os.environ:
        return
    found = active().get(point)
    if found is None or batch < found[1]:
        return
    action = found[0]
    log.warning("event=failpoint point=%s action=%s batch=%d pid=%d", point, action, batch,
                os.getpid())
    if action == "raise":
        raise FailpointError(f"fault point {point} (batch {batch})")
    kill_session(os.getsid(0))


def kill_session(session: int) -> None:
    """SIGKILL every process of the session `session` (the caller last, if it is one of them)."""
    me = os.getpid()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # no /proc: the process group is the best we can do
        os.killpg(session, signal.SIGKILL)
        return
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) == session:  # state, ppid, pgrp, session
                os.kill(pid, signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue
    if os.getsid(0) == session:
        os.kill(me, signal.SIGKILL)
