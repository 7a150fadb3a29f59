"""The blocking facade's engine: one private asyncio loop in a daemon thread per process.

The blocking classes (`exactly.client.Producer`, ...) keep an asyncio object living on this loop
and run each call on it, so code that is not async (Spark tasks, scripts) gets the same client
(their shared machinery is blocking.py).

Clean-up, as Python's own files do it: a blocking object that is garbage-collected, or still open
when the interpreter exits, is closed for its owner (a producer flushes, a consumer leaves its
group, connections close) and a `ResourceWarning` names it and where it was made (hidden unless
warnings are on: `python -W always` or `-X dev`). At exit the loop then cancels whatever task is
left, waits for it, and stops: a daemon thread frozen with tasks pending is what would print
"Task was destroyed but it is pending!". Exit waits at most `EXIT_TIMEOUT` seconds for all this.
`with ... as x:` (or `close()`) remains the way to close at a known point.

The loop is uvloop's where installed (it is a dependency except on Windows): every blocking
call is two thread crossings, and uvloop's are the cheaper ones.

Cancellation, the same everywhere in the client (Python 3.11's asyncio has two traps):
`wait_event` waits with a timeout on `asyncio.timeout`, not `asyncio.wait_for`, which on 3.11
returns instead of raising when the waiting task is cancelled in the step its awaitable
completes (fixed in 3.12); `stop_tasks` cancels child tasks and waits for them, swallowing their
CancelledError but not one of its caller's: `with suppress(CancelledError): await task` swallows
both, and a close() that was cancelled (by its caller, or by its own bound, `bounded_close`)
went on as if it had not been.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
CloseCall = Callable[[], Coroutine[Any, Any, Any]]

EXIT_TIMEOUT = 5.0  # seconds the interpreter's exit waits for unclosed clients to close
CLOSE_TIMEOUT_S = 30.0  # how long a consumer's close() says goodbye at most: Kafka's default

log = logging.getLogger("exactly.client")


@contextlib.asynccontextmanager
async def bounded_close(what: str, timeout: float | None) -> AsyncIterator[None]:
    """The goodbyes of a close() (last commits or acknowledgements, leaving the group), cut off
    after `timeout` seconds with a warning, as Kafka's close(Duration): a broker that does not
    answer must not hold the application up. None: no bound."""
    bound = asyncio.timeout(timeout)
    try:
        async with bound:
            yield
    except TimeoutError:
        if not bound.expired():
            raise  # a timeout of the goodbyes' own, not the bound
        log.warning("event=close_timed_out client=%r timeout_s=%s: the %s closed without "
                    "finishing its goodbyes", what, timeout, what)


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait until `event` is set or `timeout` seconds pass; a cancellation of the caller always
    raises (see the module doc: not asyncio.wait_for)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(timeout, 0)):
            await event.wait()


async def stop_tasks(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel `tasks` (None: no task) and wait until they have ended. Their own ends
    (CancelledError, or an exception: logged) are swallowed; a cancellation of the caller that
    arrives meanwhile is raised at once, without waiting further, so that a bound on the caller
    (`bounded_close`) also stops it when a task does not end. A caller already cancelling (a
    `finally:` cleaning up after its cancellation) still waits for the tasks."""
    stopping = [task for task in tasks if task is not None]
    for task in stopping:
        task.cancel()
    current = asyncio.current_task()
    cancels = current.cancelling() if current is not None else 0
    for task in stopping:
        try:
            await task
        except asyncio.CancelledError:
            if current is not None and current.cancelling() > cancels:
                raise  # the caller's own cancellation, not (only) the task's
        except Exception:  # the task is over either way
            log.debug("event=stopped_task_failed task=%r", task, exc_info=True)


async def close_in_order(*closes: Callable[[], Awaitable[object]]) -> None:
    """Run each close in turn, every one of them even when one fails or the caller is cancelled
    meanwhile (a cancelled close must not leave sockets open); the first failure is raised once
    all have run."""
    async with contextlib.AsyncExitStack() as stack:
        for close in reversed(closes):
            stack.push_async_callback(close)


_CLOSING: set[asyncio.Task[Any]] = set()  # closes started by close_within, until they are done
_CLOSE_GRACE_S = 0.1


