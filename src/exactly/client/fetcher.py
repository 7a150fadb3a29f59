"""Fetching: one Fetch per leader for all its assigned partitions, issued ahead while the
application works through what it already has, and the draining of the returned batches into
ConsumerRecords as the application polls, with read_committed's filtering of aborted
transactions. The records themselves are decoded by decode.py (in C when it is built).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from exactly.client._loop import stop_tasks, wait_event
from exactly.client.cluster import Cluster, make_request, request_module
from exactly.client.config import ClientConfig
from exactly.client.decode import decode_batch, decode_section
from exactly.client.errors import FETCH_LEADER_MOVED, KafkaError
from exactly.client.types import ConsumerRecord, duration
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatchError,
    RecordBatchHeader,
    decompress,
)
from exactly.protocol.structs import TopicPartition

log = logging.getLogger("exactly.client")

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
_ABORT = 0  # control record type of an abort marker
_CONTROL_KEY = struct.Struct(">hh")
_BATCH_FIXED = struct.Struct(">qi")
_BATCH_REST = struct.Struct(">ibIhiqqqhii")


class OffsetOutOfRangeError(KafkaError):
    """The position is outside the log and auto.offset.reset is none: seek() somewhere."""


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and auto.offset.reset is none: seek() to a starting offset."""


class CompletedFetch:
    """One partition's answer to a Fetch, drained batch by batch as the application polls."""

    __slots__ = ("aborted", "aborted_pids", "data", "end_offset", "epoch", "pending",
                 "pending_count", "pending_end", "pos", "size", "tp")

    def __init__(self, tp: TopicPartition, data: bytes, aborted: Iterable[Any] | None,
                 epoch: int, end_offset: int) -> None:
        self.tp, self.data, self.epoch, self.end_offset = tp, data, epoch, end_offset
        self.pos = 0
        self.size = len(data)
        self.aborted = sorted((a.first_offset, a.producer_id) for a in aborted or ())
        self.aborted_pids: set[int] = set()
        self.pending: Iterator[ConsumerRecord] = iter(())
        self.pending_count = 0
        self.pending_end = 0

    @staticmethod
    def scan_end(data: bytes, start: int) -> tuple[int, int]:
        """(offset after the last complete batch, bytes they take): a response may end with a
        partial batch, which is fetched again next time."""
        pos, end, total = 0, start, len(data)
        while pos + LOG_OVERHEAD <= total:
            base, length = _BATCH_FIXED.unpack_from(data, pos)
            if pos + LOG_OVERHEAD + length > total or length < HEADER_SIZE - LOG_OVERHEAD:
                break
            (last_delta,) = struct.unpack_from(">i", data, pos + 23)
            end = max(end, base + last_delta + 1)
            pos += LOG_OVERHEAD + length
        return end, pos

    def drain(self, state: PartitionState, max_records: int, read_committed: bool
              ) -> list[ConsumerRecord]:
        """Up to max_records records from state.position on; advances state.position."""
        out: list[ConsumerRecord] = []
        topic, partition = self.tp
        while len(out) < max_records:
            if self.pending_count:
                n = min(self.pending_count, max_records - len(out))
                out += islice(self.pending, n)
                self.pending_count -= n
                state.position = out[-1].offset + 1
                if not self.pending_count:
                    state.position = self.pending_end
                continue
            if self.pos >= self.size:
                state.position = max(state.position or 0, self.end_offset)
                break
            header = RecordBatchHeader(self.data, self.pos)
            if header.end > self.size:
                break
            self.pos = header.end
            next_offset = header.base_offset + header.last_offset_delta + 1
            if next_offset <= (state.position or 0):
                continue  # before the position: an earlier batch of a compressed set
            if header.compute_crc() != header.crc:
                raise RecordBatchError(f"{topic}-{partition}: CRC mismatch in the batch at offset "
                                       f"{header.base_offset}; the data is corrupt")
            attributes = header.attributes
            if read_committed and header.producer_id >= 0:
                aborted = self.aborted
                while aborted and aborted[0][0] <= next_offset - 1:
                    self.aborted_pids.add(heapq.heappop(aborted)[1])
                if attributes & ATTR_CONTROL:
                    if self._is_abort_marker(header):
                        self.aborted_pids.discard(header.producer_id)
                elif attributes & ATTR_TRANSACTIONAL and header.producer_id in self.aborted_pids:
                    state.position = next_offset
                    continue
            if attributes & ATTR_CONTROL:
                state.position = next_offset
                continue
            if attributes & 0x07:
                body = decompress(attributes & 0x07,
                                  self.data[header.position + HEADER_SIZE : header.end])
                start, stop = 0, len(body)
            else:
                body, start, stop = self.data, header.position + HEADER_SIZE, header.end
            self.pending, self.pending_count = decode_section(
                body, start, stop, header.records_count, header.base_offset, header.base_timestamp,
                header.max_timestamp if attributes & ATTR_TIMESTAMP_TYPE else -1,
                topic, partition, state.position or 0)
            self.pending_end = next_offset
            if not self.pending_count:
                state.position = next_offset
        return out

    def _is_abort_marker(self, header: RecordBatchHeader) -> bool:
        body = self.data[header.position + HEADER_SIZE : header.end]
        if header.attributes & 0x07:
            body = decompress(header.attributes & 0x07, body)
        try:
            (record,) = decode_batch(body, 1, header.base_offset, 0, -1, "", 0, -1)
        except (ValueError, RecordBatchError):
            return False
        if record.key is None or len(record.key) < 4:
            return False
        return bool(_CONTROL_KEY.unpack_from(record.key)[1] == _ABORT)

    @property
    def exhausted(self) -> bool:
        return not self.pending_count and self.pos >= self.size


