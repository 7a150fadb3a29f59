"""A TransactionSession's heartbeats (KIP-1309, a draft), a collaborator the session holds by
name and that owns its task.

With `transaction.heartbeat.interval.ms` or `transaction.session.timeout.ms` set, the session
announces its session timeout (InitProducerId v7) and this task sends TxnHeartbeat every
interval while a transaction is open (from begin_transaction, or resume, to commit, abort,
prepare or close). It runs on the session's event loop: for the blocking session that is the
client's loop thread, so the caller's thread may compute for as long as it likes; a process that
dies or freezes stops heartbeating, and the coordinator aborts its transaction after the session
timeout (3 x the interval), long before `transaction.timeout.ms`. A broker without TxnHeartbeat
gets no heartbeats (a debug log says so, once).

A fenced or fatal answer ends the task (the session's next call raises the error, its state
machine has it); a coordinator that does not answer within request.timeout.ms is tried again at
the next interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from exactly.client._loop import stop_tasks
from exactly.client.connection import BrokerConnection
from exactly.client.errors import KafkaError, KafkaTimeoutError
from exactly.client.session_requests import offers_heartbeats

log = logging.getLogger("exactly.client")


class TxnHeartbeats:
    """`beat()` sends one TxnHeartbeat (through the session, which fails its state machine on a
    final error); `beating()` says whether a transaction is still open for them."""

    def __init__(self, transactional_id: str, interval_ms: int, session_ms: int, *,
                 beat: Callable[[], Awaitable[None]], beating: Callable[[], bool]) -> None:
        self.transactional_id = transactional_id
        self.interval_ms, self.session_ms = interval_ms, session_ms  # (0, -1): off
        self.offered: bool | None = None  # the coordinator takes TxnHeartbeat, once asked
        self.task: asyncio.Task[None] | None = None
        self._beat, self._beating = beat, beating

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def offered_by(self, coordinator: Callable[[], Awaitable[BrokerConnection]]) -> bool:
        """Does the transaction coordinator take TxnHeartbeat and InitProducerId v7? Asked once;
        a no is logged (debug) when heartbeats were configured."""
        if self.offered is None:
            conn = await coordinator()
            self.offered = offers_heartbeats(conn)
            if not self.offered and self.interval_ms:
                log.debug("event=session_heartbeats_off transactional_id=%r broker=%s:%d "
                          "reason=%r", self.transactional_id, conn.host, conn.port,
                          "the broker has no TxnHeartbeat (KIP-1309): an abandoned transaction "
                          "is aborted at transaction.timeout.ms only")
        return self.offered

    def start(self) -> None:
        if not self.running:
            self.task = asyncio.create_task(self._loop())
            log.debug("event=session_heartbeats_started transactional_id=%r interval_ms=%d "
                      "session_timeout_ms=%d", self.transactional_id, self.interval_ms,
                      self.session_ms)

    async def stop(self) -> None:
        task, self.task = self.task, None
        if task is None:
            return
        await stop_tasks([task])
        log.debug("event=session_heartbeats_stopped transactional_id=%r", self.transactional_id)

    async def _loop(self) -> None:
        """Every interval while the transaction is open: one TxnHeartbeat."""
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            if not self._beating():
                return
            try:
                await self._beat()
            except KafkaTimeoutError as exc:
                log.warning("event=session_heartbeat_failed transactional_id=%r error=%r",
                            self.transactional_id, str(exc))
            except KafkaError as exc:
                log.warning("event=session_heartbeat_stopped transactional_id=%r error=%r",
                            self.transactional_id, str(exc))
                return
