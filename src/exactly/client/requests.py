"""The client's one way to send a request to a coordinator and decide, from the answer's error
code(s), whether it is done, to be retried, to be retried after finding the coordinator again,
or failed. aiokafka's idiom: each kind of request has a handler that reads its answer into a
verdict (`errors.classify`), and one loop sends, asks the handler, and waits with backoff
within a bound.

    call(coordinator, request, decide, Retry(...), fail=..., give_up=...)

- `coordinator` says where the request goes and how to forget it: `ClusterCoordinator` (the
  cluster's shared connection to the coordinator FindCoordinator names) or a classic group's
  dedicated connection (group.GroupCoordinatorClient).
- `request(conn)` builds the request for the version `conn` negotiated.
- `decide(answer)` reads it into a `Decision`: the verdict and the error code it is about. It
  may also raise a final error of its own (a rebalance's CommitFailedError).
- `on_error(exc)` (optional) judges an exception of the connection or the send the same way
  (the session retries a lost connection); without it such an exception is raised as it is.
- `fail(answer, code)` is the exception of a FAIL, `give_up(answer, code)` the one raised when
  the retries run out while the verdict is still RETRY.

`Retry` holds the waits: exponential (doubled up to a cap, for a call bounded by
request.timeout.ms, and for the memberships' loops, which are not bounded) or linear (for a
call bounded by a number of attempts). The memberships' loops (group.py, share_group.py) use
`Retry` and `classify` without `call`: they run a request per turn of their own loop.

The callers keep what they did before this module gathered them, where it differed:
- A coordinator that answers COORDINATOR_LOAD_IN_PROGRESS is looked up again by the admin's
  calls and the share group's membership (errors.COORDINATOR_UNSETTLED), and retried as it is
  by the session and the classic group (errors.COORDINATOR_MOVED).
- The session bounds each send by what is left of request.timeout.ms (`bound_send`); the admin
  and the classic group's offsets let each send take the connection's own request.timeout.ms.
  All of them retry a connection that could not be made or was lost, after finding the
  coordinator again (`coordinator_unreachable`): on a cluster the coordinator's node may die.
- Force-terminating a transaction retries CONCURRENT_TRANSACTIONS only and fails on any other
  code, retriable or not; the session retries every retriable code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from exactly.client.cluster import Cluster
from exactly.client.connection import BrokerConnection
from exactly.client.errors import KafkaConnectionError, KafkaError, Verdict
from exactly.protocol.errors import error_name

__all__ = ["Backoff", "ClusterCoordinator", "Coordinator", "Decision", "Retry", "call",
           "coordinator_unreachable"]


class Decision(NamedTuple):
    """A handler's reading of an answer: the verdict, and the error code it is about."""

    verdict: Verdict
    code: int


@dataclass(frozen=True, slots=True)
class Backoff:
    """The waits between attempts, in seconds: `first`, then doubled up to `cap` (the first is
    not capped: a retry.backoff.ms above the cap is waited once); `linear`: first x (n + 1),
    capped, for the n-th wait from 0."""

    first: float
    cap: float = 1.0
    linear: bool = False


class Retry:
    """One call's retries: the next wait, and its bound, a deadline (`timeout` seconds from now)
    or a number of attempts, or neither (a loop that retries until it is stopped).

    `wait()` checks a deadline before it sleeps (the wait must end before it) and a number of
    attempts after (the last attempt's wait is made too, as the classic group's offset
    requests always did)."""

    def __init__(self, backoff: Backoff, *, timeout: float | None = None,
                 attempts: int | None = None) -> None:
        self.backoff = backoff
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.attempts = attempts
        self.attempt = 0  # waits made so far: the attempt under way, from 0
        self._delay = backoff.first

    @property
    def last(self) -> bool:
        """The attempt under way is the last one allowed."""
        return self.attempts is not None and self.attempt >= self.attempts - 1

    def remaining(self) -> float:
        """Seconds until the deadline (a millisecond at least)."""
        if self.deadline is None:
            raise ValueError("this Retry has no deadline")
        return max(self.deadline - time.monotonic(), 0.001)

    def _peek(self) -> float:
        if self.backoff.linear:
            return min(self.backoff.first * (self.attempt + 1), self.backoff.cap)
        return self._delay

    def next_delay(self) -> float:
        """The wait before the next attempt, counted as made (for a loop that waits on its own
        terms, e.g. until an event or the delay)."""
        delay = self._peek()
        self._delay = min(self._delay * 2, self.backoff.cap)
        self.attempt += 1
        return delay

    async def wait(self) -> bool:
        """Sleep before the next attempt. False when there is none: the deadline would pass
        before the wait ends (no sleep then), or the attempts are used up."""
        if self.deadline is not None and time.monotonic() + self._peek() > self.deadline:
            return False
        await asyncio.sleep(self.next_delay())
        return self.attempts is None or self.attempt < self.attempts

    def reset(self) -> None:
        """An attempt succeeded: the next failure waits `first` again."""
        self.attempt = 0
        self._delay = self.backoff.first


