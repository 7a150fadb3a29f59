"""The blocking facade's engine: one private asyncio loop in a daemon thread per process.

The blocking classes (`exactly.client.Producer`, ...) keep an asyncio object living on this loop
and run each call on it, so code that is not async (Spark tasks, scripts) gets the same client.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    _shared: LoopThread | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="exactly-client-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @classmethod
    def shared(cls) -> LoopThread:
        with cls._shared_lock:
            if cls._shared is None or not cls._shared._thread.is_alive():
                cls._shared = cls()
            return cls._shared

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for its result in the calling thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking client call was made from the client's own event loop; "
                               "use the asyncio API (exactly.client.aio) there")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
