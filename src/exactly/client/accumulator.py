"""Where records wait to be sent: a queue of batches per partition, with the partition's
idempotence bookkeeping (next sequence, last acknowledged sequence, batches in flight).

Thread-safe: the blocking Producer appends from the caller's thread while the sender drains on
the client's loop, so queue changes hold one lock (uncontended with the asyncio API). Sequence
numbers and in-flight counts are only touched by the sender, on the loop.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from exactly.client.batch import FutureRecordMetadata, ProducerBatch


class PartitionState:
    __slots__ = ("acked_next", "batches", "in_flight", "next_sequence", "open", "partition",
                 "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.batches: deque[ProducerBatch] = deque()  # unsent (or to resend), in order
        self.open: ProducerBatch | None = None  # the last batch, while records may join it
        self.next_sequence = 0  # for the next new batch
        self.acked_next = 0  # sequence after the last acknowledged batch
        self.in_flight: list[ProducerBatch] = []  # batches of this partition on the wire

    def reset_sequences(self) -> None:
        self.next_sequence = self.acked_next = 0

    def __repr__(self) -> str:
        return f"PartitionState({self.topic}-{self.partition}, {len(self.batches)} queued)"


class RecordAccumulator:
    """Per-partition batch queues. `wake()` is called when the sender has something new to do
    (a batch was started, so its linger timer runs, or a batch filled up); with `wake_at`, a
    batch started that lingers calls `wake_at(due)` instead (due: when linger.ms ends, on
    `clock`): the sender need not look before then."""

    def __init__(self, *, batch_size: int, linger_ms: int, codec: int, buffer_memory: int,
                 wake: Callable[[], None], clock: Callable[[], float],
                 wake_at: Callable[[float], None] | None = None) -> None:
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self.codec = codec
        self.buffer_memory = buffer_memory
        self.wake = wake
        self.wake_at = wake_at
        self.clock = clock
        self.lock = threading.Lock()
        self.topics: dict[str, list[PartitionState | None]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.buffered = 0  # bytes reserved by the incomplete batches
        self.flushing = 0  # flush() calls waiting: every batch counts as ready
        self.transactional = False  # set on new batches (the producer writes in transactions)
        # Transactional: partitions that got a new batch since the sender last looked (it adds
        # them to the transaction at once; see Sender._join_transaction).
        self.started: set[tuple[str, int]] = set()
        self.last_started = float("-inf")  # when the newest batch was started, on `clock`

    def state(self, topic: str, partition: int) -> PartitionState:
        states = self.topics.get(topic)
        if states is None:
            states = self.topics[topic] = []
        if partition >= len(states):
            states.extend([None] * (partition + 1 - len(states)))
        st = states[partition]
        if st is None:
            st = states[partition] = PartitionState(topic, partition)
        return st

    def append(self, topic: str, partition: int, timestamp: int, key: bytes | None,
               value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None,
               *, new_batch: bool = True) -> FutureRecordMetadata | None:
        """Add a record to the partition's open batch, or to a new one. With new_batch=False,
        None when a new batch would be needed (the sticky partitioner then moves on).

        The hot path takes no lock: with the asyncio API it runs on the loop, like the sender.
        A caller on another thread holds `lock` around it (the blocking Producer does)."""
        states = self.topics.get(topic)
        st = states[partition] if states is not None and partition < len(states) else None
        if st is None:
            st = self.state(topic, partition)
        batch = st.open
        if batch is not None:
            index = batch.try_append(timestamp, key, value, headers)
            if index >= 0:
                if batch.size >= self.batch_size:
                    st.open = None
                    self.wake()
                return FutureRecordMetadata(batch, index, timestamp)
            st.open = None
            self.wake()
        if not new_batch:
            return None
        created = self.last_started = self.clock()
        batch = ProducerBatch(topic, partition, self.batch_size, self.codec, created, timestamp)
        if self.transactional:
            batch.transactional = True
            self.started.add((topic, partition))
        batch.try_append(timestamp, key, value, headers)
        # Memory is counted per batch, as Kafka's buffer pool does: batch.size (or more for a
        # larger record) from the batch's start until it is acknowledged.
        batch.reserved = max(batch.size, self.batch_size)
        self.buffered += batch.reserved
        self.incomplete.add(batch)
        st.batches.append(batch)
        st.open = batch if batch.size < self.batch_size else None
        if self.wake_at is not None and st.open is not None and self.linger and not self.flushing:
            self.wake_at(created + self.linger)
        else:
            self.wake()
        return FutureRecordMetadata(batch, 0, timestamp)

    def take_started(self) -> set[tuple[str, int]]:
        with self.lock:
            started, self.started = self.started, set()
        return started

    def states(self) -> Iterable[PartitionState]:
        for states in self.topics.values():
            for st in states:
                if st is not None:
                    yield st

    def _ready(self, st: PartitionState, batch: ProducerBatch, now: float) -> float:
        """0 when the batch may go now; else when to look again (inf: when woken)."""
        if batch.attempts:
            if st.in_flight:
                return float("inf")  # a resend waits for what is ahead of it on the wire
            if now < batch.retry_at:
                return batch.retry_at
            return 0.0
        if batch is not st.open or batch.size >= self.batch_size or self.flushing:
            return 0.0
        due = batch.created + self.linger
        return 0.0 if now >= due else due

    def ready(self, now: float) -> tuple[list[PartitionState], float]:
        """Partitions whose first batch may be sent now, and the next time to look."""
        out: list[PartitionState] = []
        next_check = float("inf")
        with self.lock:
            for st in self.states():
                if st.batches:
                    due = self._ready(st, st.batches[0], now)
                    if due == 0.0:
                        out.append(st)
                    elif due < next_check:
                        next_check = due
        return out, next_check

    def drain(self, states: Iterable[PartitionState], max_bytes: int, now: float
              ) -> list[ProducerBatch]:
        """At most one batch per partition, up to max_bytes in all (the first always)."""
        out: list[ProducerBatch] = []
        total = 0
        with self.lock:
            for st in states:
                if not st.batches or self._ready(st, st.batches[0], now) != 0.0:
                    continue
                batch = st.batches[0]
                if out and total + batch.wire_size > max_bytes:
                    break
                st.batches.popleft()
                if batch is st.open:
                    st.open = None
                total += batch.wire_size
                out.append(batch)
        return out

    def requeue(self, st: PartitionState, batch: ProducerBatch) -> None:
        """Put a batch back to be resent, ahead of newer ones and in sequence order."""
        with self.lock:
            index = 0
            for index, queued in enumerate(st.batches):
                if queued.attempts == 0 or (0 <= batch.base_sequence < queued.base_sequence):
                    break
            else:
                index = len(st.batches)
            st.batches.insert(index, batch)

    def release(self, batch: ProducerBatch) -> None:
        with self.lock:
            if batch in self.incomplete:
                self.incomplete.discard(batch)
                self.buffered -= batch.reserved

    def expired(self, now: float, timeout: float) -> list[tuple[PartitionState, ProducerBatch]]:
        """Take out the queued batches older than the delivery timeout."""
        out: list[tuple[PartitionState, ProducerBatch]] = []
        with self.lock:
            for st in self.states():
                if st.batches and now - st.batches[0].created >= timeout:
                    keep: deque[ProducerBatch] = deque()
                    for batch in st.batches:
                        (out.append((st, batch)) if now - batch.created >= timeout
                         else keep.append(batch))
                    st.batches = keep
                    if st.open is not None and st.open not in keep:
                        st.open = None
        return out

    def take_all(self) -> list[tuple[PartitionState, ProducerBatch]]:
        """Empty every queue (the producer is closing without sending)."""
        with self.lock:
            out = [(st, b) for st in self.states() for b in st.batches]
            for st in self.states():
                st.batches.clear()
                st.open = None
        return out

    def has_queued(self) -> bool:
        with self.lock:
            return self.queued()

    def queued(self) -> bool:
        """has_queued() for a caller holding `lock`."""
        return any(st.batches for st in self.states())
