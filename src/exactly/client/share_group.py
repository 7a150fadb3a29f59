"""Share group membership (KIP-932), beside the classic group's (group.py): one member of a
share group, sending ShareGroupHeartbeat on a task of its own, whether or not the application
polls: join with epoch 0, then at the interval the coordinator gives; leave with epoch -1 on
close. UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH make it rejoin with epoch 0 (the member keeps
its id). The coordinator's answer carries the assignment, by topic id.

Leaving stops the heartbeat task for sure: it waits with `_loop.wait_event`, not
`asyncio.wait_for`, which on Python 3.11 drops a cancellation that comes as its awaitable
finishes (a subscribe() or a rejoin woke the task just as close() cancelled it: close() then
waited for it forever), and a flag ends its loop even if some other await swallows the
cancellation.

Errors: a coordinator that moved or is loading (errors.COORDINATOR_UNSETTLED) is looked up
again, and it and any retriable error are tried again with backoff (requests.Retry); any other
error answered by the coordinator ends the membership, and the consumer's poll raises it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from exactly.client._loop import stop_tasks, wait_event
from exactly.client.cluster import Cluster
from exactly.client.config import ClientConfig
from exactly.client.errors import (
    COORDINATOR_UNSETTLED,
    SHARE_REJOIN,
    KafkaConnectionError,
    KafkaError,
    Verdict,
    classify,
)
from exactly.client.group import GroupCoordinatorClient
from exactly.client.requests import Backoff, Retry
from exactly.client.types import ShareGroupMetadata
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition

__all__ = ["JOIN_EPOCH", "LEAVE_EPOCH", "ShareMembership"]

log = logging.getLogger("exactly.client")

JOIN_EPOCH, LEAVE_EPOCH = 0, -1


class ShareMembership:
    """One member of a share group: ShareGroupHeartbeat on a task of its own."""

    def __init__(self, cluster: Cluster, config: ClientConfig,
                 coordinator: GroupCoordinatorClient) -> None:
        self.cluster, self.config, self.coordinator = cluster, config, coordinator
        self.group_id = coordinator.group_id
        self.member_id = str(uuid.uuid4())  # KIP-932 v1: the client names itself
        self.member_epoch = JOIN_EPOCH
        self.topics: list[str] = []
        self.assignment: set[TopicPartition] = set()
        self.error: KafkaError | None = None
        self._interval_ms = config["heartbeat.interval.ms"]
        self._send_topics = True
        self._wake = asyncio.Event()
        self._assigned = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._leaving = False  # set by stop() and leave(): the heartbeat loop ends

    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = sorted(set(topics))
        self._send_topics = True
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"share-group-{self.group_id}")

    def metadata(self) -> ShareGroupMetadata:
        return ShareGroupMetadata(self.group_id, self.member_id, self.member_epoch)

    async def wait_assigned(self, timeout: float) -> bool:
        if self.error is not None:
            raise self.error
        if not self._assigned.is_set():
            await wait_event(self._assigned, timeout)
        if self.error is not None:
            raise self.error
        return bool(self.assignment)

    def rejoin(self, why: str) -> None:
        """Join again with epoch 0 (the member keeps its id), e.g. after UNKNOWN_MEMBER_ID."""
        log.info("event=share_group_rejoin group=%s member=%s reason=%s", self.group_id,
                 self.member_id, why)
        self.member_epoch = JOIN_EPOCH
        self._send_topics = True
        self._wake.set()

    async def _run(self) -> None:
        retry = Retry(Backoff(self.config["retry.backoff.ms"] / 1000))
        while not self._leaving:
            try:
                await self._heartbeat()
                retry.reset()
                wait = self._interval_ms / 1000
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                # A client-side error (no code: a connection lost) is tried again, as is a
                # coordinator that moved or loads, and a retriable error.
                if exc.code >= 0 and Verdict.FAIL in classify(exc.code,
                                                               moved=COORDINATOR_UNSETTLED):
                    self.error = exc
                    self._assigned.set()  # wake pollers: they raise it
                    log.error("event=share_group_fatal group=%s error=%s", self.group_id, exc)
                    return
                log.info("event=share_group_retry group=%s error=%s", self.group_id, exc)
                wait = retry.next_delay()
            await wait_event(self._wake, wait)
            self._wake.clear()

    async def _heartbeat(self) -> None:
        joining = self.member_epoch == JOIN_EPOCH
        topics = tuple(self.topics) if self._send_topics or joining else None
        try:
            response = await self.coordinator.send(
                ApiKey.SHARE_GROUP_HEARTBEAT, group_id=self.group_id, member_id=self.member_id,
                member_epoch=self.member_epoch, rack_id=None, subscribed_topic_names=topics)
        except KafkaConnectionError:
            await self.coordinator.rediscover()
            raise
        code = response.error_code
        if code in SHARE_REJOIN:
            self.assignment = set()
            self.rejoin(error_name(code))
            return
        if code in COORDINATOR_UNSETTLED:
            await self.coordinator.rediscover()
        if code != ErrorCode.none:
            raise KafkaError(f"ShareGroupHeartbeat for group {self.group_id!r}: "
                             f"{error_name(code)} ({response.error_message})", code)
        self._send_topics = False
        self.member_id = response.member_id or self.member_id
        self.member_epoch = response.member_epoch
        self._interval_ms = max(int(response.heartbeat_interval.total_seconds() * 1000), 1)
        if response.assignment is not None:
            assignment = await self._names(response.assignment.topic_partitions)
            if assignment != self.assignment or not self._assigned.is_set():
                log.info("event=share_group_assigned group=%s member=%s epoch=%d partitions=%d",
                         self.group_id, self.member_id, self.member_epoch, len(assignment))
            self.assignment = assignment
            self._assigned.set()

    async def _names(self, assigned: Iterable[Any]) -> set[TopicPartition]:
        by_id = {t.topic_id: list(t.partitions) for t in assigned}
        names = self._topic_names()
        if set(by_id) - set(names):
            await self.cluster.refresh(list(self.topics))
            names = self._topic_names()
        return {TopicPartition(names[tid], p) for tid, ps in by_id.items() if tid in names
                for p in ps}

    def _topic_names(self) -> dict[uuid.UUID, str]:
        return {md.topic_id: name for name, md in self.cluster.metadata.topics.items()
                if md.topic_id is not None}

    async def stop(self) -> None:
        """End the heartbeat task, without leaving: close() does this even when its bound cut
        its goodbyes short (before leave()), or the task would heartbeat on, reconnecting, and
        keep a closed consumer in its group."""
        task, self._task = self._task, None
        self._leaving = True
        await stop_tasks([task])

    async def leave(self) -> None:
        await self.stop()
        if self.member_epoch > JOIN_EPOCH:
            try:
                await self.coordinator.send(
                    ApiKey.SHARE_GROUP_HEARTBEAT, group_id=self.group_id,
                    member_id=self.member_id, member_epoch=LEAVE_EPOCH, rack_id=None,
                    subscribed_topic_names=None)
            except KafkaError as exc:
                log.info("event=share_group_leave_failed group=%s error=%s", self.group_id, exc)
        self.member_epoch = JOIN_EPOCH
        self.assignment = set()
