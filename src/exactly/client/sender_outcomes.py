"""What becomes of the producer's batches once sent (the answers of Produce requests, per
partition), for the sender (sender.py), which is built on it: a batch is completed (written, or
a duplicate of a write), retried (the same bytes and sequence, within retries and
delivery.timeout.ms), or failed; a batch that failed for good gives its sequence numbers back to
the batches behind it, and one that may have been written loses the idempotent producer its
sequence state (a new producer id follows), as the Java client does. A transactional batch's
failure is also the transaction's (TransactionSession.record_error).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from exactly.client.accumulator import PartitionState, RecordAccumulator
from exactly.client.batch import ProducerBatch
from exactly.client.errors import (
    FENCED,
    LEADER_MOVED,
    PRODUCE_ABORTABLE,
    SEQUENCE_LOST,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    is_retriable,
)
from exactly.client.session_core import AsyncTransactionSession
from exactly.protocol.errors import ErrorCode, error_name

log = logging.getLogger("exactly.client")

MAX_SEQUENCE = 0x7FFFFFFF


def _log_append_ms(value: Any) -> int:
    return int(value.timestamp() * 1000) if value is not None else -1


class BatchOutcomes:
    """The sender's handling of its batches' outcomes (a base of Sender, which sets these)."""

    accumulator: RecordAccumulator
    session: AsyncTransactionSession | None
    in_flight: dict[int, int]
    stopping: bool
    metadata_stale: bool
    new_identity: bool
    retries: int
    backoff: float
    delivery_timeout: float
    buffer_memory: int
    space_freed: asyncio.Event

    def _closed_on_the_way(self, node: int, batches: list[ProducerBatch]) -> None:
        self._landed(node, batches)
        for b in batches:
            self._complete(b, error=KafkaError("the producer was closed while this record was "
                                               "on its way; it may have been written"))

    def _landed(self, node: int, batches: list[ProducerBatch]) -> None:
        self.in_flight[node] -= 1
        for b in batches:
            with contextlib.suppress(ValueError):
                self.accumulator.state(b.topic, b.partition).in_flight.remove(b)

    def _on_failure(self, node: int, batches: list[ProducerBatch], exc: KafkaError) -> None:
        self._landed(node, batches)
        self.metadata_stale = True
        for b in batches:
            self._retry(self.accumulator.state(b.topic, b.partition), b,
                        KafkaError(f"produce to {b.topic}-{b.partition}: {exc}", exc.code), True)

    def _on_response(self, node: int, batches: list[ProducerBatch], response: Any) -> None:
        self._landed(node, batches)
        answers = {(t.name, p.index): p for t in response.responses
                   for p in t.partition_responses}
        for b in batches:
            st = self.accumulator.state(b.topic, b.partition)
            answer = answers.get((b.topic, b.partition))
            if answer is None:
                self._retry(st, b, KafkaError(f"produce to {b.topic}-{b.partition}: the broker "
                                              "did not answer for this partition"), True)
                continue
            code = int(answer.error_code)
            if code == ErrorCode.none or code == ErrorCode.duplicate_sequence_number:
                if b.base_sequence >= 0:
                    st.acked_next = (b.base_sequence + b.count) & MAX_SEQUENCE
                self._complete(b, answer.base_offset, _log_append_ms(answer.log_append_time))
            else:
                self._on_error(st, b, code, getattr(answer, "error_message", None))

    def _on_error(self, state: PartitionState, batch: ProducerBatch, code: int, message: str | None
                  ) -> None:
        text = f"produce to {batch.topic}-{batch.partition} failed: {error_name(code)}"
        if message:
            text += f" ({message})"
        if code == ErrorCode.out_of_order_sequence_number and (
                batch.sent_sequence != batch.base_sequence or any(
                    0 <= other.base_sequence < batch.base_sequence
                    for other in (*state.in_flight, *state.batches))):
            # A batch ahead of this one is not acknowledged yet (it is being resent), or this
            # one was renumbered after a batch ahead failed: it is resent after them.
            self._retry(state, batch, KafkaError(text, code), False)
        elif code in SEQUENCE_LOST:
            self._fail(state, batch, KafkaError(text, code), True)
        elif code in FENCED:
            self._fail(state, batch, ProducerFencedError(
                text + ": a newer producer with the same identity took over", code), True)
        elif code in PRODUCE_ABORTABLE:
            self._fail(state, batch, TransactionAbortableError(
                text + ": abort the transaction", code), False)
        elif is_retriable(code):
            if code in LEADER_MOVED:
                self.metadata_stale = True
            self._retry(state, batch, KafkaError(text, code),
                        code == ErrorCode.not_enough_replicas_after_append)
        else:
            self._fail(state, batch, KafkaError(text, code), False)

    def _retry(self, state: PartitionState, batch: ProducerBatch, exc: KafkaError,
               maybe_written: bool) -> None:
        now = time.monotonic()
        if self.stopping or batch.attempts > self.retries or (
                now + self.backoff - batch.created >= self.delivery_timeout):
            self._fail(state, batch, exc, maybe_written)
            return
        batch.retry_at = now + self.backoff
        self.accumulator.requeue(state, batch)

    def _fail(self, state: PartitionState, batch: ProducerBatch, exc: BaseException,
              maybe_written: bool) -> None:
        if batch.base_sequence >= 0 and batch.attempts:
            if maybe_written:
                self._sequence_lost(exc)
            else:  # not written: the batches behind it take over its sequence numbers
                for other in (*state.in_flight, *state.batches):
                    if other.base_sequence > batch.base_sequence:
                        other.base_sequence -= batch.count
                state.next_sequence = (state.next_sequence - batch.count) & MAX_SEQUENCE
        session = self.session
        if session is not None and isinstance(exc, Exception):
            session.record_error(exc)
        self._complete(batch, error=exc)

    def _sequence_lost(self, exc: BaseException) -> None:
        if self.session is None and not self.new_identity:
            log.warning("event=producer_sequence_lost action=new_producer_id error=%s", exc)
            self.new_identity = True

    def _complete(self, batch: ProducerBatch, base_offset: int = -1, log_append_time: int = -1,
                  error: BaseException | None = None) -> None:
        self.accumulator.release(batch)
        batch.complete(base_offset, log_append_time, error)
        if self.accumulator.buffered < self.buffer_memory:
            self.space_freed.set()

    def _expire(self, now: float) -> None:
        for st, b in self.accumulator.expired(now, self.delivery_timeout):
            self._fail(st, b, KafkaTimeoutError(
                f"{b.count} record(s) for {b.topic}-{b.partition} expired: not acknowledged "
                f"within delivery.timeout.ms ({self.delivery_timeout * 1000:.0f} ms)"), b.attempts > 0)
