"""Every client the connector makes is made here, and counted.

Each client (Admin, Producer, Consumer, TransactionSession) bootstraps on its own: it connects
to bootstrap.servers, fetches metadata and finds its coordinators before its first request does
any work. On the driver a micro-batch's work is a handful of requests, so what a batch costs
there is mostly how many clients it makes. `ClientFactory` makes them and counts them by kind;
`PROCESS` counts every client made in this process, and a QueryCoordinator
(exactly.spark.coordinator) has a factory of its own that counts what the query's driver side
makes and adds it to PROCESS too. `event=spark_batch_committed` reports the count as
`bootstraps=N`.

A session resumed by producer id and epoch (`resume`) is counted apart: completing a
participant needs one, whatever the driver holds, so it is no measure of the driver's own cost.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from exactly.client import Admin, Consumer, Producer, TransactionSession

__all__ = ["ADMIN", "CONSUMER", "KINDS", "PROCESS", "PRODUCER", "RESUME", "SESSION", "ClientFactory"]

ADMIN, PRODUCER, CONSUMER, SESSION, RESUME = "admin", "producer", "consumer", "session", "resume"
KINDS = (ADMIN, PRODUCER, CONSUMER, SESSION, RESUME)


class ClientFactory:
    """Makes clients and counts them by kind; a factory with a parent counts into it too."""

    def __init__(self, parent: ClientFactory | None = None) -> None:
        self.parent = parent
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()  # the driver completes participants from a thread pool

    def _count(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1
        if self.parent is not None:
            self.parent._count(kind)

    def counts(self) -> dict[str, int]:
        """Clients made so far, by kind."""
        with self._lock:
            return {kind: self._counts[kind] for kind in KINDS}

    @property
    def bootstraps(self) -> int:
        """Clients made so far, sessions resumed by producer id excepted."""
        with self._lock:
            return sum(n for kind, n in self._counts.items() if kind != RESUME)

    def admin(self, config: Mapping[str, Any]) -> Admin:
        self._count(ADMIN)
        return Admin(config)

    def producer(self, config: Mapping[str, Any],
                 session: TransactionSession | None = None) -> Producer:
        self._count(PRODUCER)
        return Producer(config, session=session)

    def consumer(self, config: Mapping[str, Any]) -> Consumer:
        self._count(CONSUMER)
        return Consumer(config)

    def session(self, config: Mapping[str, Any]) -> TransactionSession:
        self._count(SESSION)
        return TransactionSession(config)

    def resume(self, transactional_id: str, producer_id: int, producer_epoch: int,
               config: Mapping[str, Any]) -> TransactionSession:
        """TransactionSession.resume: a transaction another process began, by its producer id
        and epoch (EndTxn with no InitProducerId)."""
        self._count(RESUME)
        return TransactionSession.resume(transactional_id, producer_id, producer_epoch, config)


PROCESS = ClientFactory()
