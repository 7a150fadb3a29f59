"""TransactionSession: a transaction's identity (transactional id, producer id, epoch)
and lifecycle as a client object of its own, talking to the transaction coordinator only.

Producers bind to a session and write under its identity; the session begins, prepares
(KIP-939), commits and aborts. `resume` takes over a transaction another process began or
prepared, from its producer id and epoch, without InitProducerId (which would abort it).

`AsyncTransactionSession` (session_core.py) is the asyncio core; `TransactionSession`, here, the
blocking facade with the same methods, each run on the client's loop thread, except
begin_transaction when heartbeats are off: it sends nothing, so it runs in the caller's thread
(one thread crossing fewer per transaction).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from exactly.client.blocking import Blocking, Mirror
from exactly.client.config import ClientConfig
from exactly.client.prepared import PreparedTxnState
from exactly.client.session_core import AsyncTransactionSession, Offsets
from exactly.client.session_state import State
from exactly.client.types import ConsumerGroupMetadata, ShareAcknowledgements
from exactly.protocol.structs import TopicPartition

__all__ = ["AsyncTransactionSession", "ConsumerGroupMetadata", "Offsets", "PreparedTxnState",
           "State", "TransactionSession"]


class TransactionSession(Blocking[AsyncTransactionSession]):
    """The blocking TransactionSession: the same methods as AsyncTransactionSession, each run
    on the client's loop thread. `aio` is the asyncio session underneath (bind producers to it).
    One made over an existing `_session` (Producer.transaction_session) is not cleaned up at
    exit on its own: the object that made that session is."""

    def __init__(self, config: ClientConfig | Mapping[str, Any], *,
                 _session: AsyncTransactionSession | None = None) -> None:
        self._start(_session if _session is not None else AsyncTransactionSession(config),
                    watch=_session is None)

    @classmethod
    def resume(cls, transactional_id: str, producer_id: int, producer_epoch: int,
               config: ClientConfig | Mapping[str, Any]) -> TransactionSession:
        session = cls(config, _session=AsyncTransactionSession.resume(
            transactional_id, producer_id, producer_epoch, config))
        session._watch(session.aio.close)  # it owns the session it resumed
        if session.aio.heartbeat_interval_ms:
            session._run(session.aio._resume_heartbeats())
        return session

    transactional_id: Mirror[str] = Mirror()
    producer_id: Mirror[int] = Mirror()
    producer_epoch: Mirror[int] = Mirror()
    state: Mirror[State] = Mirror()
    prepared_state: Mirror[PreparedTxnState] = Mirror()
    uses_transaction_v2: Mirror[bool] = Mirror()
    heartbeat_interval_ms: Mirror[int] = Mirror()
    session_timeout_ms: Mirror[int] = Mirror()
    heartbeating: Mirror[bool] = Mirror("The heartbeat task is running on the client's loop "
                                        "thread.")
    share_acknowledgements: Mirror[dict[str, dict[TopicPartition, set[int]]]] = Mirror()

    def initialize(self, keep_prepared_txn: bool = False) -> None:
        self._run(self.aio.initialize(keep_prepared_txn))

    def begin_transaction(self) -> None:
        self.aio.begin_from_thread(self._loop)

    def add_partitions_to_transaction(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._run(self.aio.add_partitions_to_transaction(list(partitions)))

    def send_offsets_to_transaction(self, offsets: Offsets,
                                    group_metadata: ConsumerGroupMetadata | str | Any) -> None:
        self._run(self.aio.send_offsets_to_transaction(offsets, group_metadata))

    def add_share_acks_to_transaction(self, group_id: str,
                                      acknowledgments: ShareAcknowledgements) -> None:
        self._run(self.aio.add_share_acks_to_transaction(group_id, acknowledgments))

    def prepare_transaction(self) -> PreparedTxnState:
        return self._run(self.aio.prepare_transaction())

    def complete_transaction(self, state: PreparedTxnState) -> None:
        self._run(self.aio.complete_transaction(state))

    def commit_transaction(self) -> None:
        self._run(self.aio.commit_transaction())

    def abort_transaction(self) -> None:
        self._run(self.aio.abort_transaction())

    def heartbeat(self) -> None:
        self._run(self.aio.heartbeat())

    def close(self) -> None:
        self._close(self.aio.close())

    def __repr__(self) -> str:
        return (f"TransactionSession({self.transactional_id!r}, producer_id={self.producer_id}, "
                f"epoch={self.producer_epoch}, state={self.state})")
