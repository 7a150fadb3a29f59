"""The producer's sender: ships ready batches to partition leaders, in sequence order, and
handles the answers (retries, duplicates, fencing); one task on the event loop.

A 1-record transaction costs what the protocol needs and no more: with transaction
version 1 the AddPartitionsToTxn of a partition leaves as soon as its first batch exists, not
when the batch is ready (see `_join_transaction`). A flush (the commit's) sends the ready
batches itself and waits for the answer in its own coroutine (`send_now`), rather than waking
this task and waiting for a task per request; a new batch that lingers only sets the sender's
timer (`wake_at`), and while that timer is set the blocking Producer's send() does not wake
the loop at all (`looks_by`). Version 1 keeps AddPartitionsToTxn before Produce, as Kafka's
clients do: a Produce to a partition not yet in the transaction is refused by a broker that
verifies (KIP-890), or written outside the transaction by one that does not.

Like aiokafka's `Sender(client, *, txn_manager, message_accumulator, ...)`, it is given its
collaborators by name (the cluster, the accumulator, the transaction session, the events and
callbacks it signals the producer with) and reads nothing private of the producer.

What becomes of each batch once answered (completed, retried, failed) is sender_outcomes.py,
which this class is built on.

A Produce request is written to its connection in the call that numbers its batches
(`_send`), whoever sends it (this task, a flush): a broker takes any sequence as the first of a
producer it has not seen on a partition, so a partition's second batch that overtook its first
on the wire would be written, and the first then refused as out of order.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import deque
from collections.abc import Callable

from exactly.client.accumulator import PartitionState, RecordAccumulator
from exactly.client.batch import ProducerBatch
from exactly.client.cluster import Cluster, make_request
from exactly.client.config import ClientConfig
from exactly.client.connection import BrokerConnection, Sent
from exactly.client.errors import KafkaError, KafkaTimeoutError
from exactly.client.sender_outcomes import MAX_SEQUENCE, BatchOutcomes
from exactly.client.session_core import AsyncTransactionSession
from exactly.client.session_state import State
from exactly.protocol import fast_requests
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.fast_requests import Encoded

log = logging.getLogger("exactly.client")


class Sender(BatchOutcomes):
    """Ships ready batches to partition leaders and handles the answers; one task on the loop."""

    def __init__(self, cluster: Cluster, *, accumulator: RecordAccumulator, config: ClientConfig,
                 session: AsyncTransactionSession | None, idempotent: bool,
                 partition_counts: dict[str, int], bootstrap_lock: asyncio.Lock,
                 wake_event: asyncio.Event, wake: Callable[[], None], space_freed: asyncio.Event,
                 on_fatal: Callable[[KafkaError], None]) -> None:
        """`session`: the transaction whose identity the batches are written under (None: not
        transactional). `partition_counts`: topic -> partition count, shared with the producer,
        grown here from fresh metadata. `bootstrap_lock`: held for a use of the cluster that may
        open a bootstrap connection. `wake_event`: set when there may be work; `wake()` sets it
        from the producer's side. `space_freed`: set when buffered bytes drop below
        buffer.memory. `on_fatal(error)`: the producer cannot send any more."""
        self.cluster, self.accumulator = cluster, accumulator
        self.session = session
        self.idempotent = idempotent
        self.partition_counts = partition_counts
        self.bootstrap_lock = bootstrap_lock
        self.wake_event, self.wake = wake_event, wake
        self.space_freed = space_freed
        self.on_fatal = on_fatal
        self.acks: int = config["acks"]
        self.max_request_size: int = config["max.request.size"]
        self.buffer_memory: int = config["buffer.memory"]
        self.transaction_timeout = datetime.timedelta(milliseconds=config["transaction.timeout.ms"])
        self.retries: int = config["retries"]
        self.backoff = config["retry.backoff.ms"] / 1000
        self.delivery_timeout = config["delivery.timeout.ms"] / 1000
        self.timeout_ms = config["request.timeout.ms"]  # the Produce's timeout_ms
        self.max_in_flight: int = config["max.in.flight.requests.per.connection"]
        self.metadata_max_age = config["metadata.max.age.ms"] / 1000
        self.in_flight: dict[int, int] = {}  # node -> requests awaiting an answer
        self.tasks: set[asyncio.Task[None]] = set()  # Produce requests awaiting their answer
        self.producer_id, self.epoch = -1, -1
        self.new_identity = False  # idempotent: take a new producer id once nothing is in flight
        self.fatal: KafkaError | None = None
        self.metadata_stale = False
        self.metadata_tried = 0.0
        self.expire_checked = 0.0
        self.stopping = False
        self.flushes = 0  # flushes about to send the ready batches themselves (send_now)
        # When the sender looks at the queues next: (due, timer) pairs, the earliest first, at
        # most two (see wake_at); replaced whole, as another thread reads it (looks_by).
        self.timers: tuple[tuple[float, asyncio.TimerHandle], ...] = ()

    async def run(self) -> None:
        wake = self.wake_event
        while not self.stopping:
            wake.clear()
            try:
                delay = await self._step(time.monotonic())
            except Exception:  # a bug must not stop the sender silently
                log.exception("event=producer_sender_error")
                delay = self.backoff
            if wake.is_set() or self.stopping:
                continue
            if delay < _INF:
                self.wake_at(time.monotonic() + max(delay, 0.0005))
            await wake.wait()

    def wake_at(self, when: float) -> None:
        """Have the sender look at the queues at `when` (time.monotonic()), unless it is due
        to look by then already; on the loop. A new batch that lingers sets this alone: the
        sender does not run a step just to learn when the batch is due.

        An earlier timer does not replace a later one: the latest is kept beside it (any
        between is dropped), so that once the earlier one (a step's, sooner than linger.ms)
        has fired, a send() still finds the sender due to look by its batch's deadline and
        makes no trip to the loop (`looks_by`)."""
        timers = self.timers
        if timers and timers[0][0] <= when:
            return
        timer = asyncio.get_running_loop().call_later(when - time.monotonic(), self._due, when)
        if len(timers) == 2:
            timers[0][1].cancel()
        self.timers = ((when, timer), *timers[-1:])

    def looks_by(self, when: float) -> bool:
        """Whether the sender will look at the queues by `when` anyway (a timer is set): a
        batch appended before this call, due then, needs no wake-up. From any thread: the
        blocking Producer's send() then makes no trip to the loop."""
        timers = self.timers
        return bool(timers) and timers[0][0] <= when

    def _due(self, when: float) -> None:
        """A timer fired: the sender looks at the queues, unless none is queued or a flush is
        sending them (a commit's: nothing to do here). The timer is then set again for
        linger.ms from now if a batch was started within the last linger.ms: the send()s of
        the next transactions find it (`looks_by`) and make no trip to the loop, and while
        transactions go on the loop thread wakes once per linger.ms for it, without a step."""
        self.timers = tuple(timer for timer in self.timers if timer[0] != when)
        acc = self.accumulator
        with acc.lock:  # a send() from another thread appends and reads `timers` holding it
            if self.flushes or not acc.queued():
                now = time.monotonic()
                if acc.last_started > now - acc.linger:
                    self.wake_at(now + acc.linger)
                return
        self.wake_event.set()

    async def send_now(self) -> bool:
        """flush's fast path, run in the flushing coroutine itself: when nothing needs a
        request or a wait first (the identity is known, the leaders' connections are open, no
        partition waits for AddPartitionsToTxn), the ready batches are sent at once, the last
        request awaited right here, without the sender task (a 1-record transaction's Produce
        leaves a loop turn earlier and its answer is handled a turn earlier). False
        when it cannot: the caller wakes the sender task.

        With transaction version 1 the partitions must be in the transaction first: this
        waits for the AddPartitionsToTxn that send() started (or sends it), while the sender
        task leaves the ready batches to this flush (`flushes`)."""
        self.flushes += 1
        try:
            plan = self._plan_now() if await self._joined_now() else None
        except BaseException:  # cancelled: the sender task takes over
            self.flushes -= 1
            self.wake()
            raise
        self.flushes -= 1
        if plan is None:
            return False
        now = time.monotonic()
        last: tuple[int, BrokerConnection, Sent, list[ProducerBatch]] | None = None
        for node, conn, node_states in plan:
            while self.in_flight.get(node, 0) < self.max_in_flight:
                batches = self.accumulator.drain(node_states, self.max_request_size, now)
                if not batches:
                    break
                sent = self._send(node, conn, batches)
                if sent is None:
                    continue
                if last is not None:
                    self._spawn(*last)
                last = (node, conn, sent, batches)
        if self.accumulator.has_queued():
            self.wake()
        # The linger timer stays: it serves the batches of the next transactions (see _due),
        # and the blocking send() skips its wake-up while it is set.
        if last is not None:
            await self._request(*last, inline=True)
        return True

    async def _joined_now(self) -> bool:
        """Transaction version 1: the ready batches' partitions added to the transaction
        (waiting for the AddPartitionsToTxn under way); False on failure, which the sender
        task then meets again and reports on the batches."""
        session = self.session
        if session is None or session.uses_transaction_v2 or self.stopping:
            return True
        wanted = self.accumulator.take_started()
        states, _ = self.accumulator.ready(time.monotonic())
        wanted.update((st.topic, st.partition) for st in states)
        if session.joined(wanted):
            return True
        try:
            await session.ensure_partitions(wanted)
        except Exception as exc:  # noqa: BLE001 - met again, and reported, by _dispatch
            log.debug("event=producer_flush_add_partitions_failed error=%s", exc)
            return False
        return True

    def _plan_now(self) -> list[tuple[int, BrokerConnection, list[PartitionState]]] | None:
        """For send_now: the ready partitions by leader, with its open connection; None when
        the sender task must send them (see send_now)."""
        session = self.session
        if (self.stopping or self.metadata_stale or self.fatal is not None
                or not self.idempotent):  # a resend after a cancelled flush must be harmless
            return None
        if session is not None:
            identity = (session.producer_id, session.producer_epoch)
            if identity != (self.producer_id, self.epoch):
                if self._busy() or identity[0] < 0:
                    return None
                self._adopt(*identity)  # version 2: each transaction has the next epoch
            if self.accumulator.started:
                if not session.uses_transaction_v2:
                    return None  # version 1: the task adds them (AddPartitionsToTxn) first
                self.accumulator.take_started()  # version 2: the Produce adds them
        elif self.producer_id < 0 or self.new_identity:
            return None
        now = time.monotonic()
        if now - self.cluster.metadata.fetched_at > self.metadata_max_age:
            return None
        states, _ = self.accumulator.ready(now)
        topics = self.cluster.metadata.topics
        by_node: dict[int, list[PartitionState]] = {}
        for st in states:
            md = topics.get(st.topic)
            leader = md.partitions.get(st.partition, -1) if md is not None else -1
            if leader < 0:
                return None
            by_node.setdefault(leader, []).append(st)
        plan = []
        for node, node_states in by_node.items():
            conn = self.cluster.live_connection(node)
            if conn is None or self.in_flight.get(node, 0) >= self.max_in_flight:
                return None
            plan.append((node, conn, node_states))
        if session is not None and not session.joined(
                {(st.topic, st.partition) for st in states}):
            return None
        return plan

    async def _step(self, now: float) -> float:
        if now - self.expire_checked >= 0.05:
            self.expire_checked = now
            self._expire(now)
        if not await self._identity():
            return self.backoff
        if self.accumulator.started:
            await self._join_transaction()
        if now - self.cluster.metadata.fetched_at > self.metadata_max_age:
            self.metadata_stale = True
        if self.metadata_stale and now - self.metadata_tried >= self.backoff:
            await self._refresh_metadata(now)
        if self.flushes:
            return _INF  # a flush sends the ready batches itself (send_now), then wakes us
        states, next_at = self.accumulator.ready(now)
        if not states:
            return next_at - now
        by_node: dict[int, list[PartitionState]] = {}
        topics = self.cluster.metadata.topics
        for st in states:
            md = topics.get(st.topic)
            leader = md.partitions.get(st.partition, -1) if md is not None else -1
            if leader < 0:
                self.metadata_stale = True
                next_at = min(next_at, now + self.backoff)
            else:
                by_node.setdefault(leader, []).append(st)
        for node, node_states in by_node.items():
            while self.in_flight.get(node, 0) < self.max_in_flight:
                try:
                    conn = await self._connection(node)
                except KafkaError as exc:
                    log.debug("event=producer_connect_failed node=%d error=%s", node, exc)
                    self.metadata_stale = True
                    next_at = min(next_at, now + self.backoff)
                    break
                batches = self.accumulator.drain(node_states, self.max_request_size,
                                                 time.monotonic())
                if not batches:
                    break
                await self._dispatch(node, conn, batches)
        return next_at - now

    async def _connection(self, node: int) -> BrokerConnection:
        conn = self.cluster.live_connection(node)
        if conn is not None:
            return conn
        async with self.bootstrap_lock:  # may refresh metadata: one first use at a time
            return await self.cluster.connection(node)

    async def _join_transaction(self) -> None:
        """Transaction version 1: AddPartitionsToTxn for the partitions that just got a batch,
        at once rather than when the batch is ready (after linger.ms, or when commit flushes):
        the round trip then overlaps the linger and the caller's way to commit_transaction, as
        the Java client's early AddPartitionsToTxn does. A failure is left to the batch's
        dispatch, which asks again and fails the batch with the session's error."""
        started = self.accumulator.take_started()
        session = self.session
        if session is None or session.state is not State.IN_TRANSACTION:
            return
        try:
            await session.ensure_partitions(started)
        except Exception as exc:  # noqa: BLE001 - met again, and reported, by _dispatch
            log.debug("event=producer_early_add_partitions_failed error=%s", exc)

    # -- identity ---------------------------------------------------------------------------

    def _busy(self) -> bool:
        return any(self.in_flight.values())

    async def _identity(self) -> bool:
        """Whether batches may be sent: the producer id and epoch to write with are known."""
        session = self.session
        if session is not None:
            identity = (session.producer_id, session.producer_epoch)
            if identity != (self.producer_id, self.epoch):
                if self._busy():
                    return False
                self._adopt(*identity)
            return self.producer_id >= 0
        if not self.idempotent:
            return True
        if self.producer_id >= 0 and not self.new_identity:
            return True
        if self._busy() or self.fatal is not None:
            return False
        try:
            async with self.bootstrap_lock:
                conn = await self.cluster.any_connection()
            response = await conn.send(make_request(
                conn, ApiKey.INIT_PRODUCER_ID, transactional_id=None,
                transaction_timeout=self.transaction_timeout,
                producer_id=-1, producer_epoch=-1))
        except KafkaError as exc:
            log.debug("event=producer_id_retry error=%s", exc)
            return False
        if response.error_code != ErrorCode.none:
            error = KafkaError(f"InitProducerId for an idempotent producer failed: "
                               f"{error_name(response.error_code)}", response.error_code)
            if not error.retriable:
                self.fatal = error
                self.on_fatal(error)
                for st, batch in self.accumulator.take_all():
                    self._complete(batch, error=error)
            return False
        self._adopt(response.producer_id, response.producer_epoch)
        self.new_identity = False
        return True

    def _adopt(self, producer_id: int, epoch: int) -> None:
        """Write as (producer_id, epoch) from now on: every partition's sequence restarts at 0.
        A batch numbered under the old identity that still waits to be resent fails: it may
        have been written, and under a new identity the broker could not deduplicate it."""
        log.info("event=producer_identity producer_id=%d epoch=%d", producer_id, epoch)
        self.producer_id, self.epoch = producer_id, epoch
        with self.accumulator.lock:
            stale = []
            for st in self.accumulator.states():
                st.reset_sequences()
                if any(b.base_sequence >= 0 for b in st.batches):
                    stale += [b for b in st.batches if b.base_sequence >= 0]
                    st.batches = deque(b for b in st.batches if b.base_sequence < 0)
        if stale:
            error = KafkaError(f"the producer's identity changed to producer id {producer_id} "
                               f"epoch {epoch} while this batch waited to be resent; it may or "
                               "may not have been written", ErrorCode.out_of_order_sequence_number)
            for batch in stale:
                self._complete(batch, error=error)

    # -- sending ----------------------------------------------------------------------------

    async def _dispatch(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]
                        ) -> None:
        session = self.session
        if session is not None:
            new = {(b.topic, b.partition) for b in batches if b.attempts == 0}
            if new:
                try:
                    await session.ensure_partitions(new)
                except Exception as exc:  # noqa: BLE001 - the batches carry it to the caller
                    for b in [b for b in batches if b.attempts == 0]:
                        batches.remove(b)
                        self._fail(self.accumulator.state(b.topic, b.partition), b, exc, False)
            if (session.producer_id, session.producer_epoch) != (self.producer_id, self.epoch):
                for b in reversed(batches):  # the identity moved meanwhile: next round
                    self.accumulator.requeue(self.accumulator.state(b.topic, b.partition), b)
                return
        if not batches:
            return
        if self.acks == 0:
            request = self._produce_request(node, conn, batches)
            if request is None:
                return
            try:
                await conn.send(request, expect_response=False)
            except KafkaError as exc:
                self._on_failure(node, batches, exc)
            else:
                self._landed(node, batches)
                for b in batches:
                    self._complete(b)
            return
        sent = self._send(node, conn, batches)
        if sent is not None:
            self._spawn(node, conn, sent, batches)

    def _spawn(self, node: int, conn: BrokerConnection, sent: Sent,
               batches: list[ProducerBatch]) -> None:
        task = asyncio.create_task(self._request(node, conn, sent, batches))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _send(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]
              ) -> Sent | None:
        """Number `batches` and write them in a Produce request, now (see the module's
        docstring); the answer's waiter, or None when there is none to wait for (the batches
        were failed or put back to be resent)."""
        request = self._produce_request(node, conn, batches)
        if request is None:
            return None
        try:
            sent = conn.write(request)
        except KafkaError as exc:  # the connection closed meanwhile: resent on a new one
            self._on_failure(node, batches, exc)
            self.wake()
            return None
        assert sent is not None  # a response is expected (acks != 0)
        return sent

    def _produce_request(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]
                         ) -> Encoded | None:
        """Number and encode `batches` into a Produce request, counted in flight to `node`;
        None if the broker takes no Produce version this client speaks (the batches failed)."""
        session = self.session
        max_version: int | None = None
        txn_id: str | None = None
        if session is not None:
            txn_id = session.transactional_id
            if not session.uses_transaction_v2:
                max_version = 11  # Produce v12 would add partitions implicitly (KIP-890)
        try:
            version = conn.version(ApiKey.PRODUCE, max_version=max_version)
        except KafkaError as exc:
            for b in batches:
                self._fail(self.accumulator.state(b.topic, b.partition), b, exc, False)
            return None
        idempotent, pid, epoch = self.idempotent, self.producer_id, self.epoch
        by_topic: dict[str, list[tuple[int, bytes]]] = {}
        for b in batches:
            st = self.accumulator.state(b.topic, b.partition)
            if idempotent and b.base_sequence < 0:
                b.base_sequence = st.next_sequence
                st.next_sequence = (st.next_sequence + b.count) & MAX_SEQUENCE
            b.sent_sequence = b.base_sequence
            b.attempts += 1
            st.in_flight.append(b)
            by_topic.setdefault(b.topic, []).append(
                (b.partition, b.encode(pid, epoch, b.base_sequence)))
        request = fast_requests.produce(version, txn_id, self.acks, self.timeout_ms,
                                        list(by_topic.items()))
        self.in_flight[node] = self.in_flight.get(node, 0) + 1
        return request

    async def _request(self, node: int, conn: BrokerConnection, sent: Sent,
                       batches: list[ProducerBatch], *, inline: bool = False) -> None:
        """Wait for a written Produce request's answer and handle it: in a task of its own, or
        `inline` in a flush (send_now)."""
        try:
            response = await conn.answer(sent)
        except asyncio.CancelledError:
            if inline and not self.stopping:
                # The flush that waited was cancelled, not the producer: as when an answer is
                # lost, the batches are resent (same sequence: written once) on a new
                # connection, as later answers on this one would be out of order.
                asyncio.ensure_future(conn.close())
                self._on_failure(node, batches, KafkaError(
                    "the flush waiting for this Produce's answer was cancelled"))
                self.wake()
                raise
            self._closed_on_the_way(node, batches)
            raise
        except KafkaError as exc:
            if self.stopping:  # an inline request outliving stop(): as if stop() cancelled it
                self._closed_on_the_way(node, batches)
                return
            if isinstance(exc, KafkaTimeoutError):
                # Answers after this one would be out of order with its resend: start afresh.
                asyncio.ensure_future(conn.close())
            self._on_failure(node, batches, exc)
        else:
            if self.stopping:
                self._closed_on_the_way(node, batches)
                return
            self._on_response(node, batches, response)
        if self.stopping or self.accumulator.has_queued():
            self.wake()  # resends, or batches that waited for a free slot

    async def _refresh_metadata(self, now: float) -> None:
        self.metadata_tried = now
        topics = list(self.partition_counts)
        try:
            async with self.bootstrap_lock:
                await self.cluster.refresh(topics)
        except KafkaError as exc:
            log.debug("event=producer_metadata_retry error=%s", exc)
            return
        self.metadata_stale = False
        for topic in topics:
            md = self.cluster.metadata.topics.get(topic)
            if md is not None and md.partitions:
                count = max(md.partitions) + 1
                if count > self.partition_counts.get(topic, 0):
                    self.partition_counts[topic] = count

    async def stop(self, error: KafkaError) -> None:
        """Fail what is still queued or on its way, and end the loop."""
        self.stopping = True
        self.wake_event.set()
        for _, timer in self.timers:
            timer.cancel()
        self.timers = ()
        for _, b in self.accumulator.take_all():
            self._complete(b, error=error)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        with self.accumulator.lock:
            leftover = list(self.accumulator.incomplete)
        for b in leftover:
            self._complete(b, error=error)
        self.space_freed.set()


_INF = float("inf")
