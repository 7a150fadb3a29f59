"""The Consumer: `assign` or `subscribe` (classic group protocol), `poll`, `commit`, `seek`, and
read_committed by default. `AsyncConsumer` is the asyncio one; `Consumer` runs an AsyncConsumer
on the client's loop thread for code that is not async.

    consumer = Consumer({"bootstrap.servers": "localhost:9092", "group.id": "billing",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    for record in consumer:
        handle(record.value)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Self

from exactly.client._loop import CLOSE_TIMEOUT_S, bounded_close, close_in_order
from exactly.client.blocking import Blocking, on_loop
from exactly.client.cluster import Cluster
from exactly.client.config import ClientConfig, as_config
from exactly.client.errors import IllegalStateError, KafkaError
from exactly.client.fetcher import (
    EARLIEST,
    LATEST,
    Fetcher,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from exactly.client.group import CommitFailedError, GroupCoordinatorClient, GroupMembership
from exactly.client.types import ConsumerGroupMetadata, ConsumerRecord
from exactly.protocol.structs import TopicPartition

__all__ = ["AsyncConsumer", "CommitFailedError", "Consumer", "ConsumerGroupMetadata",
           "ConsumerRecord", "NoOffsetForPartitionError", "OffsetOutOfRangeError",
           "TopicPartition"]

log = logging.getLogger("exactly.client")

_RECORDS_PER_TRIP = 4  # the blocking Consumer brings this many polls' worth from the loop


def _tps(partitions: Iterable[tuple[str, int]]) -> list[TopicPartition]:
    return [TopicPartition(*tp) for tp in partitions]


class AsyncConsumer:
    """A Kafka consumer on asyncio. Create it inside a running loop; `await close()` at the end."""

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self.config = as_config(config)
        self._cluster = Cluster(self.config)
        self._fetcher = Fetcher(self._cluster, self.config)
        group_id = self.config["group.id"]
        self._coordinator = (GroupCoordinatorClient(self._cluster, self.config, group_id)
                             if group_id else None)
        self._membership: GroupMembership | None = None
        self._manual = False
        self._closed = False
        self._auto_commit = bool(group_id) and self.config["enable.auto.commit"]
        self._next_auto_commit = time.monotonic() + self.config["auto.commit.interval.ms"] / 1000
        self._commit_task: asyncio.Task[None] | None = None
        # Records of the last poll not yet handed out by iteration, last first: commits stop
        # before them, so a record counts as consumed once iteration has yielded it.
        self._buffer: list[ConsumerRecord] = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- assignment -----------------------------------------------------------------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read these partitions, outside any group's assignment (commits still go to group.id)."""
        self._check_open()
        if self._membership is not None and self._membership.active:
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        self._manual = True
        self._fetcher.assign(_tps(partitions))

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join group.id and read the partitions of `topics` the group's leader assigns to us."""
        self._check_open()
        if isinstance(topics, str):
            topics = [topics]
        if self._coordinator is None:
            raise IllegalStateError("subscribe() needs group.id in the consumer's config")
        if self._manual and self._fetcher.states:
            raise IllegalStateError("subscribe() after assign(): call unsubscribe() first")
        if self._membership is None:
            self._membership = GroupMembership(self._cluster, self.config, self._coordinator,
                                               on_revoke=self._on_revoke, on_assign=self._on_assign)
        self._membership.subscribe(topics)

    async def unsubscribe(self) -> None:
        """Leave the group (or drop the manual assignment)."""
        if self._membership is not None:
            await self._membership.leave()
            self._membership = None
        self._manual = False
        self._buffer = []
        self._fetcher.assign(())

    def assignment(self) -> set[TopicPartition]:
        return set(self._fetcher.states)

    async def _on_revoke(self, partitions: set[TopicPartition]) -> None:
        if self._auto_commit:
            try:
                await self._send_commit(self._consumed(partitions))
            except KafkaError as exc:
                log.warning("event=commit_on_revoke_failed error=%s", exc)
        self._drop_buffered(partitions)
        self._fetcher.assign(tp for tp in self._fetcher.states if tp not in partitions)

    async def _on_assign(self, partitions: set[TopicPartition]) -> None:
        self._fetcher.assign(partitions)

    # -- polling --------------------------------------------------------------------------

    async def poll(self, timeout_ms: float = 1000, max_records: int | None = None
                   ) -> list[ConsumerRecord]:
        """Records from the assigned partitions, in offset order per partition; [] after
        timeout_ms without any."""
        self._check_open()
        limit = max_records or self.config["max.poll.records"]
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._membership is not None:
                await self._membership.wait_assigned(max(deadline - time.monotonic(), 0))
            await self._update_positions()
            records = self._fetcher.drain(limit)
            if self._auto_commit:
                self._maybe_auto_commit()
            left = deadline - time.monotonic()
            if records or left <= 0:
                return records
            await self._fetcher.wait_for_data(left)

    async def _update_positions(self) -> None:
        missing = self._fetcher.missing_positions()
        if missing and self._coordinator is not None:
            committed = await self._coordinator.fetch(
                missing, require_stable=self._fetcher.read_committed)
            self._fetcher.use_committed({tp: committed.get(tp, -1) for tp in missing})
        await self._fetcher.resolve_resets()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            await self._fill_buffer()
        return self._buffer.pop()

    async def _fill_buffer(self, timeout_ms: float = 1000, max_records: int | None = None) -> None:
        if not self._buffer:
            self._buffer = (await self.poll(timeout_ms, max_records))[::-1]

    # -- positions ------------------------------------------------------------------------

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        tp = TopicPartition(*partition)
        self._fetcher.seek(tp, offset)
        self._drop_buffered({tp})

    def seek_to_beginning(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._reset(partitions, EARLIEST)

    def seek_to_end(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._reset(partitions, LATEST)

    def _reset(self, partitions: Iterable[tuple[str, int]] | None, timestamp: int) -> None:
        tps = _tps(partitions) if partitions is not None else list(self._fetcher.states)
        self._fetcher.request_reset(tps, timestamp)
        self._drop_buffered(set(tps))

    def _drop_buffered(self, partitions: set[TopicPartition]) -> None:
        if self._buffer:
            self._buffer = [r for r in self._buffer if (r.topic, r.partition) not in partitions]

    async def position(self, partition: tuple[str, int]) -> int:
        """The offset of the next record poll will return for `partition`."""
        tp = TopicPartition(*partition)
        state = self._fetcher.state(tp)
        if state.position is None:
            await self._update_positions()
        return self._consumed([tp])[tp]

    async def committed(self, partitions: Iterable[tuple[str, int]]
                        ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed)."""
        coordinator = self._need_group("committed()")
        found = await coordinator.fetch(_tps(partitions), require_stable=self._fetcher.read_committed)
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}

    # -- commits --------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        """Commit `offsets` (the next offset to read, per partition), by default the positions
        of everything assigned; waits for the coordinator's answer."""
        self._check_open()
        if offsets is None:
            await self._send_commit(self._consumed(self._fetcher.states))
        else:
            await self._send_commit({TopicPartition(*tp): o for tp, o in offsets.items()})

    def _consumed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """What to commit: the positions, less the records iteration has not yielded yet."""
        offsets: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self._fetcher.states.get(tp)
            if state is not None and state.position is not None:
                offsets[tp] = state.position
        for record in list(self._buffer):
            tp = TopicPartition(record.topic, record.partition)
            if tp in offsets and record.offset < offsets[tp]:
                offsets[tp] = record.offset
        return offsets

    async def _send_commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        coordinator = self._need_group("commit()")
        if not offsets:
            return
        member = self._membership
        if member is not None and member.generation_id >= 0:
            await coordinator.commit(offsets, generation_id=member.generation_id,
                                     member_id=member.member_id,
                                     group_instance_id=member.group_instance_id)
        else:
            await coordinator.commit(offsets)

    def _maybe_auto_commit(self) -> None:
        now = time.monotonic()
        if now < self._next_auto_commit or (self._commit_task and not self._commit_task.done()):
            return
        self._next_auto_commit = now + self.config["auto.commit.interval.ms"] / 1000
        self._commit_task = asyncio.create_task(
            self._auto_commit_once(self._consumed(self._fetcher.states)))

    async def _auto_commit_once(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await self._send_commit(offsets)
        except KafkaError as exc:
            log.warning("event=auto_commit_failed error=%s", exc)

    # -- group ----------------------------------------------------------------------------

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What Producer.send_offsets_to_transaction needs to commit offsets for this group."""
        group_id = self.config["group.id"]
        if not group_id:
            raise IllegalStateError("group_metadata() needs group.id in the consumer's config")
        member = self._membership
        return ConsumerGroupMetadata(
            group_id=group_id,
            generation_id=member.generation_id if member is not None else -1,
            member_id=member.member_id if member is not None else "",
            group_instance_id=self.config["group.instance.id"])

    def _need_group(self, what: str) -> GroupCoordinatorClient:
        if self._coordinator is None:
            raise IllegalStateError(f"{what} needs group.id in the consumer's config")
        return self._coordinator

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    async def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        """Commit (with enable.auto.commit), leave the group, close the connections. The
        goodbyes take at most `timeout` seconds (None: no bound), as Kafka's close(Duration):
        a broker that does not answer does not hold the application up."""
        if self._closed:
            return
        self._closed = True
        try:
            async with bounded_close("consumer", timeout):
                if self._commit_task is not None:
                    await asyncio.gather(self._commit_task, return_exceptions=True)
                if self._auto_commit and self._membership is None and self._fetcher.states:
                    try:
                        await self._send_commit(self._consumed(self._fetcher.states))
                    except KafkaError as exc:
                        log.warning("event=commit_on_close_failed error=%s", exc)
                if self._membership is not None:
                    await self._membership.leave()  # commits on revoke with enable.auto.commit
        finally:
            closes = [self._fetcher.close]
            if self._coordinator is not None:
                closes.append(self._coordinator.close)
            await close_in_order(*closes, self._cluster.close)


class Consumer(Blocking[AsyncConsumer]):
    """The blocking Consumer: the same methods as AsyncConsumer, run on the client's loop thread.

    Iterating (`for record in consumer`) blocks until records come; the loop ends only when the
    consumer is closed from another thread.
    """

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self._start(on_loop(AsyncConsumer, as_config(config)))

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._call(self.aio.assign, list(partitions))

    def subscribe(self, topics: Iterable[str]) -> None:
        self._call(self.aio.subscribe, [topics] if isinstance(topics, str) else list(topics))

    def unsubscribe(self) -> None:
        self._run(self.aio.unsubscribe())

    def assignment(self) -> set[TopicPartition]:
        return self._call(self.aio.assignment)

    def poll(self, timeout_ms: float = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records are taken from the loop thread a few polls' worth at a time (each trip there
        costs a thread switch); those not handed out yet are not committed."""
        consumer = self.aio
        limit = max_records or consumer.config["max.poll.records"]
        if not consumer._buffer:
            self._run(consumer._fill_buffer(timeout_ms, limit * _RECORDS_PER_TRIP))
        buffer = consumer._buffer  # last record first
        records = buffer[-limit:]
        del buffer[-limit:]
        records.reverse()
        return records

    def __iter__(self) -> Iterator[ConsumerRecord]:
        consumer = self.aio
        while True:
            try:
                record = consumer._buffer.pop()
            except IndexError:
                if consumer._closed:
                    return
                try:
                    self._run(consumer._fill_buffer(
                        1000, consumer.config["max.poll.records"] * _RECORDS_PER_TRIP))
                except IllegalStateError:
                    if consumer._closed:
                        return
                    raise
                continue
            yield record

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        self._call(self.aio.seek, partition, offset)

    def seek_to_beginning(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._call(self.aio.seek_to_beginning, None if partitions is None else list(partitions))

    def seek_to_end(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._call(self.aio.seek_to_end, None if partitions is None else list(partitions))

    def position(self, partition: tuple[str, int]) -> int:
        return self._run(self.aio.position(partition))

    def committed(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int | None]:
        return self._run(self.aio.committed(list(partitions)))

    def commit(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        self._run(self.aio.commit(offsets))

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._call(self.aio.group_metadata)

    def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        self._close(self.aio.close(timeout))