class Coordinator(Protocol):
    """Where `call` sends: a connection to the coordinator, the send itself, and what to do
    when the coordinator moved."""

    async def connection(self) -> BrokerConnection: ...

    async def exchange(self, conn: BrokerConnection, request: Any, timeout: float | None) -> Any:
        ...

    async def rediscover(self) -> None: ...


class ClusterCoordinator:
    """The coordinator of `key` (COORDINATOR_GROUP or COORDINATOR_TRANSACTION) as the cluster
    finds it with FindCoordinator, over the cluster's connection to that broker. `found(conn)`
    hears each connection handed out (the session learns the broker's features from it)."""

    def __init__(self, cluster: Cluster, key_type: int, key: str, *,
                 found: Callable[[BrokerConnection], None] | None = None) -> None:
        self.cluster, self.key_type, self.key = cluster, key_type, key
        self._found = found

    async def connection(self) -> BrokerConnection:
        conn = await self.cluster.coordinator(self.key_type, self.key)
        if self._found is not None:
            self._found(conn)
        return conn

    async def exchange(self, conn: BrokerConnection, request: Any, timeout: float | None) -> Any:
        return await conn.send(request, timeout=timeout)

    async def rediscover(self) -> None:
        self.cluster.forget_coordinator(self.key_type, self.key)


def coordinator_unreachable(exc: KafkaError) -> Decision:
    """`on_error` for a call whose coordinator may be on a node that died: a connection that
    could not be made or was lost means finding the coordinator again and retrying within the
    call's bound (Kafka's clients mark the coordinator unknown on a disconnect; on a cluster,
    FindCoordinator names the dead node until its partitions get new leaders). Any other
    exception is raised as it is."""
    if isinstance(exc, KafkaConnectionError):
        return Decision(Verdict.RETRY | Verdict.REDISCOVER, -1)
    raise exc


def _failed(answer: Any, code: int) -> BaseException:
    return KafkaError(error_name(code), code)


async def call(coordinator: Coordinator, request: Callable[[BrokerConnection], Any],
               decide: Callable[[Any], Decision], retry: Retry, *,
               give_up: Callable[[Any, int], BaseException],
               fail: Callable[[Any, int], BaseException] = _failed,
               on_error: Callable[[KafkaError], Decision] | None = None,
               bound_send: bool = False) -> tuple[BrokerConnection, Any]:
    """Send `request` until `decide` says it is done; the connection that answered and the
    answer. RETRY waits (`retry`) and sends again, REDISCOVER first forgets the coordinator,
    FAIL raises `fail(answer, code)`; out of retries, `give_up(answer, code)` is raised.
    `answer` is the response, or the KafkaError `on_error` judged. `bound_send`: each send may
    take only what is left of the retry's deadline."""
    while True:
        try:
            conn = await coordinator.connection()
            timeout = retry.remaining() if bound_send else None
            answer: Any = await coordinator.exchange(conn, request(conn), timeout)
        except KafkaError as exc:
            if on_error is None:
                raise
            answer, (verdict, code) = exc, on_error(exc)
            assert verdict is not Verdict.DONE, "an exception is not an answer"
        else:
            verdict, code = decide(answer)
            if verdict is Verdict.DONE:
                return conn, answer
        if Verdict.REDISCOVER in verdict:
            await coordinator.rediscover()
        if Verdict.FAIL in verdict:
            raise fail(answer, code)
        if not await retry.wait():
            raise give_up(answer, code)
