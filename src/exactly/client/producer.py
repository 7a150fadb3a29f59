"""The Producer: `send` batches records per partition (linger.ms / batch.size), a sender task
ships ready batches to partition leaders, up to max.in.flight requests per broker, and resolves
each batch's records at once.

Idempotence (on by default, with acks=all): the producer gets a producer id (InitProducerId
without a transactional id), numbers each partition's batches, and resends a failed batch with the
same bytes and sequence, so the broker writes it at most once (DUPLICATE_SEQUENCE_NUMBER counts
as success). A resend waits until nothing of its partition is on the wire; batches behind it that
the broker refused as out of order follow it, in sequence order. A batch the broker refused for
good (too large, invalid) gives its sequence numbers back to the batches behind it, as the Java
client does; when the sequence state itself is lost (UNKNOWN_PRODUCER_ID, an out-of-order
answer for the next expected batch, a batch that may have been written but timed out), the
idempotent producer fails what is affected and takes a new producer id, and a transactional one
makes its transaction abortable.

Transactions: with `session=` the producer writes under that TransactionSession (its transaction
methods raise IllegalStateError); with `transactional.id` it owns a session and its methods
(KIP-939 names) delegate to it. Sequences restart at 0 whenever the producer id/epoch changes.

`AsyncProducer` is the asyncio core (`await producer.send(...)` returns a future of
RecordMetadata); `Producer` is the blocking facade, whose `send` appends from the caller's thread
and returns a future with the concurrent.futures.Future interface.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Self

from exactly.client._loop import close_in_order, stop_tasks
from exactly.client.accumulator import RecordAccumulator
from exactly.client.batch import CODECS, RECORD_OVERHEAD_MAX, FutureRecordMetadata, ProducerBatch
from exactly.client.blocking import Blocking
from exactly.client.cluster import Cluster
from exactly.client.config import ClientConfig, as_config
from exactly.client.errors import ConfigError, IllegalStateError, KafkaError
from exactly.client.partitioner import DefaultPartitioner
from exactly.client.prepared import PreparedTxnState
from exactly.client.sender import Sender
from exactly.client.session import AsyncTransactionSession, Offsets, TransactionSession
from exactly.client.session_state import State
from exactly.client.types import ConsumerGroupMetadata, RecordMetadata
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.records import HEADER_SIZE

log = logging.getLogger("exactly.client")
# After a Metadata request that may auto-create a topic answers it unknown: how long to keep
# asking, and how often. The creation may take a moment in Kafka, and on a cluster a topic just
# created is known to the controller first: each broker learns it when its metadata image
# catches up, seconds later on a loaded machine. (Kafka's Java producer waits max.block.ms,
# 60 s by default, before it says a topic is not there.)
AUTO_CREATE_WAIT_S = 10.0
AUTO_CREATE_RETRY_S = 0.05
Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]

__all__ = ["AsyncProducer", "FutureRecordMetadata", "Producer", "RecordMetadata"]


def _as_bytes(value: Any, what: str) -> bytes | None:
    if value is None or value.__class__ is bytes:
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"a record {what} must be bytes, str or None, not {type(value).__name__}")


def _as_headers(headers: Headers | None) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(k), _as_bytes(v, "header value")) for k, v in items]


class AsyncProducer:
    """The asyncio producer. `Producer(config, session=None)` semantics; see the module doc."""

    def __init__(self, config: ClientConfig | Mapping[str, Any],
                 session: AsyncTransactionSession | TransactionSession | None = None) -> None:
        self.config = as_config(config)
        cfg = self.config
        if isinstance(session, TransactionSession):
            session = session.aio  # a blocking TransactionSession: use its core
        self._session = session
        self._owns_session = False
        if session is None and cfg["transactional.id"]:
            self._session = AsyncTransactionSession(cfg)
            self._owns_session = True
        self._acks: int = cfg["acks"]
        if self._session is not None and self._acks != -1:
            raise ConfigError("a transactional producer needs acks=all")
        self._idempotent = self._session is not None or (cfg["enable.idempotence"]
                                                         and self._acks == -1)
        self._max_request_size: int = cfg["max.request.size"]
        self._max_record_size = self._max_request_size - HEADER_SIZE - RECORD_OVERHEAD_MAX
        self._refuse: BaseException | None = None  # why send() fails now (closed, fatal)
        self._buffer_memory: int = cfg["buffer.memory"]
        self._cluster = Cluster(cfg)
        self._partitioner = DefaultPartitioner()
        self._partitions: dict[str, int] = {}  # topic -> partition count
        # Cluster.any_connection is not guarded: two first uses at once would each open a
        # bootstrap connection and leak one. The producer's first uses take turns.
        self._bootstrap_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._wake_event = asyncio.Event()
        self._space_freed = asyncio.Event()
        self._yield = False
        self._acc = RecordAccumulator(
            batch_size=cfg["batch.size"], linger_ms=cfg["linger.ms"],
            codec=CODECS[cfg["compression.type"]], buffer_memory=self._buffer_memory,
            wake=self._wake, clock=time.monotonic, wake_at=self._wake_at)
        self._acc.transactional = self._session is not None
        self._sender = Sender(
            self._cluster, accumulator=self._acc, config=cfg, session=self._session,
            idempotent=self._idempotent, partition_counts=self._partitions,
            bootstrap_lock=self._bootstrap_lock, wake_event=self._wake_event, wake=self._wake,
            space_freed=self._space_freed, on_fatal=self._stop_sending)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        if self._session is not None:
            self._session.bind_producer(self)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the sender (send() does it on first use)."""
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._task = asyncio.create_task(self._sender.run(), name="exactly-producer-sender")

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until each of it is acknowledged or failed."""
        with self._acc.lock:
            pending = list(self._acc.incomplete)
        if not pending:
            return
        await self.start()
        self._acc.flushing += 1
        try:
            if timeout is None and await self._sender.send_now():
                if all(b.done for b in pending):
                    return  # sent and answered right here
            else:
                self._wake()
            await self._all_done(pending, timeout)
        finally:
            self._acc.flushing -= 1

    @staticmethod
    async def _all_done(batches: list[ProducerBatch], timeout: float | None) -> None:
        """Wait until every batch is done (or `timeout` passes): one future for the lot, set
        by the last batch's completion itself, not a callback per batch through the loop as
        asyncio.wait adds."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        left = len(batches)

        def landed() -> None:
            nonlocal left
            left -= 1
            if not left and not done.done():
                done.set_result(None)
        for batch in batches:
            batch.when_done(landed)
        if timeout is None:
            await done
        else:
            await asyncio.wait([done], timeout=timeout)

    async def close(self, timeout: float | None = None) -> None:
        """Flush, then stop; records not acknowledged by then fail."""
        if self._closed:
            return
        try:
            if self._task is not None:
                await self.flush(timeout)
        finally:
            self._closed = True
            self._refuse = IllegalStateError("send() on a closed producer")
            await self._sender.stop(KafkaError("the producer was closed before this record "
                                               "was acknowledged"))
            await close_in_order(lambda: stop_tasks([self._task]), self._leave_session,
                                 self._cluster.close)

    async def _leave_session(self) -> None:
        if self._session is not None:
            self._session.unbind_producer(self)
            if self._owns_session:
                await self._session.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- sending ------------------------------------------------------------------------------

    async def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
                   partition: int | None = None, headers: Headers | None = None,
                   timestamp: int | None = None) -> FutureRecordMetadata:
        """Queue a record; returns a future of its RecordMetadata (await it, or `result()` it
        from another thread). Waits only for the topic's metadata and for buffer space."""
        if self._task is None:
            await self.start()
        future = self._append(topic, value, key, partition, headers, timestamp)
        if future is None:
            await self._load_topic(topic)
            future = self._append(topic, value, key, partition, headers, timestamp)
            assert future is not None
        if self._acc.buffered >= self._buffer_memory:
            await self.wait_for_space()
        elif self._yield:
            self._yield = False
            await asyncio.sleep(0)  # a batch was started or filled: let the sender run
        return future

    async def send_and_wait(self, topic: str, value: bytes | str | None,
                            key: bytes | str | None = None, **kwargs: Any) -> RecordMetadata:
        future = await self.send(topic, value, key, **kwargs)
        return await future

    def _append(self, topic: str, value: Any, key: Any, partition: int | None,
                headers: Headers | None, timestamp: int | None) -> FutureRecordMetadata | None:
        """The hot path; None if the topic's metadata is needed first. Runs on the loop, or on
        another thread holding the accumulator's lock (the blocking Producer)."""
        if self._refuse is not None:
            raise self._refuse
        session = self._session
        if session is not None and session.state is not State.IN_TRANSACTION:
            raise IllegalStateError(f"send() needs an open transaction, the session of "
                                    f"{session.transactional_id!r} is {session.state}: "
                                    "call begin_transaction() first")
        count = self._partitions.get(topic)
        if count is None:
            return None
        if value.__class__ is not bytes:
            value = _as_bytes(value, "value")
        size = len(value) if value is not None else 0
        if key is not None:
            if key.__class__ is not bytes:
                key = _as_bytes(key, "key")
            size += len(key)
        hdrs = None
        if headers:
            hdrs = _as_headers(headers)
            size += sum(len(k) + len(v or b"") + 10 for k, v in hdrs or ())
        if size > self._max_record_size:
            raise KafkaError(f"a record of about {size + RECORD_OVERHEAD_MAX} bytes for "
                             f"{topic!r} is larger than max.request.size "
                             f"({self._max_request_size}); raise max.request.size (and the "
                             "topic's max.message.bytes)", ErrorCode.message_too_large)
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        if partition is not None:
            if not 0 <= partition < count:
                raise KafkaError(f"partition {partition} of {topic!r} does not exist "
                                 f"(it has {count})", ErrorCode.unknown_topic_or_partition)
        elif key is not None:
            partition = self._partitioner.partition(key, count)
        else:
            partition = self._partitioner.sticky(topic, count)
            future = self._acc.append(topic, partition, timestamp, key, value, hdrs,
                                      new_batch=False)
            if future is not None:
                return future
            partition = self._partitioner.next_sticky(topic, count, partition)
        return self._acc.append(topic, partition, timestamp, key, value, hdrs)

    async def _load_topic(self, topic: str) -> int:
        """The partition count of `topic`, from metadata (waiting for leaders of a new topic)."""
        deadline = time.monotonic() + self.config["request.timeout.ms"] / 1000
        # A broker that auto-creates the topic answers the request that creates it with
        # UNKNOWN_TOPIC_OR_PARTITION (Kafka 4 in KRaft mode, and Exactly as it): it exists on
        # the next ask. Still unknown after this long, the broker did not create it.
        unknown_until = time.monotonic() + AUTO_CREATE_WAIT_S
        while True:
            try:
                async with self._bootstrap_lock:
                    md = await self._cluster.topic(topic, allow_auto_create=True)
            except KafkaError as exc:
                if (exc.code == ErrorCode.unknown_topic_or_partition
                        and time.monotonic() < min(unknown_until, deadline)):
                    await asyncio.sleep(AUTO_CREATE_RETRY_S)
                    continue
                if exc.code == ErrorCode.unknown_topic_or_partition:
                    raise KafkaError(f"topic {topic!r} does not exist and the broker did not "
                                     "create it (auto.create.topics.enable is off): create it "
                                     "first", exc.code) from None
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                md = None
            if md is not None and md.partitions and len(md.partitions) == max(md.partitions) + 1:
                self._partitions[topic] = len(md.partitions)
                return len(md.partitions)
            if time.monotonic() > deadline:
                raise KafkaError(f"topic {topic!r} has no usable metadata "
                                 f"({error_name(md.error) if md else 'no answer'})",
                                 ErrorCode.leader_not_available)
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)

    async def partitions_for(self, topic: str) -> list[int]:
        count = self._partitions.get(topic)
        if count is None:
            count = await self._load_topic(topic)
        return list(range(count))

    async def wait_for_space(self) -> None:
        """Wait until the buffered batches are below buffer.memory."""
        while self._acc.buffered >= self._buffer_memory and not self._closed:
            self._space_freed.clear()
            self._wake()
            await self._space_freed.wait()

    def _stop_sending(self, error: KafkaError) -> None:
        """The sender met an error no retry can clear: send() raises it from now on."""
        self._refuse = error

    def _wake(self) -> None:
        """Tell the sender to look at the queues (callable from any thread)."""
        self._yield = True
        if self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake_event.set()
        else:
            self._loop.call_soon_threadsafe(self._wake_event.set)

    def _wake_at(self, due: float) -> None:
        """A new batch lingers until `due` (time.monotonic()): the sender need not look before
        (callable from any thread). No trip to the loop at all when the sender is due to look
        by then anyway (the blocking send() of a transaction after the first).

        With transaction version 1 the asyncio producer's sender looks now: it adds the
        partition to the transaction (AddPartitionsToTxn) while the caller goes on to commit.
        The blocking send() does not wake the loop thread for it: the commit's flush sends it
        (Sender.send_now) in the same trip to the loop, or the linger timer's step does; a
        1-record transaction then crosses to the loop thread once, not twice."""
        loop = self._loop
        on_loop = threading.get_ident() == self._loop_thread
        session = self._session
        if on_loop and session is not None and not session.uses_transaction_v2:
            self._wake()
            return
        if loop is None or self._sender.looks_by(due):
            return
        if on_loop:
            self._sender.wake_at(due)
        else:
            loop.call_soon_threadsafe(self._sender.wake_at, due)

    # -- transactions -------------------------------------------------------------------------

    @property
    def transaction_session(self) -> AsyncTransactionSession | None:
        """The session this producer writes under (its own or the one given); None if none."""
        return self._session

    def _own(self, call: str) -> AsyncTransactionSession:
        if self._session is None:
            raise IllegalStateError(f"{call}() needs a transactional producer: set "
                                    "transactional.id, or give the producer a TransactionSession")
        if not self._owns_session:
            raise IllegalStateError(
                f"{call}(): this producer writes under an external TransactionSession "
                f"({self._session.transactional_id!r}), whose owner runs its transactions; "
                "call the session's methods instead")
        return self._session

    async def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        await self._own("init_transactions").initialize(keep_prepared_txn=keep_prepared_txn)

    async def begin_transaction(self) -> None:
        await self._own("begin_transaction").begin_transaction()

    async def prepare_transaction(self) -> PreparedTxnState:
        return await self._own("prepare_transaction").prepare_transaction()

    async def complete_transaction(self, state: PreparedTxnState) -> None:
        await self._own("complete_transaction").complete_transaction(state)

    async def commit_transaction(self) -> None:
        await self._own("commit_transaction").commit_transaction()

    async def abort_transaction(self) -> None:
        await self._own("abort_transaction").abort_transaction()

    async def send_offsets_to_transaction(self, offsets: Offsets,
                                          group_metadata: ConsumerGroupMetadata | str | Any
                                          ) -> None:
        await self._own("send_offsets_to_transaction").send_offsets_to_transaction(
            offsets, group_metadata)


