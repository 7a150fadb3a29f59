"""Group membership with the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), and
the group's offsets (OffsetCommit, OffsetFetch).

The membership runs in a task of its own: it joins, heartbeats, and rejoins when the coordinator
says a rebalance is in progress, whether or not the application is polling at that moment, so
several consumers driven from one thread still rebalance. Assignment is eager, as Kafka's range
and roundrobin assignors are: everything is revoked before a rejoin.

Group requests go over a connection of their own to the coordinator: a JoinGroup is parked by
the coordinator until the group is complete, and Fetch responses must not wait behind it.

The offset requests go through the client's one request path (requests.call, with
`GroupCoordinatorClient` as the coordinator): a coordinator that moved (errors.COORDINATOR_MOVED)
is found again, retriable errors are retried a number of times with linear waits, a rebalance
raises CommitFailedError. The membership's own loop retries with requests.Retry and ends on the
group's fatal errors only (errors.GROUP_FATAL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from exactly.client._loop import stop_tasks, wait_event
from exactly.client.assignors import (
    ASSIGNORS,
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from exactly.client.cluster import COORDINATOR_GROUP, Cluster, make_request, request_module
from exactly.client.config import ClientConfig
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    COMMIT_FAILED,
    COORDINATOR_MOVED,
    GROUP_FATAL,
    GROUP_REJOIN,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    Verdict,
    classify,
    classify_all,
)
from exactly.client.requests import Backoff, Decision, Retry, call, coordinator_unreachable
from exactly.client.types import by_topic, duration
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition

log = logging.getLogger("exactly.client")


class CommitFailedError(KafkaError):
    """The commit was refused because the group rebalanced: this member's generation is over.
    Its partitions may now belong to another member; poll again to rejoin."""


# The membership APIs stop at their last versions before the flexible encoding (KIP-482), as
# librdkafka's do: librdkafka's mock cluster advertises JoinGroup v6 but drops the connection on
# it, and these versions carry everything the classic protocol needs (static membership,
# MEMBER_ID_REQUIRED, batch LeaveGroup) on every broker since Kafka 2.3.
MEMBERSHIP_MAX_VERSIONS = {ApiKey.JOIN_GROUP: 5, ApiKey.SYNC_GROUP: 3, ApiKey.HEARTBEAT: 3,
                           ApiKey.LEAVE_GROUP: 3}
# The offset requests' retries: a number of attempts with linear waits, each attempt's wait
# made, the last one's too, before giving up.
_COMMIT_RETRY = Backoff(0.05, cap=1.0, linear=True), 20
_FETCH_RETRY = Backoff(0.02, cap=0.5, linear=True), 200  # waits out open transactions


class GroupCoordinatorClient:
    """The requests to a group's coordinator, over a dedicated connection."""

    def __init__(self, cluster: Cluster, config: ClientConfig, group_id: str) -> None:
        self.cluster, self.config, self.group_id = cluster, config, group_id
        self._conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()

    async def connection(self) -> BrokerConnection:
        async with self._lock:
            if self._conn is None or self._conn.closed:
                shared = await self.cluster.coordinator(COORDINATOR_GROUP, self.group_id)
                self._conn = await BrokerConnection.connect(
                    shared.host, shared.port, client_id=self.config["client.id"],
                    request_timeout_ms=self.config["request.timeout.ms"],
                    connect_timeout_ms=self.config["socket.connection.setup.timeout.ms"],
                    security=self.cluster.security)
                self._conn.node_id = shared.node_id
            return self._conn

    async def rediscover(self) -> None:
        """The coordinator moved: forget it, and close the dedicated connection."""
        self.cluster.forget_coordinator(COORDINATOR_GROUP, self.group_id)
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def exchange(self, conn: BrokerConnection, request: Any, timeout: float | None) -> Any:
        """A request over the dedicated connection (requests.Coordinator); a connection that
        closed is forgotten with its coordinator."""
        try:
            return await conn.send(request, timeout=timeout)
        except KafkaConnectionError:
            if conn.closed:  # not for an answer that could not be decoded
                await self.rediscover()
            raise

    async def send(self, api_key: int, *, timeout: float | None = None, **fields: Any) -> Any:
        conn = await self.connection()
        request = make_request(conn, api_key, max_version=MEMBERSHIP_MAX_VERSIONS.get(api_key),
                               **fields)
        return await self.exchange(conn, request, timeout)

    async def commit(self, offsets: Mapping[TopicPartition, int], *, generation_id: int = -1,
                     member_id: str = "", group_instance_id: str | None = None) -> None:
        """OffsetCommit; retriable coordinator errors are retried, a rebalance raises
        CommitFailedError, anything else KafkaError."""

        def request(conn: BrokerConnection) -> Any:
            module = request_module(conn, ApiKey.OFFSET_COMMIT)
            topics = tuple(
                build(module.OffsetCommitRequestTopic, name=topic, partitions=tuple(
                    build(module.OffsetCommitRequestPartition, partition_index=p,
                          committed_offset=offsets[TopicPartition(topic, p)],
                          committed_leader_epoch=-1, committed_metadata="", commit_timestamp=-1)
                    for p in sorted(parts)))
                for topic, parts in by_topic(offsets).items())
            return make_request(conn, ApiKey.OFFSET_COMMIT, group_id=self.group_id,
                                generation_id_or_member_epoch=generation_id, member_id=member_id,
                                group_instance_id=group_instance_id, topics=topics)

        def errors(response: Any) -> dict[tuple[str, int], int]:
            return {(t.name, p.partition_index): p.error_code
                    for t in response.topics for p in t.partitions if p.error_code}

        def decide(response: Any) -> Decision:
            codes = set(errors(response).values())
            if codes & COMMIT_FAILED:
                raise CommitFailedError(
                    f"commit for group {self.group_id!r} refused: "
                    f"{', '.join(sorted({error_name(c) for c in codes}))}; the group rebalanced "
                    "and these partitions may belong to another member now", min(codes))
            return Decision(classify_all(codes), min(codes, default=ErrorCode.none))

        def fail(response: Any, code: int) -> KafkaError:
            (tp, code), *_ = errors(response).items()
            return KafkaError(f"commit for group {self.group_id!r} failed on {tp[0]}-{tp[1]}: "
                              f"{error_name(code)}", code)

        backoff, attempts = _COMMIT_RETRY
        await call(self, request, decide, Retry(backoff, attempts=attempts), fail=fail,
                   on_error=coordinator_unreachable,
                   give_up=lambda answer, code: KafkaTimeoutError(
                       f"commit for group {self.group_id!r} kept failing with retriable errors"
                       + (f" (last: {answer})" if isinstance(answer, KafkaError) else "")))

    async def fetch(self, partitions: Iterable[TopicPartition], *, require_stable: bool
                    ) -> dict[TopicPartition, int]:
        """Committed offsets (-1: none). With require_stable, offsets that a pending transaction
        may still change are waited for (UNSTABLE_OFFSET_COMMIT is retried)."""
        wanted = list(partitions)
        if not wanted:
            return {}

        def request(conn: BrokerConnection) -> Any:
            module = request_module(conn, ApiKey.OFFSET_FETCH)
            topics = tuple(build(module.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                           for t, ps in by_topic(wanted).items())
            return make_request(conn, ApiKey.OFFSET_FETCH, group_id=self.group_id, topics=topics,
                                require_stable=require_stable)

        def decide(response: Any) -> Decision:
            top = getattr(response, "error_code", 0)
            codes = {p.error_code for t in response.topics for p in t.partitions} | {top}
            codes.discard(ErrorCode.none)
            return Decision(classify_all(codes), min(codes, default=ErrorCode.none))

        backoff, attempts = _FETCH_RETRY
        _conn, response = await call(
            self, request, decide, Retry(backoff, attempts=attempts),
            on_error=coordinator_unreachable,
            fail=lambda response, code: KafkaError(
                f"OffsetFetch for group {self.group_id!r}: {error_name(code)}", code),
            give_up=lambda answer, code: KafkaTimeoutError(
                f"committed offsets of group {self.group_id!r}: its coordinator stayed "
                f"unreachable ({answer})" if isinstance(answer, KafkaError) else
                f"committed offsets of group {self.group_id!r} stayed unstable: a transaction "
                "that commits offsets for it is still open"))
        return {TopicPartition(t.name, p.partition_index): p.committed_offset
                for t in response.topics for p in t.partitions}

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


Listener = Callable[[set[TopicPartition]], Awaitable[None]]


class GroupMembership:
    """One member of a consumer group: join, sync, heartbeat, rejoin, leave."""

    def __init__(self, cluster: Cluster, config: ClientConfig, coordinator: GroupCoordinatorClient,
                 *, on_revoke: Listener, on_assign: Listener) -> None:
        self.cluster, self.config, self.coordinator = cluster, config, coordinator
        self.group_id: str = coordinator.group_id
        self.group_instance_id: str | None = config["group.instance.id"]
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.topics: list[str] = []
        self.assignment: set[TopicPartition] = set()
        self.error: KafkaError | None = None  # fatal: raised to the application by poll
        self._on_revoke, self._on_assign = on_revoke, on_assign
        self._rejoin = asyncio.Event()
        self._assigned = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self._task is not None and not self._task.done()

    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = sorted(set(topics))
        self._assigned.clear()
        self._rejoin.set()
        if not self.active:
            self._task = asyncio.create_task(self._run(), name=f"group-{self.group_id}")

    async def wait_assigned(self, timeout: float) -> bool:
        if self.error is not None:
            raise self.error
        if self._assigned.is_set():
            return True
        await wait_event(self._assigned, timeout)
        if self.error is not None:
            raise self.error
        return self._assigned.is_set()

    async def _run(self) -> None:
        retry = Retry(Backoff(self.config["retry.backoff.ms"] / 1000))
        while True:
            try:
                if self._rejoin.is_set():
                    await self._join_and_sync()
                else:
                    await self._heartbeat()
                retry.reset()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                # Only the group's fatal errors end the membership; any other is tried again.
                if Verdict.FAIL in classify(exc.code, fail=GROUP_FATAL, otherwise=Verdict.RETRY):
                    self.error = exc
                    self._assigned.set()  # wake pollers so they see the error
                    log.error("event=group_fatal group=%s error=%s", self.group_id, exc)
                    return
                log.info("event=group_retry group=%s error=%s", self.group_id, exc)
                await retry.wait()
            except Exception as exc:
                self.error = KafkaError(f"group {self.group_id!r} membership failed: {exc!r}")
                self._assigned.set()
                log.exception("event=group_failed group=%s", self.group_id)
                return

    async def _revoke_all(self) -> None:
        if self.assignment:
            revoked, self.assignment = self.assignment, set()
            self._assigned.clear()
            await self._on_revoke(revoked)

    async def _join_and_sync(self) -> None:
        await self._revoke_all()
        conn = await self.coordinator.connection()
        module = request_module(conn, ApiKey.JOIN_GROUP,
                                max_version=MEMBERSHIP_MAX_VERSIONS[ApiKey.JOIN_GROUP])
        strategy = self.config["partition.assignment.strategy"]
        metadata = encode_subscription(Subscription(self.topics))
        rebalance_ms = self.config["max.poll.interval.ms"]
        response = await self.coordinator.send(
            ApiKey.JOIN_GROUP, timeout=(rebalance_ms + self.config["request.timeout.ms"]) / 1000,
            group_id=self.group_id, session_timeout=duration(self.config["session.timeout.ms"]),
            rebalance_timeout=duration(rebalance_ms), member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocols=(build(module.JoinGroupRequestProtocol, name=strategy, metadata=metadata),),
            reason=None)
        code = response.error_code
        if code == ErrorCode.member_id_required:
            self.member_id = response.member_id
            return  # rejoin at once with the id the coordinator gave
        if code != ErrorCode.none:
            self._join_failed(code, "JoinGroup")
        self.member_id, self.generation_id = response.member_id, response.generation_id
        self.protocol_name = response.protocol_name
        assignments: dict[str, bytes] = {}
        if response.leader == self.member_id:
            assignments = await self._assign(response.members)
        sync_module = request_module(conn, ApiKey.SYNC_GROUP,
                                     max_version=MEMBERSHIP_MAX_VERSIONS[ApiKey.SYNC_GROUP])
        sync = await self.coordinator.send(
            ApiKey.SYNC_GROUP, timeout=(rebalance_ms + self.config["request.timeout.ms"]) / 1000,
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol_name, assignments=tuple(
                build(sync_module.SyncGroupRequestAssignment, member_id=m, assignment=a)
                for m, a in assignments.items()))
        if sync.error_code != ErrorCode.none:
            self._join_failed(sync.error_code, "SyncGroup")
        assignment = decode_assignment(sync.assignment)
        self.assignment = {TopicPartition(t, p) for t, ps in assignment.partitions.items() for p in ps}
        self._rejoin.clear()
        log.info("event=group_joined group=%s member=%s generation=%d partitions=%d",
                 self.group_id, self.member_id, self.generation_id, len(self.assignment))
        await self._on_assign(set(self.assignment))
        self._assigned.set()

    def _join_failed(self, code: int, what: str) -> None:
        if code == ErrorCode.unknown_member_id:
            self.member_id = ""
        if code in COORDINATOR_MOVED:  # found again at the next join; the connection stays
            self.cluster.forget_coordinator(COORDINATOR_GROUP, self.group_id)
        raise KafkaError(f"{what} for group {self.group_id!r}: {error_name(code)}", code)

    async def _assign(self, members: Iterable[Any]) -> dict[str, bytes]:
        """The leader's job: run the assignor over every member's subscription."""
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            sub = decode_subscription(bytes(m.metadata))
            sub.group_instance_id = getattr(m, "group_instance_id", None)
            subscriptions[m.member_id] = sub
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts: dict[str, int] = {}
        for topic in topics:
            try:
                md = await self.cluster.topic(topic)
            except KafkaError as exc:
                log.warning("event=assign_skip_topic group=%s topic=%s error=%s",
                            self.group_id, topic, exc)
                continue
            if md.partitions:
                counts[topic] = max(md.partitions) + 1
        assignor = ASSIGNORS.get(self.protocol_name or "", ASSIGNORS["range"])
        plan = assignor(subscriptions, counts)
        return {m: encode_assignment(Assignment(parts)) for m, parts in plan.items()}

    async def _heartbeat(self) -> None:
        await wait_event(self._rejoin, self.config["heartbeat.interval.ms"] / 1000)
        if self._rejoin.is_set():
            return
        response = await self.coordinator.send(
            ApiKey.HEARTBEAT, group_id=self.group_id, generation_id=self.generation_id,
            member_id=self.member_id, group_instance_id=self.group_instance_id)
        code = response.error_code
        if code == ErrorCode.none:
            return
        if code in GROUP_REJOIN:
            if code == ErrorCode.unknown_member_id:
                self.member_id = ""
            log.info("event=group_rebalance group=%s reason=%s", self.group_id, error_name(code))
            self._rejoin.set()
            return
        if code in COORDINATOR_MOVED:
            await self.coordinator.rediscover()
        raise KafkaError(f"Heartbeat for group {self.group_id!r}: {error_name(code)}", code)

    async def leave(self) -> None:
        """Stop the membership task and leave the group (a static member stays: its session
        timeout ends it, as with Kafka's own clients)."""
        task, self._task = self._task, None
        await stop_tasks([task])
        await self._revoke_all()
        if self.member_id and self.group_instance_id is None:
            try:
                conn = await self.coordinator.connection()
                module = request_module(conn, ApiKey.LEAVE_GROUP,
                                        max_version=MEMBERSHIP_MAX_VERSIONS[ApiKey.LEAVE_GROUP])
                await self.coordinator.send(
                    ApiKey.LEAVE_GROUP, group_id=self.group_id, member_id=self.member_id,
                    members=(build(module.MemberIdentity, member_id=self.member_id,
                                   group_instance_id=None, reason="the consumer is closing"),))
            except KafkaError as exc:
                log.info("event=leave_group_failed group=%s error=%s", self.group_id, exc)
        self.member_id, self.generation_id = "", -1
        self._assigned.clear()
