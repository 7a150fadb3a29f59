"""A bound on librdkafka's transactional calls, for crash-only workers.

librdkafka (2.16 included) can block in `send_offsets_to_transaction` far past the timeout it is
given: the group coordinator request it makes never checks its timeout (librdkafka issue #5456),
and after a re-bootstrap (all brokers unreachable for a moment: a one-node cluster restarting)
the coordinator it cached is decommissioned and nothing wakes the request again (issue #5511).
The worker then sits in the call for good, its consumer cannot join the rebalance that follows
(a rebalance is served by the application's poll), and the whole group waits for it until
`max.poll.interval.ms` has passed. tests/system/interop/test_rdkafka_watchdog.py shows the hang with
librdkafka's own log.

A crash-only worker does what it does with any other failure: it exits and is restarted, and
init_transactions() fences and aborts what it left open. `bounded` makes it exit (status 3, with
a line on stderr) when a call has not returned within its timeout and a grace period.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

GRACE_S = 5.0
EXIT_STATUS = 3


@contextmanager
def bounded(what: str, timeout_s: float, *, grace_s: float = GRACE_S,
            exit: Callable[[int], object] = os._exit) -> Iterator[None]:
    """Run the block; if it has not finished `timeout_s + grace_s` seconds later, say so on
    stderr and end the process at once (`os._exit`: a thread blocked in librdkafka is not
    interrupted by an exception, and a normal exit would wait for librdkafka's threads)."""
    done = threading.Event()

    def watch() -> None:
        if not done.wait(timeout_s + grace_s):
            print(f"{time.time():.3f} {what} has not returned {timeout_s + grace_s:.0f} s after "
                  f"it was called with a timeout of {timeout_s:.0f} s (librdkafka #5456, "
                  f"#5511): exiting", file=sys.stderr, flush=True)
            exit(EXIT_STATUS)

    watcher = threading.Thread(target=watch, name=f"watchdog {what}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
