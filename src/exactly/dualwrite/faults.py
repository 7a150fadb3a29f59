"""Fault points of the dual-write recipes, for crash tests: `EXACTLY_DUALWRITE_FAULT=<point>`
makes the process SIGKILL itself (no cleanup, exactly what `kill -9` does) right after that
step; `<point>:N` waits for the N-th time the step is reached (1-based).

Points are named after KIP-939's recipes (seed 000). Normal processing, each fired once the
step is done:

    1-begin-database-transaction  2-begin-transaction        3-send (after each send)
    4-prepare-transaction         5-update-data              6-update-transaction-state
    7-commit-database-transaction 8-commit-transaction

Recovery: recovery-1-read-state (the stored state was read), recovery-2-keep-prepared-txn
(initialize(keep_prepared_txn=True) done, nothing completed yet), recovery-2-complete-transaction.

Atomic consumption: consume-1-poll, consume-2-begin-database-transaction, consume-3-write-data,
consume-4-write-offsets, consume-5-commit-database-transaction.
"""

from __future__ import annotations

import os
import signal

ENV = "EXACTLY_DUALWRITE_FAULT"

STEPS = (
    "1-begin-database-transaction",
    "2-begin-transaction",
    "3-send",
    "4-prepare-transaction",
    "5-update-data",
    "6-update-transaction-state",
    "7-commit-database-transaction",
    "8-commit-transaction",
)
RECOVERY_STEPS = (
    "recovery-1-read-state",
    "recovery-2-keep-prepared-txn",
    "recovery-2-complete-transaction",
)
CONSUME_STEPS = (
    "consume-1-poll",
    "consume-2-begin-database-transaction",
    "consume-3-write-data",
    "consume-4-write-offsets",
    "consume-5-commit-database-transaction",
)
ALL_POINTS = frozenset(STEPS + RECOVERY_STEPS + CONSUME_STEPS)


def _armed() -> tuple[str, int]:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return "", 0
    name, _, count = text.partition(":")
    if name not in ALL_POINTS:
        raise ValueError(f"{ENV}={text!r}: unknown fault point {name!r}; known: "
                         f"{', '.join(sorted(ALL_POINTS))}")
    return name, int(count or 1)


_POINT, _AT = _armed()
_seen = 0


def fault_point(name: str) -> None:
    """Die here (SIGKILL) if EXACTLY_DUALWRITE_FAULT names this point and its count is reached."""
    global _seen
    if name != _POINT:
        return
    _seen += 1
    if _seen >= _AT:
        os.kill(os.getpid(), signal.SIGKILL)
