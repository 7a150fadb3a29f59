"""Named fault points for crash tests: `EXACTLY_FAULT=<name>` makes the broker process die
(as `kill -9` would, without cleanup) the moment it reaches that point.

    txn.after_prepare   PrepareCommit/PrepareAbort is durable, no marker written yet
    txn.after_markers   every marker is durable, CompleteCommit/Abort not yet written

And pause points, for tests that need a window open: `EXACTLY_PAUSE=<name>=<seconds>` makes the
broker wait there (serving other requests meanwhile).

    txn.before_markers  an EndTxn was answered, its markers are not written yet
"""

from __future__ import annotations

import asyncio
import os

_ARMED = os.environ.get("EXACTLY_FAULT", "")
_PAUSE_NAME, _, _PAUSE_SECONDS = os.environ.get("EXACTLY_PAUSE", "").partition("=")


def fault_point(name: str) -> None:
    if _ARMED == name:
        os._exit(137)  # no flush, no close: what a crash leaves behind


async def pause_point(name: str) -> None:
    if _PAUSE_NAME == name:
        await asyncio.sleep(float(_PAUSE_SECONDS))