class PartitionState:
    __slots__ = (
        "epoch",
        "error",
        "fetch_offset",
        "high_watermark",
        "position",
        "queue",
        "queued_bytes",
        "reset",
    )

    def __init__(self) -> None:
        self.position: int | None = None  # next offset handed to the application
        self.fetch_offset: int | None = None  # next offset to ask the broker for
        self.reset: int | None = None  # EARLIEST/LATEST pending
        self.queue: deque[CompletedFetch] = deque()
        self.queued_bytes = 0
        self.high_watermark = -1
        self.error: KafkaError | None = None
        self.epoch = 0  # bumped by seek/reset: answers to older fetches are dropped

    def seek(self, offset: int | None, reset: int | None = None) -> None:
        """Go to `offset`, or (None) wait for a reset to EARLIEST/LATEST; queued data is dropped."""
        self.position = self.fetch_offset = offset
        self.reset = reset
        self.error = None
        self.queue.clear()
        self.queued_bytes = 0
        self.epoch += 1


class Fetcher:
    """Positions of the assigned partitions and the fetches that fill their queues."""

    def __init__(self, cluster: Cluster, config: ClientConfig) -> None:
        self.cluster, self.config = cluster, config
        self.read_committed = config["isolation.level"] == "read_committed"
        self.states: dict[TopicPartition, PartitionState] = {}
        self._inflight: dict[int, asyncio.Task[None]] = {}
        self._inflight_tps: dict[int, list[TopicPartition]] = {}
        self._wakeup = asyncio.Event()
        self._data = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rotate = 0
        self._buffer_limit = max(config["max.partition.fetch.bytes"], 1 << 20)

    # -- assignment and positions ---------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = {TopicPartition(*tp) for tp in partitions}
        for tp in list(self.states):
            if tp not in wanted:
                state = self.states.pop(tp)
                state.epoch += 1
        for tp in sorted(wanted):
            self.states.setdefault(tp, PartitionState())
        self.wake()

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self.states[TopicPartition(*tp)]
        except KeyError:
            raise KafkaError(f"{tp[0]}-{tp[1]} is not assigned to this consumer") from None

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.state(tp).seek(offset)
        self.wake()

    def request_reset(self, tps: Iterable[TopicPartition], timestamp: int) -> None:
        for tp in tps:
            self.state(tp).seek(None, timestamp)
        self.wake()

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self.states.items() if s.position is None and s.reset is None]

    def _default_reset(self, tp: TopicPartition, why: str) -> int:
        policy = self.config["auto.offset.reset"]
        if policy == "none":
            cls = OffsetOutOfRangeError if "range" in why else NoOffsetForPartitionError
            raise cls(f"{tp.topic}-{tp.partition}: {why} and auto.offset.reset is none; "
                      "seek() to an offset, or set auto.offset.reset to earliest or latest")
        return EARLIEST if policy == "earliest" else LATEST

    def use_committed(self, committed: dict[TopicPartition, int]) -> None:
        """Positions from committed offsets; partitions without one follow auto.offset.reset."""
        for tp, offset in committed.items():
            state = self.states.get(tp)
            if state is None or state.position is not None or state.reset is not None:
                continue
            if offset >= 0:
                state.seek(offset)
            else:
                state.reset = self._default_reset(tp, "no committed offset")
        self.wake()

    async def resolve_resets(self) -> None:
        """ListOffsets for every partition waiting for a reset, grouped by leader."""
        pending = [tp for tp, s in self.states.items() if s.reset is not None]
        for tp in self.missing_positions():
            self.states[tp].reset = self._default_reset(tp, "no position")
            pending.append(tp)
        if not pending:
            return
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            by_leader.setdefault(await self._leader(tp), []).append(tp)
        await asyncio.gather(*(self._list_offsets(node, tps) for node, tps in by_leader.items()))

    async def _list_offsets(self, node: int, tps: list[TopicPartition]) -> None:
        for attempt in range(20):
            conn = await self.cluster.connection(node)
            # Left out: partitions unassigned or sought while the connection was being made.
            tps = [tp for tp in tps
                   if (state := self.states.get(tp)) is not None and state.reset is not None]
            if not tps:
                return
            module = request_module(conn, ApiKey.LIST_OFFSETS)
            epochs = {tp: self.states[tp].epoch for tp in tps}
            topics: dict[str, list[Any]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(build(
                    module.ListOffsetsPartition, partition_index=tp.partition,
                    current_leader_epoch=-1, timestamp=self.states[tp].reset, max_num_offsets=1))
            response = await conn.send(make_request(
                conn, ApiKey.LIST_OFFSETS, replica_id=-1,
                isolation_level=READ_COMMITTED if self.read_committed else READ_UNCOMMITTED,
                topics=tuple(build(module.ListOffsetsTopic, name=t, partitions=tuple(ps))
                             for t, ps in topics.items())))
            retry = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    state = self.states.get(tp)
                    if state is None or state.epoch != epochs.get(tp) or state.reset is None:
                        continue  # reassigned or sought meanwhile
                    if p.error_code == ErrorCode.none:
                        state.seek(p.offset)
                    elif ErrorCode(p.error_code).retriable:
                        retry.append(tp)
                    else:
                        raise KafkaError(f"ListOffsets for {t.name}-{p.partition_index}: "
                                         f"{error_name(p.error_code)}", p.error_code)
            if not retry:
                self.wake()
                return
            tps = retry
            await self.cluster.refresh([tp.topic for tp in tps])
            await asyncio.sleep(min(0.05 * (attempt + 1), 1.0))
        raise KafkaError(f"no offsets found for {', '.join(f'{t}-{p}' for t, p in tps)}")

    async def _leader(self, tp: TopicPartition) -> int:
        md = self.cluster.metadata.topics.get(tp.topic)
        leader = md.partitions.get(tp.partition, -1) if md is not None else -1
        if leader < 0:
            md = await self.cluster.topic(tp.topic)
            leader = md.partitions.get(tp.partition, -1)
        if leader < 0:
            raise KafkaError(f"{tp.topic}-{tp.partition} has no leader", ErrorCode.leader_not_available)
        return leader

    # -- fetching -------------------------------------------------------------------------

    def wake(self) -> None:
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._fetch_loop(), name="fetcher")

    async def _fetch_loop(self) -> None:
        while True:
            self._wakeup.clear()
            busy = {tp for node in self._inflight for tp in self._inflight_tps.get(node, ())}
            plan: dict[int, list[TopicPartition]] = {}
            for tp, state in self.states.items():
                if (state.fetch_offset is None or state.error is not None or tp in busy
                        or state.queued_bytes >= self._buffer_limit):
                    continue
                try:
                    node = await self._leader(tp)
                except KafkaError as exc:
                    log.info("event=fetch_no_leader partition=%s-%d error=%s", *tp, exc)
                    continue
                plan.setdefault(node, []).append(tp)
            for node, tps in plan.items():
                if node not in self._inflight:
                    self._inflight_tps[node] = tps
                    self._inflight[node] = asyncio.create_task(self._fetch(node, tps))
            await self._wakeup.wait()

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        try:
            await self._fetch_once(node, tps)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            log.info("event=fetch_failed node=%d error=%s", node, exc)
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
        except Exception:
            log.exception("event=fetch_crashed node=%d", node)
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
        finally:
            self._inflight.pop(node, None)
            self._inflight_tps.pop(node, None)
            self._wakeup.set()

    async def _fetch_once(self, node: int, tps: list[TopicPartition]) -> None:
        conn = await self.cluster.connection(node)
        # Partitions unassigned, or reset to no position, while the connection was being made
        # are left out: the plan was made before that wait.
        asked = {tp: (state.fetch_offset, state.epoch) for tp in tps
                 if (state := self.states.get(tp)) is not None and state.fetch_offset is not None}
        if not asked:
            return
        tps = list(asked)
        module = request_module(conn, ApiKey.FETCH)
        topics: dict[str, list[Any]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(build(
                module.FetchPartition, partition=tp.partition, current_leader_epoch=-1,
                fetch_offset=asked[tp][0], last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=self.config["max.partition.fetch.bytes"]))
        max_wait = self.config["fetch.max.wait.ms"]
        response = await conn.send(make_request(
            conn, ApiKey.FETCH, replica_id=-1, max_wait=duration(max_wait),
            min_bytes=self.config["fetch.min.bytes"], max_bytes=self.config["fetch.max.bytes"],
            isolation_level=READ_COMMITTED if self.read_committed else READ_UNCOMMITTED,
            session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
            topics=tuple(build(module.FetchTopic, topic=t, partitions=tuple(ps))
                         for t, ps in topics.items())),
            timeout=(max_wait + self.config["request.timeout.ms"]) / 1000)
        if response.error_code:
            raise KafkaError(f"Fetch from broker {node}: {error_name(response.error_code)}",
                             response.error_code)
        refresh = False
        got = False
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                state = self.states.get(tp)
                offset, epoch = asked.get(tp, (None, -1))
                if state is None or state.epoch != epoch or state.fetch_offset != offset:
                    continue  # unassigned, sought or reset while the fetch was out
                code = p.error_code
                if code == ErrorCode.none:
                    state.high_watermark = p.high_watermark
                    data = p.records or b""
                    if not data:
                        continue
                    end, used = CompletedFetch.scan_end(data, offset or 0)
                    if used == 0:
                        continue
                    state.queue.append(CompletedFetch(tp, data, p.aborted_transactions, epoch, end))
                    state.queued_bytes += used
                    state.fetch_offset = end
                    got = True
                elif code == ErrorCode.offset_out_of_range:
                    log.info("event=offset_out_of_range partition=%s-%d offset=%s", *tp, offset)
                    try:
                        reset = self._default_reset(tp, f"offset {offset} is out of range")
                    except KafkaError as exc:
                        state.error = exc
                        got = True
                        continue
                    state.seek(None, reset)
                elif code in FETCH_LEADER_MOVED:
                    refresh = True
                else:
                    state.error = KafkaError(f"Fetch {tp.topic}-{tp.partition}: {error_name(code)}",
                                             code)
                    got = True
        if got:
            self._data.set()
        if refresh:
            with contextlib.suppress(KafkaError):
                await self.cluster.refresh(sorted({tp.topic for tp in tps}))
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)

    # -- handing records to the application -----------------------------------------------

    def drain(self, max_records: int) -> list[ConsumerRecord]:
        """Records ready in the queues, up to max_records, partitions taken in turn."""
        out: list[ConsumerRecord] = []
        states = list(self.states.items())
        if not states:
            return out
        self._rotate = (self._rotate + 1) % len(states)
        freed = False
        for tp, state in states[self._rotate :] + states[: self._rotate]:
            if state.error is not None:
                if out:
                    break
                error, state.error = state.error, None
                raise error
            while state.queue and len(out) < max_records:
                completed = state.queue[0]
                out += completed.drain(state, max_records - len(out), self.read_committed)
                if completed.exhausted:
                    state.queue.popleft()
                    state.queued_bytes -= completed.size
                    freed = True
            if len(out) >= max_records:
                break
        if freed:
            self.wake()
        if not any(s.queue for s in self.states.values()):
            self._data.clear()
        return out

    async def wait_for_data(self, timeout: float) -> None:
        await wait_event(self._data, timeout)

    async def close(self) -> None:
        tasks = [self._task, *self._inflight.values()]
        self._task = None
        await stop_tasks(tasks)
