"""AsyncTransactionSession, the asyncio core of TransactionSession (session.py): a
transaction's identity and lifecycle, its state machine (session_state.py) driven by the answers
of the transaction coordinator.

Transaction version 2 (KIP-890) is used when the coordinator's broker finalized
`transaction.version` >= 2 and offers EndTxn v5 and Produce v12: the partitions of a transaction
are added by the broker when a Produce v12 reaches them, and each EndTxn bumps the epoch (the
session adopts the producer id and epoch it returns). Otherwise the version-1 protocol is used:
AddPartitionsToTxn (v0-v3) before the first write to a partition, AddOffsetsToTxn before
TxnOffsetCommit (v0-v4), EndTxn v0-v4 without a bump.

Heartbeats (KIP-1309, a draft): with `transaction.heartbeat.interval.ms` or
`transaction.session.timeout.ms` set, `initialize` announces the session timeout (InitProducerId
v7) and a heartbeat task (session_heartbeats.py) sends TxnHeartbeat every interval while a
transaction is open, so that the coordinator aborts the transaction of a process that died
after the session timeout, long before `transaction.timeout.ms`. A broker without TxnHeartbeat
gets no heartbeats, and `heartbeat()` checks the identity with DescribeTransactions instead.

Share acknowledgements (KIP-1289, a draft): `add_share_acks_to_transaction` stages a share
consumer's acknowledgements in the open transaction (AddOffsetsToTxn with the group's id, then
TxnShareAcknowledge to each share-partition's leader; see
exactly.protocol.drafts.txn_share_acknowledge): the commit accepts (or rejects) the records, an
abort releases them for redelivery. A broker without TxnShareAcknowledge gets
UnsupportedVersionError naming KIP-1289, before anything is sent.

The requests themselves are built and read in session_requests.py and sent by its
`CoordinatorCalls` (`_calls`) through the client's one request path (requests.call): retriable
errors are retried with backoff within request.timeout.ms, a coordinator that moved is found
again, and a final error moves the state machine (session_state) and is raised as the session
exception it stands for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, Self

from exactly.client import session_requests as req
from exactly.client._loop import LoopThread
from exactly.client.cluster import Cluster
from exactly.client.config import ClientConfig, as_config
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    ConfigError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    UnsupportedVersionError,
)
from exactly.client.prepared import PreparedTxnState
from exactly.client.session_heartbeats import TxnHeartbeats
from exactly.client.session_state import (
    SessionStateMachine,
    State,
    error_for,
    heartbeat_timing,
    write_error,
)
from exactly.client.types import ConsumerGroupMetadata, ShareAcknowledgements, TransactionState
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition

log = logging.getLogger("exactly.client")

__all__ = ["AsyncTransactionSession", "Offsets"]

Offsets = Mapping[tuple[str, int], int | tuple[int, str | None]]  # (topic, partition) keys
_MAX_EPOCH = 32767
# The states in which a transaction is open and the heartbeat task runs.
_HEARTBEAT_STATES = frozenset({State.IN_TRANSACTION, State.ABORTABLE_ERROR})


class _Flushable(Protocol):
    async def flush(self) -> None: ...


class AsyncTransactionSession:
    """The asyncio TransactionSession. `config` needs bootstrap.servers and transactional.id."""

    def __init__(self, config: ClientConfig | Mapping[str, Any], *, cluster: Cluster | None = None
                 ) -> None:
        self.config = as_config(config)
        txn_id = self.config["transactional.id"]
        if not txn_id:
            raise ConfigError("a TransactionSession needs transactional.id in its config")
        self._txn_id: str = txn_id
        self._cluster = cluster if cluster is not None else Cluster(self.config)
        self._owns_cluster = cluster is None
        self._machine = SessionStateMachine()
        self._producer_id = -1
        self._epoch = -1
        self._prepared = PreparedTxnState()   # the prepared transaction's identity, once known
        self._partitions: set[TopicPartition] = set()
        self._offset_groups: set[str] = set()
        # KIP-1289: group -> partition -> offsets this transaction acknowledges
        self._share_acks: dict[str, dict[TopicPartition, set[int]]] = {}
        self._started = False                 # the coordinator has something of this transaction
        self._resumed = False
        self._recovered = False               # initialize(keep_prepared_txn=True), nothing prepared
        # The requests to the coordinators (and what the coordinator speaks: `_calls.tv2`).
        self._calls = req.CoordinatorCalls(self._cluster, self.config, identity=self._identity,
                                           resumed=lambda: self._resumed,
                                           fail=self._machine.fail)
        self._producers: list[_Flushable] = []
        self._lock = asyncio.Lock()
        self._heartbeats = TxnHeartbeats(
            txn_id, *heartbeat_timing(self.config["transaction.heartbeat.interval.ms"],
                                      self.config["transaction.session.timeout.ms"]),
            beat=self._send_heartbeat, beating=self._transaction_open)
        self._resume_task: asyncio.Future[None] | None = None

    @classmethod
    def resume(cls, transactional_id: str, producer_id: int, producer_epoch: int,
               config: ClientConfig | Mapping[str, Any]) -> AsyncTransactionSession:
        """A session IN_TRANSACTION with the given identity, for a transaction another process
        began or prepared: it can commit, abort or complete it. Sends nothing until then, unless
        heartbeats are configured: it then looks up the coordinator and heartbeats the open
        transaction (KIP-1309) until it ends."""
        if producer_id < 0 or not 0 <= producer_epoch <= _MAX_EPOCH:
            raise ValueError(f"cannot resume producer id {producer_id} epoch {producer_epoch}: "
                             f"need a producer id >= 0 and an epoch in 0..{_MAX_EPOCH}")
        session = cls(as_config(config).with_overrides(transactional_id=transactional_id))
        session._producer_id, session._epoch = producer_id, producer_epoch
        session._machine.state = State.IN_TRANSACTION
        session._started = session._resumed = True
        if session._heartbeats.interval_ms:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass  # no loop here: the blocking TransactionSession.resume starts them itself
            else:
                session._resume_task = asyncio.ensure_future(session._resume_heartbeats())
        return session

    # -- identity -------------------------------------------------------------------------------

    @property
    def transactional_id(self) -> str:
        return self._txn_id

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def producer_epoch(self) -> int:
        return self._epoch

    @property
    def state(self) -> State:
        return self._machine.state

    @property
    def prepared_state(self) -> PreparedTxnState:
        """The prepared transaction's identity: from prepare_transaction(), or the ongoing
        producer id/epoch the coordinator kept for initialize(keep_prepared_txn=True) (KIP-939:
        the session itself then holds a newer identity). PreparedTxnState() if there is none."""
        return self._prepared

    @property
    def heartbeat_interval_ms(self) -> int:
        """KIP-1309: the time between heartbeats, 0 when they are off."""
        return self._heartbeats.interval_ms

    @property
    def session_timeout_ms(self) -> int:
        """KIP-1309: after this long without a heartbeat the coordinator aborts the open
        transaction; -1 when heartbeats are off."""
        return self._heartbeats.session_ms

    @property
    def heartbeating(self) -> bool:
        """A heartbeat task is running (a transaction is open and the broker takes them)."""
        return self._heartbeats.running

    @property
    def uses_transaction_v2(self) -> bool:
        """Produce with v12 and let the broker add partitions. Known once the coordinator was
        reached: after initialize(), or after the first ensure_partitions() of a resumed session."""
        return bool(self._calls.tv2)

    # -- lifecycle ------------------------------------------------------------------------------

    async def initialize(self, keep_prepared_txn: bool = False) -> None:
        """InitProducerId: get this session's producer id and epoch, fencing older sessions of the
        transactional id. With keep_prepared_txn (KIP-939) a prepared transaction survives: the
        session is then PREPARED and can commit, abort or complete it."""
        async with self._lock:
            self._machine.check("initialize")
            two_pc = bool(self.config["transaction.two.phase.commit.enable"])
            if two_pc or keep_prepared_txn:
                conn = await self._coordinator()
                if conn.broker_max_version(ApiKey.INIT_PRODUCER_ID) < 6:
                    raise UnsupportedVersionError(
                        f"broker {conn.host}:{conn.port} does not support KIP-939 two-phase commit: "
                        "transaction.two.phase.commit.enable and keep_prepared_txn need "
                        "InitProducerId v6, the broker offers up to "
                        f"v{conn.broker_max_version(ApiKey.INIT_PRODUCER_ID)}")
            self._machine.start("initialize")
            heartbeats = self._heartbeats
            announce = (heartbeats.session_ms if heartbeats.interval_ms
                        and await heartbeats.offered_by(self._coordinator) else None)
            response = await self._calls.call("InitProducerId", lambda conn: req.init_producer_id(
                conn, self._txn_id, self.config["transaction.timeout.ms"], two_pc=two_pc,
                keep_prepared_txn=keep_prepared_txn, session_ms=announce))
            self._producer_id, self._epoch = response.producer_id, response.producer_epoch
            self._reset_transaction()
            ongoing = PreparedTxnState.of(getattr(response, "ongoing_txn_producer_id", -1),
                                          getattr(response, "ongoing_txn_producer_epoch", -1))
            if keep_prepared_txn and ongoing.has_transaction:
                self._prepared, self._started = ongoing, True
                self._machine.finish("initialized_prepared")
            else:
                self._machine.finish("initialized")
                self._recovered = keep_prepared_txn
            log.info("event=session_initialized transactional_id=%r producer_id=%d epoch=%d "
                     "transaction_version=%d prepared=%r", self._txn_id, self._producer_id,
                     self._epoch, 2 if self._calls.tv2 else 1, str(self._prepared))

    async def begin_transaction(self) -> None:
        """Start a transaction (client-side: the coordinator learns of it with the first write)."""
        self._begin_locally()
        if self._heartbeats.interval_ms and await self._heartbeats.offered_by(self._coordinator):
            self._heartbeats.start()

    def _begin_locally(self) -> None:
        """begin_transaction's part that sends nothing."""
        self._machine.start("begin_transaction")
        self._reset_transaction()

    def begin_from_thread(self, loop: LoopThread) -> None:
        """begin_transaction for the blocking classes: with heartbeats off it sends nothing
        and starts no task, so it runs in the caller's thread, without a trip to the loop."""
        if self._heartbeats.interval_ms:
            loop.run(self.begin_transaction())
        else:
            self._begin_locally()

    async def add_partitions_to_transaction(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Make partitions part of the open transaction before writing to them (version 1:
        AddPartitionsToTxn; version 2: the Produce v12 that writes there adds them)."""
        await self._ensure(partitions, "add_partitions_to_transaction")

    async def ensure_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """For a bound producer, before it writes: the partitions not yet in this transaction
        are added (version 1: one AddPartitionsToTxn for all; version 2: remembered only)."""
        await self._ensure(partitions, "ensure_partitions")

    def joined(self, partitions: Iterable[tuple[str, int]]) -> bool:
        """ensure_partitions when it needs no request, without a coroutine (the producer's
        flush sends at once then): True if the partitions are in the open transaction
        already, or it uses version 2 (the Produce adds them; they are recorded here). False
        when ensure_partitions must run: AddPartitionsToTxn to send, the version not known yet,
        another call under way, or no transaction open (it then raises the error)."""
        if self._machine.closed or self.state is not State.IN_TRANSACTION:
            return False
        wanted = {TopicPartition(str(t), int(p)) for t, p in partitions}
        if wanted <= self._partitions:
            return True
        if not self._calls.tv2 or self._lock.locked():
            return False
        self._partitions |= wanted
        self._started = True
        return True

    async def _ensure(self, partitions: Iterable[tuple[str, int]], call: str) -> None:
        self._machine.check(call)
        wanted = {TopicPartition(str(t), int(p)) for t, p in partitions}
        if wanted <= self._partitions:
            return
        async with self._lock:
            self._machine.check(call)
            new = wanted - self._partitions
            if not new:
                return
            if self._calls.tv2 is None:
                await self._coordinator()
            if not self._calls.tv2:
                await self._add_partitions(new)
            self._partitions |= new
            self._started = True

    async def send_offsets_to_transaction(self, offsets: Offsets,
                                          group_metadata: ConsumerGroupMetadata | str | Any) -> None:
        """Commit consumer offsets as part of the transaction: visible only if it commits."""
        group = (ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str)
                 else group_metadata)
        if not getattr(group, "group_id", None):
            raise ValueError("send_offsets_to_transaction needs a group id or the consumer's "
                             "group_metadata()")
        pending = {TopicPartition(str(t), int(p)): (v, None) if isinstance(v, int)
                   else (int(v[0]), v[1]) for (t, p), v in offsets.items()}
        self._machine.check("send_offsets_to_transaction")
        async with self._lock:
            self._machine.check("send_offsets_to_transaction")
            if self._calls.tv2 is None:
                await self._coordinator()
            if not self._calls.tv2 and group.group_id not in self._offset_groups:
                await self._calls.call("AddOffsetsToTxn", lambda conn: req.add_offsets(
                    conn, self._identity(), group.group_id))
                self._offset_groups.add(group.group_id)
            self._started = True
            await self._txn_offset_commit(pending, group)

    @property
    def share_acknowledgements(self) -> dict[str, dict[TopicPartition, set[int]]]:
        """The share records this transaction acknowledges (KIP-1289): group -> partition ->
        offsets; settled when it ends."""
        return {g: {tp: set(o) for tp, o in parts.items()} for g, parts in self._share_acks.items()}

    async def add_share_acks_to_transaction(self, group_id: str,
                                            acknowledgments: ShareAcknowledgements) -> None:
        """KIP-1289 (a draft): a share consumer's acknowledgements join the open
        transaction: applied if it commits, the records released for redelivery if it aborts.

        AddOffsetsToTxn with the group's id first (once per group and transaction: how the
        coordinator learns that the transaction holds the group's acknowledgements), then
        TxnShareAcknowledge to each share-partition's leader, naming the member that holds the
        records (`acknowledgments` comes from ShareConsumer.acknowledge_transactionally, or is
        built with its group_metadata()). A broker without TxnShareAcknowledge gets
        UnsupportedVersionError before anything is sent; the transaction is unchanged."""
        call = "add_share_acks_to_transaction"
        if acknowledgments.group.group_id != group_id:
            raise ValueError(f"{call}: the acknowledgements are of group "
                             f"{acknowledgments.group.group_id!r}, not {group_id!r}")
        self._check_in_transaction(call)
        async with self._lock:
            self._check_in_transaction(call)
            targets = await req.share_ack_targets(self._cluster, acknowledgments)
            if self._calls.tv2 is None:
                await self._coordinator()
            if group_id not in self._offset_groups:
                await self._calls.call("AddOffsetsToTxn", lambda conn: req.add_offsets(
                    conn, self._identity(), group_id))
                self._offset_groups.add(group_id)
            self._started = True
            for conn, acks in targets:  # each leader's part, sent once (not a coordinator)
                response = await conn.send(await req.txn_share_acknowledge(
                    self._cluster, self._identity(), acknowledgments, acks))
                error = req.txn_share_acknowledge_error(response, self._identity(),
                                                        acknowledgments.group)
                if error is not None:  # the transaction is abortable now, or the session fenced
                    self._machine.fail(error)
                    raise error
                held = self._share_acks.setdefault(group_id, {})
                for tp, by_offset in acks.items():
                    held.setdefault(tp, set()).update(by_offset)

    def _check_in_transaction(self, call: str) -> None:
        if self._machine.closed or self.state is not State.IN_TRANSACTION:
            raise self._machine.illegal(call)

    async def prepare_transaction(self) -> PreparedTxnState:
        """Flush the bound producers and hold the transaction PREPARED: only commit, abort or
        complete may follow. Client-side only, as KIP-939 has it (no RPC)."""
        self._machine.check("prepare_transaction")
        await self._flush("prepare_transaction")
        async with self._lock:
            self._machine.start("prepare_transaction")
            # A prepared transaction waits for its decision: the coordinator keeps no session
            # for a 2PC producer, and nothing may abort it for want of heartbeats.
            await self._heartbeats.stop()
            self._prepared = PreparedTxnState.of(self._producer_id, self._epoch)
            if not self.config["transaction.two.phase.commit.enable"]:
                log.warning("event=prepared_without_2pc transactional_id=%r state=%r note=%r",
                            self._txn_id, str(self._prepared), "the broker still aborts the "
                            "transaction after transaction.timeout.ms (and, with heartbeats, "
                            "after transaction.session.timeout.ms)")
            return self._prepared

    async def complete_transaction(self, state: PreparedTxnState) -> None:
        """Commit if `state` is this session's prepared transaction, abort it otherwise (KIP-939).
        After initialize(keep_prepared_txn=True) found nothing prepared, this does nothing."""
        if not isinstance(state, PreparedTxnState):
            raise TypeError("complete_transaction takes a PreparedTxnState, e.g. "
                            "PreparedTxnState(text_stored_by_the_coordinator)")
        also = frozenset(({State.IN_TRANSACTION} if self._resumed else set())
                         | ({State.READY} if self._recovered else set()))
        self._machine.check("complete_transaction", also=also)
        if self.state is State.READY:
            return
        current = (self._prepared if self._prepared.has_transaction
                   else PreparedTxnState.of(self._producer_id, self._epoch))
        if state == current:
            await self.commit_transaction()
        else:
            log.info("event=complete_aborts transactional_id=%r prepared=%r given=%r",
                     self._txn_id, str(current), str(state))
            await self.abort_transaction()

    async def commit_transaction(self) -> None:
        self._machine.check("commit_transaction")
        if self.state is State.IN_TRANSACTION:
            await self._flush("commit_transaction")
        async with self._lock:
            self._machine.start("commit_transaction")
            # Before EndTxn: with transaction version 2 it bumps the epoch, and a heartbeat
            # still carrying the old one would be answered PRODUCER_FENCED.
            await self._heartbeats.stop()
            await self._end(commit=True)

    async def abort_transaction(self) -> None:
        self._machine.check("abort_transaction")
        if self.state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
            # Writes in flight must land (or fail) before the markers; their errors are moot.
            with contextlib.suppress(Exception):
                await self._flush_all()
        async with self._lock:
            self._machine.start("abort_transaction")
            await self._heartbeats.stop()
            await self._end(commit=False)

    async def heartbeat(self) -> None:
        """Send one TxnHeartbeat now (KIP-1309): the open transaction's session deadline moves
        on, and the coordinator's error is raised, ProducerFencedError when a newer session (or
        an abort by the coordinator) fenced this one.

        A broker without TxnHeartbeat gets DescribeTransactions for the transactional id
        instead: a read that keeps nothing alive but finds the same fencing. A broker without
        DescribeTransactions either only gets its transaction coordinator looked up."""
        self._machine.check("heartbeat")
        if await self._heartbeats.offered_by(self._coordinator):
            await self._send_heartbeat()
            return
        async with self._lock:
            self._machine.check("heartbeat")
            found = await self._describe()
            if found is None:
                return
            if not self._knows(found.producer_id, found.producer_epoch):
                error = ProducerFencedError(
                    f"transactional id {self._txn_id!r}: the coordinator holds producer id "
                    f"{found.producer_id} epoch {found.producer_epoch} (state "
                    f"{found.transaction_state}), this session has producer id "
                    f"{self._producer_id} epoch {self._epoch}: it was fenced; close it",
                    ErrorCode.producer_fenced)
                self._machine.fail(error)
                raise error

    async def close(self) -> None:
        """Release the connections. An open or prepared transaction is left as it is: a prepared
        one waits for its decision; any other is aborted by the coordinator at its timeout or by
        the next initialize() of the transactional id."""
        if self._machine.closed:
            return
        self._machine.closed = True
        if self._resume_task is not None:
            self._resume_task.cancel()
        try:
            await self._heartbeats.stop()
        finally:  # a close() cancelled while it waits still releases the connections
            self._producers.clear()
            if self._owns_cluster:
                await self._cluster.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- producers ------------------------------------------------------------------------------

    def bind_producer(self, producer: _Flushable) -> None:
        if producer not in self._producers:
            self._producers.append(producer)

    def unbind_producer(self, producer: _Flushable) -> None:
        with contextlib.suppress(ValueError):
            self._producers.remove(producer)

    def record_error(self, exc: Exception) -> None:
        """A bound producer's transactional write failed: the transaction can only be aborted
        (or, if the producer was fenced, the session only closed)."""
        self._machine.fail(write_error(exc, self._txn_id))

    # -- heartbeats (KIP-1309) ------------------------------------------------------------------

    def _transaction_open(self) -> bool:
        return not self._machine.closed and self.state in _HEARTBEAT_STATES

    async def _resume_heartbeats(self) -> None:
        """A resumed session's transaction is open from the start: heartbeat it. The session
        timeout is the one its first session announced (the coordinator keeps it)."""
        if (self._heartbeats.interval_ms and self.state in _HEARTBEAT_STATES
                and await self._heartbeats.offered_by(self._coordinator)):
            self._heartbeats.start()

    async def _send_heartbeat(self) -> None:
        await self._calls.call("TxnHeartbeat", lambda conn: req.txn_heartbeat(self._identity()))

    # -- internals ------------------------------------------------------------------------------

    def _reset_transaction(self) -> None:
        self._partitions.clear()
        self._offset_groups.clear()
        self._share_acks = {}
        self._started = self._resumed = self._recovered = False
        self._prepared = PreparedTxnState()

    def _identity(self) -> req.Identity:
        return req.Identity(self._txn_id, self._producer_id, self._epoch)

    def _knows(self, producer_id: int, epoch: int) -> bool:
        if (producer_id, epoch) == (self._producer_id, self._epoch):
            return True
        if self._prepared.has_transaction and (producer_id, epoch) == (
                self._prepared.producer_id, self._prepared.epoch):
            return True  # KIP-939: the coordinator shows the prepared transaction's identity
        # An EndTxn v5 that timed out may have bumped the epoch already.
        return (self.state in (State.COMMITTING, State.ABORTING) and bool(self._calls.tv2)
                and producer_id == self._producer_id and epoch == self._epoch + 1)

    async def _describe(self) -> Any | None:
        """The coordinator's DescribeTransactions entry for this transactional id (None if the
        broker does not offer DescribeTransactions)."""
        conn = await self._coordinator()
        if not conn.supports(ApiKey.DESCRIBE_TRANSACTIONS):
            return None
        response = await self._calls.call(
            "DescribeTransactions", lambda c: req.describe_transaction(c, self._txn_id),
            lambda r: r.transaction_states[0].error_code)
        return response.transaction_states[0]

    async def _check_nothing_written(self, code: int) -> None:
        """Version 2 commit answered INVALID_TXN_STATE: fine if no write of this transaction
        reached a broker (partitions were named but nothing produced), so the coordinator is
        idle with this very identity; otherwise the fatal error it is."""
        found = await self._describe()
        state = None if found is None else TransactionState.parse(found.transaction_state)
        if (found is not None and state is not None and state.is_idle
                and (found.producer_id, found.producer_epoch) == (self._producer_id, self._epoch)):
            log.info("event=empty_commit transactional_id=%r producer_id=%d epoch=%d",
                     self._txn_id, self._producer_id, self._epoch)
            return
        error = error_for(code, "EndTxn", transactional_id=self._txn_id,
                          producer_id=self._producer_id, epoch=self._epoch, resumed=self._resumed,
                          tv2=bool(self._calls.tv2))
        self._machine.fail(error)
        raise error

    async def _flush_all(self) -> None:
        for producer in list(self._producers):
            await producer.flush()

    async def _flush(self, call: str) -> None:
        try:
            await self._flush_all()
        except Exception as exc:
            error = exc if isinstance(exc, TransactionError) else TransactionAbortableError(
                f"{call}: a write of transactional id {self._txn_id!r} failed ({exc}); abort the "
                "transaction", exc.code if isinstance(exc, KafkaError) else -1)
            self._machine.fail(error)
            raise error from exc
        self._machine.check(call)  # a producer may have reported an error meanwhile

    async def _coordinator(self) -> BrokerConnection:
        return await self._calls.reach()

    async def _add_partitions(self, new: set[TopicPartition]) -> None:
        pending = set(new)
        await self._calls.call(
            "AddPartitionsToTxn", lambda conn: req.add_partitions(conn, self._identity(), pending),
            lambda response: req.add_partitions_error(response, pending, self._resumed))

    async def _txn_offset_commit(self, pending: req.PendingOffsets, group: Any) -> None:
        max_version = None if self._calls.tv2 else 4
        await self._calls.call(
            "TxnOffsetCommit", lambda conn: req.txn_offset_commit(
                conn, self._identity(), pending, group, max_version),
            lambda response: req.txn_offset_commit_error(response, pending, self._resumed),
            group=group.group_id)

    async def _end(self, *, commit: bool) -> None:
        """EndTxn (the session is COMMITTING or ABORTING), then READY."""
        if self._started:
            if self._calls.tv2 is None:
                await self._coordinator()
            max_version = None if self._calls.tv2 else 4  # EndTxn v5 asks for the KIP-890 bump
            response = await self._calls.call("EndTxn", lambda conn: req.end_txn(
                conn, self._identity(), commit, max_version),
                accept=frozenset({ErrorCode.invalid_txn_state}) if self._calls.tv2 and commit
                else frozenset())
            if response.error_code == ErrorCode.invalid_txn_state:
                await self._check_nothing_written(response.error_code)
            elif self._calls.tv2 and response.producer_id >= 0:
                self._producer_id, self._epoch = response.producer_id, response.producer_epoch
        log.info("event=session_transaction_ended transactional_id=%r committed=%s producer_id=%d "
                 "epoch=%d", self._txn_id, commit, self._producer_id, self._epoch)
        self._machine.finish("ended")
        self._reset_transaction()
