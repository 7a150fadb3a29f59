"""TransactionSession (seed 004): a transaction's identity (transactional id, producer id, epoch)
and lifecycle as a client object of its own, talking to the transaction coordinator only.

Producers bind to a session and write under its identity; the session begins, prepares
(KIP-939), commits and aborts. `resume` takes over a transaction another process began or
prepared, from its producer id and epoch, without InitProducerId (which would abort it).

`AsyncTransactionSession` is the asyncio core; `TransactionSession` the blocking facade with the
same methods, each run on the client's loop thread, except begin_transaction when heartbeats are
off: it sends nothing, so it runs in the caller's thread (issue 19: one thread crossing fewer per
transaction).

Transaction version 2 (KIP-890) is used when the coordinator's broker finalized
`transaction.version` >= 2 and offers EndTxn v5 and Produce v12: the partitions of a transaction
are added by the broker when a Produce v12 reaches them, and each EndTxn bumps the epoch (the
session adopts the producer id and epoch it returns). Otherwise the version-1 protocol is used:
AddPartitionsToTxn (v0-v3) before the first write to a partition, AddOffsetsToTxn before
TxnOffsetCommit (v0-v4), EndTxn v0-v4 without a bump.

Heartbeats (KIP-1309, a draft): with `transaction.heartbeat.interval.ms` or
`transaction.session.timeout.ms` set, `initialize` announces the session timeout (InitProducerId
v7) and a heartbeat task sends TxnHeartbeat every interval while a transaction is open (from
begin_transaction, or resume, to commit/abort/prepare/close). The task runs on the session's
event loop: for the blocking session that is the client's loop thread, so the caller's thread
may compute for as long as it likes; a process that dies or freezes stops heartbeating and the
coordinator aborts its transaction after the session timeout (3 x the interval), long before
`transaction.timeout.ms`. A broker without TxnHeartbeat gets no heartbeats (a debug log says
so) and `heartbeat()` checks the identity with DescribeTransactions instead.

Share acknowledgements (KIP-1289, a draft): `add_share_acks_to_transaction` stages a share
consumer's acknowledgements in the open transaction (AddOffsetsToTxn with the group's id, then
TxnShareAcknowledge to each share-partition's leader; see
exactly.protocol.drafts.txn_share_acknowledge): the commit accepts (or rejects) the records, an
abort releases them for redelivery. A broker without TxnShareAcknowledge gets
UnsupportedVersionError naming KIP-1289, before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from exactly.client._loop import Blocking, LoopThread, stop_tasks
from exactly.client.cluster import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    Cluster,
    make_request,
    request_module,
)
from exactly.client.config import ClientConfig, as_config
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    AuthenticationError,
    ConfigError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionError,
    UnsupportedVersionError,
)
from exactly.client.prepared import PreparedTxnState
from exactly.client.session_state import (
    Kind,
    SessionStateMachine,
    State,
    classify,
    error_for,
    first_error,
    heartbeat_timing,
)
from exactly.client.share_consumer import ShareAcknowledgements, ack_batches
from exactly.protocol import fast_requests
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.drafts import txn_share_acknowledge as _tsa
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition

log = logging.getLogger("exactly.client")

__all__ = ["AsyncTransactionSession", "ConsumerGroupMetadata", "PreparedTxnState", "State",
           "TransactionSession"]

T = TypeVar("T")
Offsets = Mapping[tuple[str, int], int | tuple[int, str | None]]  # (topic, partition) keys
_MAX_EPOCH = 32767
_IDLE = ("Empty", "CompleteCommit", "CompleteAbort")
_FENCED_CODES = (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)
# The states in which a transaction is open and the heartbeat task runs.
_HEARTBEAT_STATES = frozenset({State.IN_TRANSACTION, State.ABORTABLE_ERROR})


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What TxnOffsetCommit needs of a consumer's group membership (Consumer.group_metadata())."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class _Flushable(Protocol):
    async def flush(self) -> None: ...


def _offers_transaction_v2(conn: BrokerConnection) -> bool:
    return (conn.finalized_features.get("transaction.version", 0) >= 2
            and conn.broker_max_version(ApiKey.END_TXN) >= 5
            and conn.broker_max_version(ApiKey.PRODUCE) >= 12)


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
        self._tv2: bool | None = None
        self._producers: list[_Flushable] = []
        self._lock = asyncio.Lock()
        self._heartbeat_ms, self._session_ms = heartbeat_timing(
            self.config["transaction.heartbeat.interval.ms"],
            self.config["transaction.session.timeout.ms"])
        self._heartbeats_offered: bool | None = None  # the coordinator takes TxnHeartbeat
        self._heartbeat_task: asyncio.Task[None] | None = None
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
        if session._heartbeat_ms:
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
        return self._heartbeat_ms

    @property
    def session_timeout_ms(self) -> int:
        """KIP-1309: after this long without a heartbeat the coordinator aborts the open
        transaction; -1 when heartbeats are off."""
        return self._session_ms

    @property
    def heartbeating(self) -> bool:
        """A heartbeat task is running (a transaction is open and the broker takes them)."""
        return self._heartbeat_task is not None and not self._heartbeat_task.done()

    @property
    def uses_transaction_v2(self) -> bool:
        """Produce with v12 and let the broker add partitions. Known once the coordinator was
        reached: after initialize(), or after the first ensure_partitions() of a resumed session."""
        return bool(self._tv2)

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
            timeout = datetime.timedelta(milliseconds=self.config["transaction.timeout.ms"])
            fields: dict[str, Any] = {
                "transactional_id": self._txn_id, "transaction_timeout": timeout,
                "producer_id": -1, "producer_epoch": -1, "enable2_pc": two_pc,
                "keep_prepared_txn": keep_prepared_txn}
            if self._heartbeat_ms and await self._offers_heartbeats():
                # KIP-1309's draft v7, only for a session that asked for heartbeats: beyond
                # the versions the client negotiates for everything else (client/versions.py).
                announce = build(request_class(ApiKey.INIT_PRODUCER_ID, 7), **fields,
                                 transaction_session_timeout_ms=self._session_ms)
                response = await self._call("InitProducerId", lambda conn: announce)
            else:
                response = await self._call("InitProducerId", lambda conn: make_request(
                    conn, ApiKey.INIT_PRODUCER_ID, **fields))
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
                     self._epoch, 2 if self._tv2 else 1, str(self._prepared))

    async def begin_transaction(self) -> None:
        """Start a transaction (client-side: the coordinator learns of it with the first write)."""
        self._begin_locally()
        if self._heartbeat_ms and await self._offers_heartbeats():
            self._start_heartbeats()

    def _begin_locally(self) -> None:
        """begin_transaction's part that sends nothing."""
        self._machine.start("begin_transaction")
        self._reset_transaction()

    def begin_from_thread(self, loop: LoopThread) -> None:
        """begin_transaction for the blocking classes: with heartbeats off it sends nothing
        and starts no task, so it runs in the caller's thread, without a trip to the loop."""
        if self._heartbeat_ms:
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
        flush sends at once then, issue 19): True if the partitions are in the open transaction
        already, or it uses version 2 (the Produce adds them; they are recorded here). False
        when ensure_partitions must run: AddPartitionsToTxn to send, the version not known yet,
        another call under way, or no transaction open (it then raises the error)."""
        if self._machine.closed or self.state is not State.IN_TRANSACTION:
            return False
        wanted = {TopicPartition(str(t), int(p)) for t, p in partitions}
        if wanted <= self._partitions:
            return True
        if not self._tv2 or self._lock.locked():
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
            if self._tv2 is None:
                await self._coordinator()
            if not self._tv2:
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
            if self._tv2 is None:
                await self._coordinator()
            if not self._tv2 and group.group_id not in self._offset_groups:
                await self._call("AddOffsetsToTxn", lambda conn: make_request(
                    conn, ApiKey.ADD_OFFSETS_TO_TXN, transactional_id=self._txn_id,
                    producer_id=self._producer_id, producer_epoch=self._epoch,
                    group_id=group.group_id))
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
        """KIP-1289 (a draft; seed 004 §2.1): a share consumer's acknowledgements join the open
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
            targets = await self._share_ack_targets(acknowledgments)
            if self._tv2 is None:
                await self._coordinator()
            if group_id not in self._offset_groups:
                await self._call("AddOffsetsToTxn", lambda conn: make_request(
                    conn, ApiKey.ADD_OFFSETS_TO_TXN, transactional_id=self._txn_id,
                    producer_id=self._producer_id, producer_epoch=self._epoch,
                    group_id=group_id))
                self._offset_groups.add(group_id)
            self._started = True
            for conn, acks in targets:
                await self._txn_share_acknowledge(conn, acknowledgments, acks)
                held = self._share_acks.setdefault(group_id, {})
                for tp, by_offset in acks.items():
                    held.setdefault(tp, set()).update(by_offset)

    def _check_in_transaction(self, call: str) -> None:
        if self._machine.closed or self.state is not State.IN_TRANSACTION:
            raise self._machine.illegal(call)

    async def _share_ack_targets(self, acknowledgments: ShareAcknowledgements
                                 ) -> list[tuple[BrokerConnection, dict[TopicPartition, Any]]]:
        """The leaders of the acknowledged partitions, each with its part; UnsupportedVersionError
        if one of them does not offer TxnShareAcknowledge."""
        by_node: dict[int, dict[TopicPartition, Any]] = {}
        for tp, by_offset in acknowledgments.acks.items():
            md = await self._cluster.topic(tp.topic, allow_auto_create=False)
            by_node.setdefault(md.partitions.get(tp.partition, -1), {})[tp] = by_offset
        out = []
        for node_id, acks in by_node.items():
            if node_id < 0:
                raise KafkaError(f"add_share_acks_to_transaction: {sorted(acks)} have no leader; "
                                 "retry", ErrorCode.leader_not_available)
            conn = await self._cluster.connection(node_id)
            if not conn.supports(ApiKey.TXN_SHARE_ACKNOWLEDGE):
                raise UnsupportedVersionError(
                    f"broker {conn.host}:{conn.port} does not offer TxnShareAcknowledge (KIP-1289, "
                    "transactional acknowledgements for share groups): share acknowledgements "
                    "cannot join a transaction there. Acknowledge with the share consumer's own "
                    "commit instead (at least once), or use a broker that implements KIP-1289")
            out.append((conn, acks))
        return out

    async def _txn_share_acknowledge(self, conn: BrokerConnection,
                                     acknowledgments: ShareAcknowledgements,
                                     acks: Mapping[TopicPartition, Mapping[int, int]]) -> None:
        topic_ids = {tp.topic: (await self._cluster.topic(tp.topic)).topic_id for tp in acks}
        by_topic: dict[str, list[Any]] = {}
        for tp in sorted(acks):
            by_topic.setdefault(tp.topic, []).append(build(
                _tsa.TxnShareAcknowledgePartition, partition_index=tp.partition,
                acknowledgement_batches=tuple(
                    build(_tsa.TxnShareAcknowledgeBatch, first_offset=f, last_offset=last,
                          acknowledge_types=types)
                    for f, last, types in ack_batches(acks[tp]))))
        group = acknowledgments.group
        request = build(
            _tsa.TxnShareAcknowledgeRequest, transactional_id=self._txn_id,
            group_id=group.group_id, producer_id=self._producer_id, producer_epoch=self._epoch,
            member_id=group.member_id, member_epoch=group.member_epoch,
            topics=tuple(build(_tsa.TxnShareAcknowledgeTopic, topic_id=topic_ids[t],
                               partitions=tuple(ps)) for t, ps in by_topic.items()))
        response = await conn.send(request)
        codes = [(None, response.error_code)] + [
            (p.partition_index, p.error_code) for t in response.responses for p in t.partitions]
        failed = [(p, c) for p, c in codes if c != ErrorCode.none]
        if not failed:
            return
        partition, code = failed[0]
        kind = classify(code, "TxnShareAcknowledge")
        error: TransactionError
        if kind in (Kind.FENCED, Kind.FATAL) and code in _FENCED_CODES:
            error = error_for(code, "TxnShareAcknowledge", transactional_id=self._txn_id,
                              producer_id=self._producer_id, epoch=self._epoch)
        else:  # the member's records could not be staged: this transaction cannot commit them
            error = TransactionAbortableError(
                f"TxnShareAcknowledge for group {group.group_id!r}"
                f"{'' if partition is None else f' partition {partition}'} refused: "
                f"{error_name(code)}; abort the transaction (the records are redelivered)", code)
        self._machine.fail(error)
        raise error

    async def prepare_transaction(self) -> PreparedTxnState:
        """Flush the bound producers and hold the transaction PREPARED: only commit, abort or
        complete may follow. Client-side only, as KIP-939 has it (no RPC)."""
        self._machine.check("prepare_transaction")
        await self._flush("prepare_transaction")
        async with self._lock:
            self._machine.start("prepare_transaction")
            # A prepared transaction waits for its decision: the coordinator keeps no session
            # for a 2PC producer, and nothing may abort it for want of heartbeats.
            await self._stop_heartbeats()
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
            await self._stop_heartbeats()
            await self._end(commit=True)

    async def abort_transaction(self) -> None:
        self._machine.check("abort_transaction")
        if self.state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR):
            # Writes in flight must land (or fail) before the markers; their errors are moot.
            with contextlib.suppress(Exception):
                await self._flush_all()
        async with self._lock:
            self._machine.start("abort_transaction")
            await self._stop_heartbeats()
            await self._end(commit=False)

    async def heartbeat(self) -> None:
        """Send one TxnHeartbeat now (KIP-1309): the open transaction's session deadline moves
        on, and the coordinator's error is raised, ProducerFencedError when a newer session (or
        an abort by the coordinator) fenced this one.

        A broker without TxnHeartbeat gets DescribeTransactions for the transactional id
        instead: a read that keeps nothing alive but finds the same fencing. A broker without
        DescribeTransactions either only gets its transaction coordinator looked up."""
        self._machine.check("heartbeat")
        if await self._offers_heartbeats():
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
            await self._stop_heartbeats()
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
        code = exc.code if isinstance(exc, KafkaError) else -1
        error: TransactionError
        if isinstance(exc, TransactionError):
            error = exc
        elif code in _FENCED_CODES:
            error = ProducerFencedError(f"transactional id {self._txn_id!r}: a write was fenced "
                                        f"({error_name(code)}): close this session", code)
        else:
            error = TransactionAbortableError(f"transactional id {self._txn_id!r}: a transactional "
                                              f"write failed ({exc}); abort the transaction", code)
        self._machine.fail(error)

    # -- heartbeats (KIP-1309) ------------------------------------------------------------------

    async def _offers_heartbeats(self) -> bool:
        """Does the transaction coordinator take TxnHeartbeat and InitProducerId v7? Asked once;
        a no is logged (debug) when heartbeats were configured."""
        if self._heartbeats_offered is None:
            conn = await self._coordinator()
            self._heartbeats_offered = (conn.broker_max_version(ApiKey.TXN_HEARTBEAT) >= 0
                                        and conn.broker_max_version(ApiKey.INIT_PRODUCER_ID) >= 7)
            if not self._heartbeats_offered and self._heartbeat_ms:
                log.debug("event=session_heartbeats_off transactional_id=%r broker=%s:%d "
                          "reason=%r", self._txn_id, conn.host, conn.port,
                          "the broker has no TxnHeartbeat (KIP-1309): an abandoned transaction "
                          "is aborted at transaction.timeout.ms only")
        return self._heartbeats_offered

    async def _resume_heartbeats(self) -> None:
        """A resumed session's transaction is open from the start: heartbeat it. The session
        timeout is the one its first session announced (the coordinator keeps it)."""
        if (self._heartbeat_ms and self.state in _HEARTBEAT_STATES
                and await self._offers_heartbeats()):
            self._start_heartbeats()

    def _start_heartbeats(self) -> None:
        if not self.heartbeating:
            self._heartbeat_task = asyncio.create_task(self._heartbeat_loop())
            log.debug("event=session_heartbeats_started transactional_id=%r interval_ms=%d "
                      "session_timeout_ms=%d", self._txn_id, self._heartbeat_ms, self._session_ms)

    async def _stop_heartbeats(self) -> None:
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is None:
            return
        await stop_tasks([task])
        log.debug("event=session_heartbeats_stopped transactional_id=%r", self._txn_id)

    async def _heartbeat_loop(self) -> None:
        """Every interval while the transaction is open: one TxnHeartbeat. A fenced or fatal
        answer ends the loop (the session's next call raises it); a coordinator that does not
        answer within request.timeout.ms is tried again at the next interval."""
        while True:
            await asyncio.sleep(self._heartbeat_ms / 1000)
            if self._machine.closed or self.state not in _HEARTBEAT_STATES:
                return
            try:
                await self._send_heartbeat()
            except KafkaTimeoutError as exc:
                log.warning("event=session_heartbeat_failed transactional_id=%r error=%r",
                            self._txn_id, str(exc))
            except KafkaError as exc:
                log.warning("event=session_heartbeat_stopped transactional_id=%r error=%r",
                            self._txn_id, str(exc))
                return

    async def _send_heartbeat(self) -> None:
        # TxnHeartbeat v0 (a draft) is built as it is, not negotiated: see _offers_heartbeats.
        await self._call("TxnHeartbeat", lambda conn: build(
            request_class(ApiKey.TXN_HEARTBEAT, 0), transactional_id=self._txn_id,
            producer_id=self._producer_id, producer_epoch=self._epoch))

    # -- internals ------------------------------------------------------------------------------

    def _reset_transaction(self) -> None:
        self._partitions.clear()
        self._offset_groups.clear()
        self._share_acks = {}
        self._started = self._resumed = self._recovered = False
        self._prepared = PreparedTxnState()

    def _knows(self, producer_id: int, epoch: int) -> bool:
        if (producer_id, epoch) == (self._producer_id, self._epoch):
            return True
        if self._prepared.has_transaction and (producer_id, epoch) == (
                self._prepared.producer_id, self._prepared.epoch):
            return True  # KIP-939: the coordinator shows the prepared transaction's identity
        # An EndTxn v5 that timed out may have bumped the epoch already.
        return (self.state in (State.COMMITTING, State.ABORTING) and bool(self._tv2)
                and producer_id == self._producer_id and epoch == self._epoch + 1)

    async def _describe(self) -> Any | None:
        """The coordinator's DescribeTransactions entry for this transactional id (None if the
        broker does not offer DescribeTransactions)."""
        conn = await self._coordinator()
        if not conn.supports(ApiKey.DESCRIBE_TRANSACTIONS):
            return None
        response = await self._call("DescribeTransactions", lambda c: make_request(
            c, ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(self._txn_id,)),
            lambda r: r.transaction_states[0].error_code)
        return response.transaction_states[0]

    async def _check_nothing_written(self, code: int) -> None:
        """Version 2 commit answered INVALID_TXN_STATE: fine if no write of this transaction
        reached a broker (partitions were named but nothing produced), so the coordinator is
        idle with this very identity; otherwise the fatal error it is."""
        found = await self._describe()
        if (found is not None and found.transaction_state in _IDLE
                and (found.producer_id, found.producer_epoch) == (self._producer_id, self._epoch)):
            log.info("event=empty_commit transactional_id=%r producer_id=%d epoch=%d",
                     self._txn_id, self._producer_id, self._epoch)
            return
        error = error_for(code, "EndTxn", transactional_id=self._txn_id,
                          producer_id=self._producer_id, epoch=self._epoch, resumed=self._resumed,
                          tv2=bool(self._tv2))
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
        conn = await self._cluster.coordinator(COORDINATOR_TRANSACTION, self._txn_id)
        if self._tv2 is None:
            self._tv2 = _offers_transaction_v2(conn)
        return conn

    async def _call(self, api: str, request: Callable[[BrokerConnection], Any],
                    error_of: Callable[[Any], int] = lambda r: int(r.error_code), *,
                    group: str | None = None, accept: frozenset[int] = frozenset()) -> Any:
        """Send a request to the transaction (or `group`'s) coordinator until it succeeds,
        retrying retriable errors with backoff until request.timeout.ms; raise a final error
        as the session exception it stands for (after moving the state machine). A code in
        `accept` is returned to the caller with the response."""
        timeout_ms = self.config["request.timeout.ms"]
        deadline = time.monotonic() + timeout_ms / 1000
        backoff = max(self.config["retry.backoff.ms"], 1) / 1000
        key_type, key = (COORDINATOR_GROUP, group) if group else (COORDINATOR_TRANSACTION, self._txn_id)
        while True:
            last: str
            try:
                conn = await (self._coordinator() if group is None
                              else self._cluster.coordinator(key_type, key))
                remaining = max(deadline - time.monotonic(), 0.001)
                response = await conn.send(request(conn), timeout=remaining)
                code = error_of(response)
                kind = classify(code, api, resumed=self._resumed, tv2=bool(self._tv2))
                last = ""  # error_name(code), when it is needed
            except KafkaTimeoutError:
                raise KafkaTimeoutError(f"transactional id {self._txn_id!r}: {api} got no answer "
                                        f"within request.timeout.ms={timeout_ms}; call again to "
                                        "retry") from None
            except KafkaConnectionError as exc:
                code, kind, last = -1, Kind.REDISCOVER, str(exc)
            except AuthenticationError as exc:  # TLS/SASL refused: retrying cannot help
                self._machine.fail(exc)
                raise
            except KafkaError as exc:  # FindCoordinator answered an error
                code = exc.code
                kind = classify(code, api, resumed=self._resumed, tv2=bool(self._tv2))
                last = str(exc)
            if kind is Kind.NONE or code in accept:
                return response
            if kind in (Kind.RETRY, Kind.REDISCOVER):
                if kind is Kind.REDISCOVER:
                    self._cluster.forget_coordinator(key_type, key)
                if time.monotonic() + backoff > deadline:
                    raise KafkaTimeoutError(
                        f"transactional id {self._txn_id!r}: {api} still failing "
                        f"({last or error_name(code)}) after "
                        f"request.timeout.ms={timeout_ms}; call again to retry", code)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            error = error_for(code, api, transactional_id=self._txn_id,
                              producer_id=self._producer_id, epoch=self._epoch,
                              resumed=self._resumed, tv2=bool(self._tv2))
            self._machine.fail(error)
            raise error

    async def _add_partitions(self, new: set[TopicPartition]) -> None:
        pending = set(new)

        def request(conn: BrokerConnection) -> Any:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(pending):
                by_topic.setdefault(topic, []).append(partition)
            return fast_requests.add_partitions_to_txn(
                conn.version(ApiKey.ADD_PARTITIONS_TO_TXN), self._txn_id, self._producer_id,
                self._epoch, list(by_topic.items()))

        def error_of(response: Any) -> int:
            return first_error({(t.name, p.partition_index): p.partition_error_code
                           for t in response.results_by_topic_v3_and_below
                           for p in t.results_by_partition}, pending, "AddPartitionsToTxn",
                          self._resumed)

        await self._call("AddPartitionsToTxn", request, error_of)

    async def _txn_offset_commit(self, pending: dict[TopicPartition, tuple[int, str | None]],
                                 group: Any) -> None:
        max_version = None if self._tv2 else 4

        def request(conn: BrokerConnection) -> Any:
            module = request_module(conn, ApiKey.TXN_OFFSET_COMMIT, max_version=max_version)
            by_topic: dict[str, list[Any]] = {}
            for (topic, partition), (offset, metadata) in sorted(pending.items()):
                by_topic.setdefault(topic, []).append(build(
                    module.TxnOffsetCommitRequestPartition, partition_index=partition,
                    committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata=metadata))
            return make_request(
                conn, ApiKey.TXN_OFFSET_COMMIT, max_version=max_version,
                transactional_id=self._txn_id, group_id=group.group_id,
                producer_id=self._producer_id, producer_epoch=self._epoch,
                generation_id=getattr(group, "generation_id", -1),
                member_id=getattr(group, "member_id", "") or "",
                group_instance_id=getattr(group, "group_instance_id", None),
                topics=tuple(module.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                             for t, ps in by_topic.items()))

        def error_of(response: Any) -> int:
            return first_error({(t.name, p.partition_index): p.error_code for t in response.topics
                           for p in t.partitions}, pending, "TxnOffsetCommit", self._resumed)

        await self._call("TxnOffsetCommit", request, error_of, group=group.group_id)

    async def _end(self, *, commit: bool) -> None:
        """EndTxn (the session is COMMITTING or ABORTING), then READY."""
        if self._started:
            if self._tv2 is None:
                await self._coordinator()
            max_version = None if self._tv2 else 4  # EndTxn v5 asks for the KIP-890 bump
            response = await self._call("EndTxn", lambda conn: fast_requests.end_txn(
                conn.version(ApiKey.END_TXN, max_version=max_version), self._txn_id,
                self._producer_id, self._epoch, commit),
                accept=frozenset({ErrorCode.invalid_txn_state}) if self._tv2 and commit
                else frozenset())
            if response.error_code == ErrorCode.invalid_txn_state:
                await self._check_nothing_written(response.error_code)
            elif self._tv2 and response.producer_id >= 0:
                self._producer_id, self._epoch = response.producer_id, response.producer_epoch
        log.info("event=session_transaction_ended transactional_id=%r committed=%s producer_id=%d "
                 "epoch=%d", self._txn_id, commit, self._producer_id, self._epoch)
        self._machine.finish("ended")
        self._reset_transaction()