async def close_within(deadline: float | None, *closes: Callable[[], Awaitable[object]]) -> None:
    """Start every close at once, each in a task (a close() cancelled meanwhile still closes
    everything), and wait for them until `deadline` (time.monotonic(); None: no bound), or a
    moment (_CLOSE_GRACE_S) if it has passed. One not done by then finishes on its own: a TLS
    connection's close waits for the peer's close_notify up to ssl_shutdown_timeout (30 s),
    which a broker that does not answer never sends; its socket is closing either way, only
    the wait is cut short."""
    tasks = [asyncio.ensure_future(close()) for close in closes]
    for task in tasks:
        _CLOSING.add(task)
        task.add_done_callback(_closed)
    await asyncio.sleep(0)  # their first steps: a heartbeat task cancelled, sockets closing
    # At least a moment, even after goodbyes that took the whole timeout: a plaintext close is
    # done a loop turn or two later.
    left = None if deadline is None else max(deadline - time.monotonic(), _CLOSE_GRACE_S)
    _, pending = await asyncio.wait(tasks, timeout=left)
    if pending:
        log.warning("event=close_unfinished closes=%d: they finish after close() returns",
                    len(pending))


def _closed(task: asyncio.Task[Any]) -> None:
    _CLOSING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.info("event=close_failed error=%r", task.exception())


class LoopThread:
    _shared: LoopThread | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._main, name="exactly-client-loop", daemon=True)
        self._watched: list[weakref.finalize[Any, Any]] = []  # in creation order
        self._closing: set[concurrent.futures.Future[Any]] = set()
        self._watch_lock = threading.Lock()
        self._thread.start()
        atexit.register(self._at_exit)

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
        call = _Call(coro, _Waker.of_this_thread() if timeout is None else None)
        self.loop.call_soon_threadsafe(call.start)
        return call.wait(timeout)

    # -- clean-up of what the application did not close -----------------------------------------

    def watch(self, owner: object, close: CloseCall) -> weakref.finalize[Any, Any]:
        """Close `owner`'s asyncio object with `close()` if `owner` is collected or the
        interpreter exits while it is open; `detach()` the result once `owner` is closed.
        `close` must not refer to `owner`, or `owner` would never be collected."""
        finalizer = weakref.finalize(owner, self._close_dropped, close, type(owner).__name__,
                                     *_caller())
        finalizer.atexit = False  # _at_exit closes them, before it stops the loop
        with self._watch_lock:
            self._watched = [f for f in self._watched if f.alive]
            self._watched.append(finalizer)
        return finalizer

    def _close_dropped(self, close: CloseCall, kind: str, filename: str, lineno: int) -> None:
        """Start closing (from any thread, even the loop's own: it does not wait), then warn,
        pointing at the line that made the object."""
        if self._thread.is_alive() and not self.loop.is_closed():
            future = asyncio.run_coroutine_threadsafe(close(), self.loop)
            self._closing.add(future)
            future.add_done_callback(self._closing.discard)
        message = f"unclosed {kind}: call close() or use `with {kind}(...) as ...:`"
        try:
            warnings.warn_explicit(message, ResourceWarning, filename, lineno)
        except Warning as exc:  # -W error: report it as Python reports an unclosed file
            print(f"Exception ignored while closing a {kind} made at {filename}:{lineno}: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)

    def _at_exit(self) -> None:
        if not self._thread.is_alive():  # a forked child, or stopped already
            return
        deadline = time.monotonic() + EXIT_TIMEOUT
        with self._watch_lock:
            watched, self._watched = self._watched, []
        for finalizer in reversed(watched):  # a producer closes before the session it uses
            # Not finalizer(): weakref's own exit hook may have run already, and disarmed it.
            found = finalizer.detach()
            if found is not None:
                _, close_dropped, args, _ = found
                close_dropped(*args)
        concurrent.futures.wait(list(self._closing), timeout=max(deadline - time.monotonic(), 0))
        try:
            self.run(self._cancel_tasks(), timeout=max(deadline - time.monotonic(), 0.1))
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # a task that ignores cancellation: leave it to the interpreter
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=1)
        if not self.loop.is_running():
            self.loop.close()

    @staticmethod
    async def _cancel_tasks() -> None:
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


