"""Named fault points for crash tests: `EXACTLY_FAULT=<name>` makes the broker process die
(as `kill -9` would, without cleanup) the moment it reaches that point.

    txn.after_prepare   PrepareCommit/PrepareAbort is durable, no marker written yet
    txn.after_markers   every marker is durable, CompleteCommit/Abort not yet written
"""

from __future__ import annotations

import os

_ARMED = os.environ.get("EXACTLY_FAULT", "")


def fault_point(name: str) -> None:
    if _ARMED == name:
        os._exit(137)  # no flush, no close: what a crash leaves behind