class Producer(Blocking[AsyncProducer]):
    """The blocking producer: AsyncProducer's methods, run on the client's loop thread.
    `send` appends from the calling thread (no loop round trip) and returns a future with the
    concurrent.futures.Future interface (`result(timeout)`, `add_done_callback`, ...)."""

    def __init__(self, config: ClientConfig | Mapping[str, Any],
                 session: TransactionSession | AsyncTransactionSession | None = None) -> None:
        self._external = session
        self._start(self._create(config, session))

    @staticmethod
    async def _create(config: ClientConfig | Mapping[str, Any],
                      session: TransactionSession | AsyncTransactionSession | None
                      ) -> AsyncProducer:
        producer = AsyncProducer(config, session)
        await producer.start()
        return producer

    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             partition: int | None = None, headers: Headers | None = None,
             timestamp: int | None = None) -> FutureRecordMetadata:
        aio = self.aio
        with aio._acc.lock:
            future = aio._append(topic, value, key, partition, headers, timestamp)
        if future is None:
            self._run(aio.start())
            self._run(aio._load_topic(topic))
            with aio._acc.lock:
                future = aio._append(topic, value, key, partition, headers, timestamp)
            assert future is not None
        if aio._acc.buffered >= aio._buffer_memory:
            self._run(aio.wait_for_space())
        return future

    def flush(self, timeout: float | None = None) -> None:
        self._run(self.aio.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        self._close(self.aio.close(timeout))

    def partitions_for(self, topic: str) -> list[int]:
        return self._run(self.aio.partitions_for(topic))

    @property
    def transaction_session(self) -> TransactionSession | AsyncTransactionSession | None:
        """The session this producer writes under: the one it was given, else a blocking
        TransactionSession over its own; None if none."""
        if self._external is not None:
            return self._external
        if self.aio.transaction_session is None:
            return None
        return TransactionSession(self.aio.config, _session=self.aio.transaction_session)

    def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        self._run(self.aio.init_transactions(keep_prepared_txn))

    def begin_transaction(self) -> None:
        self.aio._own("begin_transaction").begin_from_thread(self._loop)

    def prepare_transaction(self) -> PreparedTxnState:
        return self._run(self.aio.prepare_transaction())

    def complete_transaction(self, state: PreparedTxnState) -> None:
        self._run(self.aio.complete_transaction(state))

    def commit_transaction(self) -> None:
        self._run(self.aio.commit_transaction())

    def abort_transaction(self) -> None:
        self._run(self.aio.abort_transaction())

    def send_offsets_to_transaction(self, offsets: Offsets,
                                    group_metadata: ConsumerGroupMetadata | str | Any) -> None:
        self._run(self.aio.send_offsets_to_transaction(offsets, group_metadata))