class _Call:
    """One blocking call's trip to the loop and back, leaner than
    asyncio.run_coroutine_threadsafe: one callback woken on the loop creates the task, and the
    task itself releases a lock when its coroutine ends. No concurrent.futures.Future chained
    to an asyncio one (their done callbacks, a Condition taken by both threads), no extra loop
    turn for the task's done callback. As with run_coroutine_threadsafe, a caller that stops
    waiting (timeout) leaves the coroutine running; a cancelled coroutine raises
    concurrent.futures.CancelledError in the caller.

    A caller that waits without a timeout sleeps in a read of its thread's `_Waker` pipe, and
    the task wakes it with a write, which Python makes without holding the GIL: the caller
    wakes and takes the GIL at once. Woken by the lock's release instead (made holding the
    GIL), it woke to a GIL the loop thread still held and slept again, and the loop thread was
    preempted in between: a trip to the loop took 3 voluntary context switches and 21 us of CPU
    instead of 1 and 12.5 (a coroutine that returns at once, measured on 2 cores)."""

    __slots__ = ("_coro", "_done", "_error", "_result", "_task", "_waker")

    def __init__(self, coro: Coroutine[Any, Any, Any], waker: _Waker | None) -> None:
        self._coro: Coroutine[Any, Any, Any] | None = coro
        self._done = threading.Lock()
        self._done.acquire()  # released once the coroutine has ended
        self._waker = waker  # the caller's, if it waits without a timeout
        self._result: Any = None
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps tasks weakly

    def start(self) -> None:
        """On the loop thread."""
        self._task = asyncio.get_running_loop().create_task(self._main())

    async def _main(self) -> None:
        assert self._coro is not None
        coro, self._coro = self._coro, None
        try:
            self._result = await coro
        except BaseException as exc:
            self._error = exc
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise  # KeyboardInterrupt, SystemExit: the loop's too, as asyncio does
        finally:
            self._done.release()
            if self._waker is not None:
                self._waker.wake()

    def wait(self, timeout: float | None) -> Any:
        """In the caller's thread: the coroutine's result, or its exception raised here."""
        waker = self._waker
        if waker is not None:
            while not self._done.acquire(blocking=False):
                waker.sleep()
        elif not self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise TimeoutError(f"the client's loop did not finish the call within {timeout} s")
        error, self._error = self._error, None  # no cycle through the traceback
        if error is None:
            return self._result
        if isinstance(error, asyncio.CancelledError):
            raise concurrent.futures.CancelledError() from None
        raise error


class _Waker:
    """A pipe a calling thread sleeps on while the loop runs its call (see `_Call`); one per
    thread, closed once the thread has ended and no call holds it. A wake-up left over from a
    wait that was interrupted (KeyboardInterrupt) is harmless: the caller sleeps again until
    its own call's lock is free. A forked child makes its own: the parent's pipe is shared."""

    __slots__ = ("_read", "_write")
    _local = threading.local()

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        if hasattr(os, "set_blocking"):  # not for pipes on Windows before Python 3.12
            os.set_blocking(self._write, False)  # a full pipe wakes the reader already

    @classmethod
    def of_this_thread(cls) -> _Waker:
        waker: _Waker | None = getattr(cls._local, "waker", None)
        if waker is None:
            waker = cls._local.waker = cls()
        return waker

    def sleep(self) -> None:
        os.read(self._read, 64)  # the GIL released meanwhile

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"\0")  # the GIL released during the write

    def __del__(self, close: Callable[[int], None] = os.close) -> None:
        close(self._read)  # `close` bound early: at exit the module's globals may be gone
        close(self._write)

    @classmethod
    def _forget_all(cls) -> None:
        cls._local = threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_Waker._forget_all)


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it exists (as the broker uses): a blocking call crosses to this loop
    and back, and uvloop makes the crossings and the loop's steps cheaper (the blocking
    client's 1-record transactions against librdkafka's mock: about 1.7x the rate on asyncio's
    own loop, measured with bench/client_transactions.py)."""
    try:
        import uvloop
    except ImportError:  # Windows: no uvloop
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _caller() -> tuple[str, int]:
    """The first frame outside the client package: where the application made the object."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(
            "exactly.client"):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno
