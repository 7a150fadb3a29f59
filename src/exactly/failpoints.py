"""Named fault points for crash tests, switched on by the environment variable EXACTLY_FAILPOINTS.

    EXACTLY_FAILPOINTS="spark.driver.after_decision=crash@3;txn.before_markers=pause:2.5"

Code calls `hit(point)` (or `await hit_async(point)` on an event loop) at the places CATALOGUE
names. The variable holds entries `point=ACTION[@N]`, separated by `;`. Actions:

- `crash`: die by SIGKILL, the Unix way to die without cleaning up (`kill -9`). Every process of
  the caller's session dies, not just the caller: Spark runs a Python data source's driver-side
  code in Python workers of the JVM, and pyspark's daemon gives its workers process groups of
  their own, so killing the caller or its process group would not crash the driver. A harness
  that starts a process to be crashed starts it in a session of its own (subprocess
  `start_new_session=True`); its exit status is then -9.
- `raise`: raise FailpointError (a task that fails and is retried, say).
- `pause:SECONDS`: wait there. `hit` sleeps; `hit_async` awaits asyncio.sleep, so the event
  loop (the broker's) keeps serving other requests meanwhile.
- `skip`: leave a step out, only at the points SKIPS names, which code reaches with
  `if not failpoints.skip(point): <the step>`. They are steps a test removes on purpose to
  show that its check finds what goes wrong without them: an fsync, for the power-cut test
  (tests/system/server/test_power_cut.py). SKIPS is apart from CATALOGUE, whose points are moments
  (crash, raise or pause there); a skip point takes `skip` only, a CATALOGUE point never.

The rule for `@N`: an entry fires at a hit when n >= N, where N is its `@N` (0 without one)
and n is the `count` the caller passes, or, when it passes none, how many times this process
has reached that point while it was listed, this hit included (1, 2, ...). So without `@N` a
point fires every time; `@3` fires from the 3rd hit on (the dual-write worker dies at its 3rd
order); the Spark sink passes the micro-batch id as `count` (each batch runs in fresh Python
workers, where a count of this process would start again), so `@3` fires from batch 3 on.

A name that neither CATALOGUE nor SKIPS holds is refused: in the variable (a ValueError when
this module is imported, or at the next `active()`/`hit`, naming the known points) and in a
call of `hit` or `skip` (a programming error). With the variable unset, `hit` costs two
dictionary lookups.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import signal
import time
from collections import Counter
from typing import NamedTuple

__all__ = ["CATALOGUE", "ENV", "SKIPS", "Failpoint", "FailpointError", "active", "hit",
           "hit_async", "kill_session", "skip"]

ENV = "EXACTLY_FAILPOINTS"
SYNTAX = "point=crash|raise|pause:SECONDS[@N] (point=skip[@N] for SKIPS), entries separated by ';'"

# Every fault point, where it is and what has happened when it fires.
CATALOGUE: dict[str, str] = {
    # The broker (server/transactions.py): the end of a transaction.
    "txn.after_prepare": "PrepareCommit/PrepareAbort is durable, no marker written yet",
    "txn.before_markers": "an EndTxn was answered, its markers are not written yet",
    "txn.after_markers": "every marker is durable, CompleteCommit/CompleteAbort not written yet",
    # The broker's network server (server/network.py): every request, handled, not yet encoded.
    "network.before_encode": "a request's handler returned its answer; the answer is not yet "
                             "encoded",
    # The broker (server/handlers/produce.py): a request in the works.
    "produce.before_append": "a Produce request is decoded and its handler started; nothing "
                             "of it is appended yet",
    # The log cleaner (log/cleaner.py, log/swap.py), in its worker thread: one group of segments.
    "log.cleaner.after_cleaned": "the cleaned segment is written and fsynced as .cleaned files, "
                                 "not yet renamed",
    "log.cleaner.after_swap": "the cleaned files are renamed to .swap (committed); the old "
                              "segments are all still there",
    "log.cleaner.after_delete": "the group's other old segments are deleted; the .swap files "
                                "are not yet renamed over the first one's",
    "log.cleaner.after_checkpoint": "a clean is done and the cleaner checkpoint written",
    # The Spark streaming sink (spark/stream_sink.py); `count` is the micro-batch id.
    "spark.task.write": "a task's first attempt, after each Arrow batch of rows it sent",
    "spark.driver.after_prepare": "the driver's commit: every task's work is done, no decision "
                                  "recorded yet",
    "spark.driver.after_decision": "the batch's decision is recorded, no participant completed",
    "spark.driver.mid_complete": "after each participant of the batch is committed",
    # Exactly-once batch writes (spark/batch_sink.py); in a task `count` is its partition.
    "spark.batch.task.write": "a batch write task's first attempt, after each Arrow batch of "
                              "rows it sent",
    "spark.batch.driver.after_decision": "the batch write job's decision is recorded, no "
                                         "participant completed",
    # Dual write (dualwrite/writer.py), KIP-939's recipe (seed 000): each once the step is done.
    "dualwrite.1-begin-database-transaction": "the database transaction began",
    "dualwrite.2-begin-transaction": "the log transaction began",
    "dualwrite.3-send": "a record was sent in the log transaction (each send)",
    "dualwrite.4-prepare-transaction": "the log transaction is prepared (PreparedTxnState)",
    "dualwrite.5-update-data": "the application's block wrote its data, not yet prepared",
    "dualwrite.6-update-transaction-state": "the state is written in the database transaction",
    "dualwrite.7-commit-database-transaction": "the database committed: the decision",
    "dualwrite.8-commit-transaction": "the log transaction committed",
    # Dual-write recovery (DualWriter.recover).
    "dualwrite.recovery-1-read-state": "the stored state was read from the database",
    "dualwrite.recovery-2-keep-prepared-txn": "initialize(keep_prepared_txn=True) done, nothing "
                                              "completed yet",
    "dualwrite.recovery-2-complete-transaction": "the kept transaction was completed by the "
                                                 "stored state",
    # Atomic consumption (dualwrite/consumer.py).
    "dualwrite.consume-1-poll": "records were polled, no database transaction yet",
    "dualwrite.consume-2-begin-database-transaction": "the database transaction began",
    "dualwrite.consume-3-write-data": "the handler wrote the records' data",
    "dualwrite.consume-4-write-offsets": "the consumed offsets are written, not committed",
    "dualwrite.consume-5-commit-database-transaction": "data and offsets committed together",
}

# Steps a test may leave out (action `skip`), where they are and what leaving them out loses.
SKIPS: dict[str, str] = {
    # The partition log (log/partition.py).
    "log.roll.fsync_dir": "a segment roll's directory fsync: the new segment's files are not "
                          "durable until the next fsync of the partition directory",
    # Produce admission (server/admission.py).
    "produce.added_partitions.sync": "the sync round of the partitions a transaction version 2 "
                                     "Produce adds: their data is appended while the "
                                     "coordinator's log may hold them in the page cache only",
    # The transaction driver (server/transactions.py).
    "txn.markers.sync": "the sync round of a transaction's markers: CompleteCommit/CompleteAbort "
                        "is written while the markers may still be in the page cache only",
}

log = logging.getLogger(__name__)

# How many times this process has reached each listed point (the n of `@N` without `count`).
_hits: Counter[str] = Counter()


class FailpointError(RuntimeError):
    """Raised by a fault point whose action is `raise`."""


class Failpoint(NamedTuple):
    """One entry of EXACTLY_FAILPOINTS."""

    action: str            # "crash", "raise", "pause" or "skip"
    at: int = 0            # fires once n >= at (see the module's docstring)
    seconds: float = 0.0   # how long a pause lasts


def _bad(entry: str, why: str) -> ValueError:
    return ValueError(f"bad {ENV} entry {entry!r}: {why}; use {SYNTAX}")


def _parse_entry(entry: str) -> tuple[str, Failpoint]:
    name, sep, rest = (part.strip() for part in entry.partition("="))
    if not sep or not name:
        raise _bad(entry, "expected point=action")
    if name not in CATALOGUE and name not in SKIPS:
        raise ValueError(f"{ENV} names the unknown fault point {name!r}; the known ones: "
                         f"{', '.join(CATALOGUE)}; the steps that can be skipped: "
                         f"{', '.join(SKIPS)}")
    action, has_at, at = (part.strip() for part in rest.partition("@"))
    if has_at and not (at.isascii() and at.isdigit()):
        raise _bad(entry, "@ takes a whole number")
    action, _, arg = (part.strip() for part in action.partition(":"))
    if (action == "skip") != (name in SKIPS):
        raise _bad(entry, f"skip is the one action of the points of SKIPS ({', '.join(SKIPS)})"
                   if name in SKIPS else f"{name} is a moment, not a step: skip is only for "
                   f"{', '.join(SKIPS)}")
    if action in ("crash", "raise", "skip") and not arg:
        return name, Failpoint(action, int(at or 0))
    if action == "pause":
        return name, Failpoint(action, int(at or 0), _seconds(entry, arg))
    raise _bad(entry, f"unknown action {rest!r}")


def _seconds(entry: str, text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        raise _bad(entry, "pause takes a number of seconds, pause:SECONDS")
    return seconds


@functools.lru_cache(maxsize=8)
def _parse(text: str) -> dict[str, Failpoint]:
    return dict(_parse_entry(e) for e in (e.strip() for e in text.split(";")) if e)


def active() -> dict[str, Failpoint]:
    """The fault points EXACTLY_FAILPOINTS switches on (ValueError if it is malformed)."""
    return dict(_parse(os.environ.get(ENV, "")))


def listed(point: str) -> bool:
    """Does EXACTLY_FAILPOINTS name `point` now? Code on a hot path reads this once (per
    process, connection or driver) and calls `hit` only if so; `hit` itself looks the
    environment up at every call."""
    if point not in CATALOGUE and point not in SKIPS:
        raise ValueError(f"fault point {point!r} is in neither exactly.failpoints.CATALOGUE nor "
                         "SKIPS: add it there, with a test that fires it")
    return point in active()


_ENV_KEY = os.environ.encodekey(ENV)


def _armed() -> bool:
    """Is EXACTLY_FAILPOINTS set now? Looked up on every hit, as a test may set it at any moment,
    in os.environ's own mapping: `ENV in os.environ` raises and catches a KeyError when it is
    not set (1.2 µs, four times in every transaction's path; issue 19)."""
    return _ENV_KEY in os.environ._data  # type: ignore[attr-defined]


def _fire(point: str, count: int | None, known: dict[str, str] = CATALOGUE) -> float:
    """Crash or raise if `point` fires now; the seconds to pause otherwise (0: go on); -1 for
    a skip that fires."""
    if point not in known:
        name = "CATALOGUE" if known is CATALOGUE else "SKIPS"
        raise ValueError(f"fault point {point!r} is not in exactly.failpoints.{name}: add it "
                         "there, with a test that fires it")
    if not _armed():
        return 0.0
    entry = _parse(os.environ[ENV]).get(point)
    if entry is None:
        return 0.0
    if count is None:
        _hits[point] += 1
        n = _hits[point]
    else:
        n = count
    if n < entry.at:
        return 0.0
    log.warning("event=failpoint point=%s action=%s n=%d pid=%d", point, entry.action, n,
                os.getpid())
    if entry.action == "raise":
        raise FailpointError(f"fault point {point} (n={n})")
    if entry.action == "crash":
        kill_session(os.getsid(0))
    if entry.action == "skip":
        return -1.0
    return entry.seconds


def hit(point: str, *, count: int | None = None) -> None:
    """Fire `point` if EXACTLY_FAILPOINTS lists it and n has reached its @N; a pause sleeps."""
    seconds = _fire(point, count)
    if seconds:
        time.sleep(seconds)


async def hit_async(point: str, *, count: int | None = None) -> None:
    """`hit` for code on an event loop: a pause awaits, so the loop keeps serving others."""
    seconds = _fire(point, count)
    if seconds:
        await asyncio.sleep(seconds)


def skip(point: str, *, count: int | None = None) -> bool:
    """Should the step at `point` (one of SKIPS) be left out? True when EXACTLY_FAILPOINTS says
    `point=skip` and n has reached its @N: a test removes the step on purpose."""
    return _fire(point, count, SKIPS) < 0


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


active()  # a malformed EXACTLY_FAILPOINTS is refused at once, not at the first hit
