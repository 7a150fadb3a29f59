"""The blocking facades' shared machinery. Each blocking class of the client (Producer, Consumer,
ShareConsumer, TransactionSession, Admin) keeps its asyncio object (`aio`: AsyncProducer, ...)
living on the client's loop thread (`_loop.LoopThread`) and runs each call there, so code that
is not async (Spark tasks, scripts) gets the same client. What every one of them does the same
way is here: make the asyncio object (on the loop when its constructor needs the running loop,
else in the caller's thread), watch it so that it is closed if the application drops the facade
or leaves it open at exit (see _loop.py), run a coroutine or a plain method of it on the loop,
read its properties, close it, and `with`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, Self, TypeVar, overload

from exactly.client._loop import CloseCall, LoopThread

__all__ = ["Blocking", "Mirror", "on_loop"]

T = TypeVar("T")


class _Closable(Protocol):
    def close(self) -> Coroutine[Any, Any, Any]: ...


A = TypeVar("A", bound=_Closable)


async def on_loop(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` as a coroutine, to run on the client's loop: for what must be called there
    (an asyncio object's constructor or plain method that creates tasks or touches its
    state)."""
    return fn(*args)


class Blocking(Generic[A]):
    """Base of the blocking classes: `aio`, the asyncio object underneath; `_start` makes it
    the facade's; `_run` and `_call` run on the client's loop thread; `close` (or `with`)
    closes it, through `_close`."""

    aio: A
    _loop: LoopThread
    _finalizer: weakref.finalize[Any, Any] | None = None  # once watched

    def _start(self, aio: A | Coroutine[Any, Any, A], *, watch: bool = True) -> None:
        """Keep `aio`, or what the coroutine `aio` makes on the client's loop (an object whose
        constructor needs the running loop). With `watch`, it is closed for the owner if this
        facade is dropped or left open at exit; without, its maker closes it."""
        self._loop = LoopThread.shared()
        self.aio = self._loop.run(aio) if isinstance(aio, Coroutine) else aio
        if watch:
            self._watch(self.aio.close)

    def _watch(self, close: CloseCall) -> None:
        self._finalizer = self._loop.watch(self, close)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for its result here."""
        return self._loop.run(coro, timeout)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a plain function of the asyncio object on the loop thread (see `on_loop`)."""
        return self._loop.run(on_loop(fn, *args))

    def _close(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        self._loop.run(coro)

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Mirror(Generic[T]):
    """A read-only property of a blocking class that reads the asyncio object's property of the
    same name (a plain read: the facade's thread, no trip to the loop), as
    `producer_id: Mirror[int] = Mirror()`."""

    def __init__(self, doc: str | None = None) -> None:
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...

    @overload
    def __get__(self, obj: Blocking[Any], owner: type) -> T: ...

    def __get__(self, obj: Blocking[Any] | None, owner: type) -> Self | T:
        if obj is None:
            return self
        value: T = getattr(obj.aio, self._name)
        return value