class TransactionSession(Blocking):
    """The blocking TransactionSession: the same methods as AsyncTransactionSession, each run
    on the client's loop thread. `aio` is the asyncio session underneath (bind producers to it).
    One made over an existing `_session` (Producer.transaction_session) is not cleaned up at
    exit on its own: the object that made that session is."""

    def __init__(self, config: ClientConfig | Mapping[str, Any], *,
                 _session: AsyncTransactionSession | None = None) -> None:
        self.aio = _session if _session is not None else AsyncTransactionSession(config)
        self._loop = LoopThread.shared()
        if _session is None:
            self._watch(self.aio.close)

    @classmethod
    def resume(cls, transactional_id: str, producer_id: int, producer_epoch: int,
               config: ClientConfig | Mapping[str, Any]) -> TransactionSession:
        session = cls(config, _session=AsyncTransactionSession.resume(
            transactional_id, producer_id, producer_epoch, config))
        session._watch(session.aio.close)  # it owns the session it resumed
        if session.aio.heartbeat_interval_ms:
            session._run(session.aio._resume_heartbeats())
        return session

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    @property
    def transactional_id(self) -> str:
        return self.aio.transactional_id

    @property
    def producer_id(self) -> int:
        return self.aio.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.aio.producer_epoch

    @property
    def state(self) -> State:
        return self.aio.state

    @property
    def prepared_state(self) -> PreparedTxnState:
        return self.aio.prepared_state

    @property
    def uses_transaction_v2(self) -> bool:
        return self.aio.uses_transaction_v2

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.aio.heartbeat_interval_ms

    @property
    def session_timeout_ms(self) -> int:
        return self.aio.session_timeout_ms

    @property
    def heartbeating(self) -> bool:
        """The heartbeat task is running on the client's loop thread."""
        return self.aio.heartbeating

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

    @property
    def share_acknowledgements(self) -> dict[str, dict[TopicPartition, set[int]]]:
        return self.aio.share_acknowledgements

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

