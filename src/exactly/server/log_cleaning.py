"""The broker's log cleaner at work: exactly.log.cleaner's choices on the event loop, its copying
in one worker thread.

Every round the loop picks the filthiest compacted log (`LogCleaner.grab_filthiest`), the worker
cleans it, and each cleaned group is swapped into the log in memory on the loop
(`PartitionLog.replace_segments`, through `call_soon_threadsafe`), so that requests never see a
log changing under them. With nothing to clean the service sleeps `log.cleaner.backoff.ms`.

The worker holds the GIL while it decodes and copies records, which delays the loop's requests
by up to the interpreter's switch interval; `log.cleaner.io.max.bytes.per.second` bounds its
share. bench/recovery.py measures produce latency with the cleaner on and off.

Stopping sets the clean's stop flag and waits: the worker drops its `.cleaned` files at its next
batch, or finishes a swap it has begun (renames only), never leaving a half-swapped log.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable

from exactly.log import LogManager
from exactly.log.cleaner import CleanAborted, CleanStats, CleanTask, LogCleaner
from exactly.log.config import CleanerConfig
from exactly.log.segment import LogSegment

log = logging.getLogger(__name__)

class CleanerService:
    def __init__(self, logs: LogManager, config: CleanerConfig, clock: Callable[[], int]) -> None:
        self.config = config
        self.cleaner = LogCleaner(logs.log_dir, logs.logs, config, clock=lambda: clock() / 1000)
        self._clock = clock
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._current: CleanTask | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        if not self.config.enable:
            log.info("event=log_cleaner_disabled")
            return
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="log-cleaner")
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            try:
                task = self.cleaner.grab_filthiest(self._clock())
            except Exception:
                log.exception("event=log_cleaner_choice_failed")
                task = None
            if task is None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.config.backoff_ms / 1000)
                continue
            self._current = task
            stats: CleanStats | None = None
            try:
                stats = await loop.run_in_executor(
                    self._executor, self.cleaner.run, task, self._committer(loop, task),
                    self.config.io_max_bytes_per_second)
            except CleanAborted as exc:
                log.info("event=log_clean_stopped partition=%s reason=%s", task.name, exc)
            except Exception:
                # The log is untouched, or whole with some groups cleaned: try again later.
                log.exception("event=log_clean_failed partition=%s", task.name)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.config.backoff_ms / 1000)
            finally:
                self._current = None
                self.cleaner.done(task, stats)

    @staticmethod
    def _committer(loop: asyncio.AbstractEventLoop,
                   task: CleanTask) -> Callable[[list[LogSegment], LogSegment], None]:
        """`commit` for the worker: the in-memory swap runs on the loop; the worker waits for it."""
        def swap(old: list[LogSegment], new: LogSegment) -> None:
            if task.plog.closed:
                new.close()
                raise CleanAborted(f"{task.name} was closed")
            task.plog.replace_segments(old, new)

        def commit(old: list[LogSegment], new: LogSegment) -> None:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()

            def run() -> None:
                try:
                    swap(old, new)
                    done.set_result(None)
                except Exception as exc:  # noqa: BLE001 - handed to the worker, which raises it
                    done.set_exception(exc)
            loop.call_soon_threadsafe(run)
            done.result()
        return commit

    async def stop(self) -> None:
        self._stopping.set()
        if self._current is not None:
            self._current.stop.set()
        if self._task is not None:
            await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)
