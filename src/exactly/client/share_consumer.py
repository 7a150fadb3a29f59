"""The share consumer (KIP-932): a member of a share group, reading records that it shares with
the group's other members, each record acquired by one member at a time and acknowledged one by
one, as Kafka's KafkaShareConsumer does.

    consumer = ShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "workers"})
    consumer.subscribe(["jobs"])
    while True:
        for record in consumer.poll(1000):   # acquired for the group's lock duration
            handle(record.value)             # accepted on the next poll (implicit mode)

Membership (share_group.py): a task on the client's loop sends ShareGroupHeartbeat (join with
epoch 0, then at the interval the coordinator gives; leave with epoch -1 on close), whether or
not the application polls. UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH make it rejoin with epoch 0.

Fetching: one share session per partition leader (ShareFetch with ShareSessionEpoch 0 opens it,
each later ShareFetch or ShareAcknowledge carries the next epoch, -1 closes it).
SHARE_SESSION_NOT_FOUND and INVALID_SHARE_SESSION_EPOCH open a new session; the records the
member holds stay its own across sessions. Offsets acquired without a record (compacted away,
or aborted under read_committed) are acknowledged as gaps, as Kafka's client does.

Acknowledgement modes (`share.acknowledgement.mode`):
- implicit (the default): every record a poll returned is accepted by the next poll (or
  commit_sync/commit_async/close); `acknowledge()` is refused.
- explicit: each record is given a type with `acknowledge(record, type)` (ACCEPT, RELEASE,
  REJECT) before the next poll, which otherwise raises IllegalStateError.
Acknowledgements travel on the next ShareFetch, or at once with commit_sync (ShareAcknowledge,
waiting for the answer) or commit_async (not waiting).

Transactional acknowledgements (KIP-1289, a draft): `acknowledge_transactionally(session,
{(topic, partition): offsets})` hands records to a TransactionSession, which stages them in its
open transaction (see TransactionSession.add_share_acks_to_transaction): they are accepted if it
commits and released for redelivery if it aborts, and this consumer no longer acknowledges them
itself. A broker that does not offer TxnShareAcknowledge gets UnsupportedVersionError.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

from exactly.client._loop import CLOSE_TIMEOUT_S, bounded_close, close_within
from exactly.client.blocking import Blocking, on_loop
from exactly.client.cluster import Cluster, make_request, request_module
from exactly.client.config import ClientConfig, as_config
from exactly.client.decode import decode_acquired
from exactly.client.errors import (
    SHARE_SESSION_LOST,
    ConfigError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from exactly.client.group import GroupCoordinatorClient
from exactly.client.share_group import ShareMembership
from exactly.client.types import (
    AcknowledgeType,
    ShareAcknowledgements,
    ShareGroupMetadata,
    ShareRecord,
    ack_batches,
    by_topic,
    duration,
)
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition

__all__ = ["AcknowledgeType", "AsyncShareConsumer", "ShareAcknowledgements", "ShareConsumer",
           "ShareGroupMetadata", "ShareMembership", "ShareRecord", "ack_batches",
           "decode_acquired"]

log = logging.getLogger("exactly.client")

_NEW_SESSION, _CLOSE_SESSION = 0, -1


class _Session(Protocol):
    async def add_share_acks_to_transaction(self, group_id: str,
                                            acknowledgments: ShareAcknowledgements) -> None: ...


@dataclass(slots=True)
class _LeaderSession:
    """The share session with one partition leader: its next epoch and its partitions."""

    node_id: int
    epoch: int = _NEW_SESSION
    partitions: set[TopicPartition] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def reset(self) -> None:
        self.epoch = _NEW_SESSION
        self.partitions = set()

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= 2**31 - 1 else self.epoch + 1


AckCallback = Callable[[dict[TopicPartition, set[int]], KafkaError | None], None]


class AsyncShareConsumer:
    """A share consumer on asyncio. Create it inside a running loop; `await close()` at the end."""

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self.config = as_config(config)
        group_id = self.config["group.id"]
        if not group_id:
            raise ConfigError("a ShareConsumer needs group.id (the share group) in its config")
        self.group_id: str = group_id
        self.explicit = self.config["share.acknowledgement.mode"] == "explicit"
        self._cluster = Cluster(self.config)
        self._coordinator = GroupCoordinatorClient(self._cluster, self.config, group_id)
        self._membership = ShareMembership(self._cluster, self.config, self._coordinator)
        self._leaders: dict[int, _LeaderSession] = {}
        # Delivered by the last poll and not yet sent: offset -> type (None: not acknowledged).
        self._delivered: dict[TopicPartition, dict[int, AcknowledgeType | None]] = {}
        # Acknowledged, waiting for the next ShareFetch or ShareAcknowledge.
        self._pending: dict[TopicPartition, dict[int, AcknowledgeType]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._async_commits: set[asyncio.Task[Any]] = set()
        self.on_acknowledged: AckCallback | None = None
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- membership -----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group and read `topics` (every member of a share group may be given
        every partition: they share them)."""
        self._check_open()
        self._membership.subscribe([topics] if isinstance(topics, str) else topics)

    def assignment(self) -> set[TopicPartition]:
        return set(self._membership.assignment)

    def group_metadata(self) -> ShareGroupMetadata:
        """The group id, member id and member epoch (what TxnShareAcknowledge names)."""
        return self._membership.metadata()

    # -- polling --------------------------------------------------------------------------

    async def poll(self, timeout_ms: float = 1000) -> list[ShareRecord]:
        """Records acquired for this member ([] after timeout_ms without any). First settles the
        last poll's records: implicit mode accepts them; explicit mode needs each acknowledged."""
        self._check_open()
        self._settle("poll()")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            left = deadline - time.monotonic()
            if not await self._membership.wait_assigned(left) and not self._pending:
                if left <= 0:
                    return []
                await asyncio.sleep(min(left, 0.1))  # assigned nothing (yet): look again
                continue
            records = await self._fetch_all(min(max(left, 0) * 1000,
                                                self.config["fetch.max.wait.ms"]))
            if records or deadline - time.monotonic() <= 0:
                for r in records:
                    self._delivered.setdefault(TopicPartition(r.topic, r.partition), {})[
                        r.offset] = None
                return records

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT
                    ) -> None:
        """Give a record of the last poll its acknowledgement (explicit mode); it is sent with
        the next poll or commit."""
        self._check_open()
        if not self.explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit; in "
                                    "implicit mode the next poll accepts every record")
        kind = AcknowledgeType(type)
        if kind is AcknowledgeType.RENEW:
            raise UnsupportedVersionError("AcknowledgeType.RENEW needs ShareAcknowledge v2 "
                                          "(KIP-1222), which this client does not speak yet")
        if kind is AcknowledgeType.GAP:
            raise ValueError("GAP is for offsets without a record; use ACCEPT, RELEASE or REJECT")
        delivered = self._delivered.get(TopicPartition(record.topic, record.partition), {})
        if delivered.get(record.offset, 0) is not None:  # not delivered, or acknowledged
            raise IllegalStateError(
                f"{record.topic}-{record.partition} offset {record.offset} is not a record of the "
                "last poll still held by this consumer: acknowledge each record once, before the "
                "next poll")
        delivered[record.offset] = kind

    def _settle(self, call: str) -> None:
        """Move the last poll's acknowledged records to the pending acknowledgements."""
        unacked = sum(1 for acks in self._delivered.values() for t in acks.values() if t is None)
        if unacked and self.explicit and call == "poll()":
            raise IllegalStateError(f"{unacked} record(s) of the last poll are not acknowledged: "
                                    "with share.acknowledgement.mode=explicit call acknowledge() "
                                    "for each before the next poll")
        for tp, acks in self._delivered.items():
            done = {o: t for o, t in acks.items() if t is not None or not self.explicit}
            for offset in done:
                del acks[offset]
            if done:
                self._pending.setdefault(tp, {}).update(
                    {o: AcknowledgeType.ACCEPT if t is None else t for o, t in done.items()})
        self._delivered = {tp: acks for tp, acks in self._delivered.items() if acks}

    # -- commits --------------------------------------------------------------------------

    async def commit_sync(self) -> dict[TopicPartition, KafkaError | None]:
        """Send the acknowledgements now (ShareAcknowledge) and wait for the answer: per
        partition, None or the error the broker gave."""
        self._check_open()
        self._settle("commit_sync()")
        return await self._send_pending()

    def commit_async(self) -> asyncio.Task[dict[TopicPartition, KafkaError | None]]:
        """Send the acknowledgements without waiting; `on_acknowledged` hears the outcome."""
        self._check_open()
        self._settle("commit_async()")
        task = asyncio.create_task(self._send_pending())
        self._async_commits.add(task)
        task.add_done_callback(self._async_commits.discard)
        return task

    async def acknowledge_transactionally(self, session: _Session,
                                          acknowledgments: Mapping[tuple[str, int], Iterable[int]],
                                          type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """KIP-1289: accept (or reject) records of the last poll in the
        session's open transaction; they are settled when it ends, not by this consumer."""
        self._check_open()
        kind = AcknowledgeType(type)
        if kind not in (AcknowledgeType.ACCEPT, AcknowledgeType.REJECT):
            raise ValueError("only ACCEPT and REJECT can be acknowledged in a transaction")
        wanted: dict[TopicPartition, dict[int, AcknowledgeType]] = {}
        for (topic, partition), offsets in acknowledgments.items():
            tp = TopicPartition(topic, partition)
            held = self._delivered.get(tp, {})
            for offset in offsets:
                if held.get(offset, 0) is not None:
                    raise IllegalStateError(
                        f"{topic}-{partition} offset {offset} is not a record of the last poll "
                        "that this consumer still holds unacknowledged")
                wanted.setdefault(tp, {})[offset] = kind
        if not wanted:
            return
        await session.add_share_acks_to_transaction(
            self.group_id, ShareAcknowledgements(self._membership.metadata(), wanted))
        for tp, offsets in wanted.items():  # the transaction settles them now
            held = self._delivered[tp]
            for offset in offsets:
                held.pop(offset, None)
            if not held:
                del self._delivered[tp]

    # -- the wire -------------------------------------------------------------------------

    async def _leader_of(self, tp: TopicPartition) -> int:
        md = await self._cluster.topic(tp.topic, allow_auto_create=False)
        if md.topic_id is not None:
            self._topic_ids[tp.topic] = md.topic_id
        return md.partitions.get(tp.partition, -1)

    async def _by_leader(self, partitions: Iterable[TopicPartition]
                         ) -> dict[int, set[TopicPartition]]:
        out: dict[int, set[TopicPartition]] = {}
        for tp in partitions:
            try:
                leader = await self._leader_of(tp)
            except KafkaError as exc:
                log.info("event=share_fetch_no_leader partition=%s error=%s", tp, exc)
                continue
            if leader >= 0:
                out.setdefault(leader, set()).add(tp)
        return out

    def _session(self, node_id: int) -> _LeaderSession:
        return self._leaders.setdefault(node_id, _LeaderSession(node_id))

    def _topics(self, module: Any, topic_class: str, partition_class: str, batch_class: str,
                partitions: Iterable[TopicPartition],
                acks: Mapping[TopicPartition, Mapping[int, AcknowledgeType]]) -> tuple[Any, ...]:
        by_topic: dict[str, list[Any]] = {}
        for tp in sorted(partitions):
            batches = tuple(build(getattr(module, batch_class), first_offset=f, last_offset=last,
                                  acknowledge_types=types)
                            for f, last, types in ack_batches(acks.get(tp, {})))
            by_topic.setdefault(tp.topic, []).append(build(
                getattr(module, partition_class), partition_index=tp.partition,
                acknowledgement_batches=batches))
        return tuple(build(getattr(module, topic_class), topic_id=self._topic_ids[t],
                           partitions=tuple(ps)) for t, ps in by_topic.items())

    def _take_pending(self, partitions: Iterable[TopicPartition]
                      ) -> dict[TopicPartition, dict[int, AcknowledgeType]]:
        return {tp: self._pending.pop(tp) for tp in list(partitions) if tp in self._pending}

    def _restore(self, acks: Mapping[TopicPartition, Mapping[int, AcknowledgeType]]) -> None:
        for tp, by_offset in acks.items():
            self._pending.setdefault(tp, {}).update(by_offset)

    def _report(self, acks: Mapping[TopicPartition, Mapping[int, AcknowledgeType]],
                errors: Mapping[TopicPartition, int], results: dict[TopicPartition,
                                                                     KafkaError | None]) -> None:
        for tp, by_offset in acks.items():
            code = errors.get(tp, ErrorCode.none)
            error = None if code == ErrorCode.none else KafkaError(
                f"acknowledgement of {tp.topic}-{tp.partition} refused: {error_name(code)}", code)
            results[tp] = error
            if error is not None:
                log.warning("event=share_ack_failed partition=%s error=%s", tp, error)
            if self.on_acknowledged is not None:
                self.on_acknowledged({tp: set(by_offset)}, error)

    async def _fetch_all(self, wait_ms: float) -> list[ShareRecord]:
        assigned = self._membership.assignment
        plan = await self._by_leader(assigned | set(self._pending))
        for node_id, session in self._leaders.items():  # leaders we no longer read from
            if session.partitions and node_id not in plan:
                plan[node_id] = set()
        rounds = await asyncio.gather(*(self._fetch(n, parts & assigned, parts - assigned, wait_ms)
                                        for n, parts in plan.items()))
        return [r for got in rounds for r in got]

    async def _fetch(self, node_id: int, wanted: set[TopicPartition],
                     acks_only: set[TopicPartition], wait_ms: float) -> list[ShareRecord]:
        """One node's round; a connection lost or a retriable error is logged and the round
        left empty (poll goes on until its timeout, as Kafka's does), anything else raised."""
        try:
            return await self._fetch_round(node_id, wanted, acks_only, wait_ms)
        except KafkaError as exc:
            if not (isinstance(exc, KafkaConnectionError | KafkaTimeoutError) or exc.retriable):
                raise
            log.info("event=share_fetch_retry node=%d error=%s", node_id, exc)
            self._cluster.metadata.fetched_at = 0.0  # the leader may have moved
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
            return []

    async def _fetch_round(self, node_id: int, wanted: set[TopicPartition],
                           acks_only: set[TopicPartition], wait_ms: float) -> list[ShareRecord]:
        session = self._session(node_id)
        async with session.lock:
            if acks_only:  # acknowledgements of partitions not fetched any more
                await self._acknowledge(session, acks_only, {})
            if session.epoch == _NEW_SESSION:
                if not wanted:
                    return []
                await self._share_fetch(session, wanted, 0, 0)  # open it; acks need epoch > 0
            return await self._share_fetch(session, wanted, wait_ms,
                                           self.config["max.poll.records"])

    async def _share_fetch(self, session: _LeaderSession, wanted: set[TopicPartition],
                           wait_ms: float, max_records: int) -> list[ShareRecord]:
        opening = session.epoch == _NEW_SESSION
        acks = {} if opening else self._take_pending(wanted)
        named = wanted if opening else (wanted - session.partitions) | set(acks)
        forgotten = session.partitions - wanted
        conn = await self._cluster.connection(session.node_id)
        module = request_module(conn, ApiKey.SHARE_FETCH)
        request = make_request(
            conn, ApiKey.SHARE_FETCH, group_id=self.group_id,
            member_id=self._membership.member_id, share_session_epoch=session.epoch,
            max_wait=duration(wait_ms), min_bytes=self.config["fetch.min.bytes"] if max_records else 0,
            max_bytes=self.config["fetch.max.bytes"], max_records=max_records,
            batch_size=max_records or 1,
            topics=self._topics(module, "FetchTopic", "FetchPartition", "AcknowledgementBatch",
                                named, acks),
            forgotten_topics_data=tuple(
                build(module.ForgottenTopic, topic_id=self._topic_ids[t], partitions=tuple(ps))
                for t, ps in by_topic(sorted(forgotten)).items()))
        try:
            response = await conn.send(request, timeout=wait_ms / 1000
                                       + self.config["request.timeout.ms"] / 1000)
        except KafkaError:
            session.reset()  # the broker may or may not have moved the epoch on
            self._restore(acks)
            raise
        if response.error_code != ErrorCode.none:
            self._restore(acks)
            self._session_failed(session, response.error_code, "ShareFetch",
                                 response.error_message)
            return []
        session.advance()
        session.partitions = (session.partitions | wanted) - forgotten
        names = {v: k for k, v in self._topic_ids.items()}
        records: list[ShareRecord] = []
        ack_errors: dict[TopicPartition, int] = {}
        for topic in response.responses:
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                ack_errors[tp] = p.acknowledge_error_code
                if p.error_code != ErrorCode.none:
                    log.info("event=share_fetch_partition_error partition=%s error=%s", tp,
                             error_name(p.error_code))
                    if p.error_code in (ErrorCode.not_leader_or_follower,
                                        ErrorCode.unknown_topic_or_partition):
                        self._cluster.metadata.fetched_at = 0.0  # refresh the leaders
                    continue
                got, gaps = decode_acquired(name, p.partition_index, p.records, p.acquired_records)
                records += got
                if gaps:
                    self._pending.setdefault(tp, {}).update(
                        dict.fromkeys(gaps, AcknowledgeType.GAP))
        self._report(acks, ack_errors, {})
        return records

    def _session_failed(self, session: _LeaderSession, code: int, api: str,
                        message: str | None) -> None:
        if code in SHARE_SESSION_LOST:
            log.info("event=share_session_reset node=%d reason=%s", session.node_id,
                     error_name(code))
            session.reset()
            return
        if code == ErrorCode.unknown_member_id:
            session.reset()
            self._membership.rejoin(f"{api}: {error_name(code)}")
            return
        raise KafkaError(f"{api} for share group {self.group_id!r}: {error_name(code)} "
                         f"({message})", code)

    async def _acknowledge(self, session: _LeaderSession, partitions: set[TopicPartition],
                           results: dict[TopicPartition, KafkaError | None]) -> None:
        acks = self._take_pending(partitions)
        if not acks:
            return
        if session.epoch == _NEW_SESSION:  # no session: nothing can be acknowledged here
            for tp in acks:
                results[tp] = KafkaError(
                    f"acknowledgements of {tp.topic}-{tp.partition} lost: the share session "
                    "ended; the records will be delivered again when their locks expire",
                    ErrorCode.share_session_not_found)
            return
        conn = await self._cluster.connection(session.node_id)
        module = request_module(conn, ApiKey.SHARE_ACKNOWLEDGE)
        try:
            response = await conn.send(make_request(
                conn, ApiKey.SHARE_ACKNOWLEDGE, group_id=self.group_id,
                member_id=self._membership.member_id, share_session_epoch=session.epoch,
                topics=self._topics(module, "AcknowledgeTopic", "AcknowledgePartition",
                                    "AcknowledgementBatch", acks, acks)))
        except KafkaError:
            session.reset()
            self._restore(acks)
            raise
        if response.error_code != ErrorCode.none:
            self._restore(acks)
            self._session_failed(session, response.error_code, "ShareAcknowledge",
                                 response.error_message)
            return
        session.advance()
        names = {v: k for k, v in self._topic_ids.items()}
        errors = {TopicPartition(names[t.topic_id], p.partition_index): p.error_code
                  for t in response.responses if t.topic_id in names for p in t.partitions}
        self._report(acks, errors, results)

    async def _send_pending(self) -> dict[TopicPartition, KafkaError | None]:
        results: dict[TopicPartition, KafkaError | None] = {}
        for node_id, parts in (await self._by_leader(set(self._pending))).items():
            session = self._session(node_id)
            async with session.lock:
                await self._acknowledge(session, parts, results)
        return results

    # -- closing --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the share consumer is closed")

    async def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        """Send the acknowledgements (implicit mode: the last poll's records are accepted;
        explicit mode: records not acknowledged are released), close the share sessions and
        leave the group, in at most `timeout` seconds (None: no bound), as Kafka's
        close(Duration); what was not acknowledged by then comes back when its lock expires."""
        if self._closed:
            return
        self._closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            # As Kafka's KafkaShareConsumer: the acknowledgements, then the share sessions
            # closed (epoch -1), each answered, and only then the leave. (A client that sends
            # its last ShareAcknowledge and the leave at once, as librdkafka 2.16 does, relies on
            # the broker keeping the session after the leave, as Kafka 4.4 does.)
            async with bounded_close("share consumer", timeout):
                if self._async_commits:
                    await asyncio.gather(*self._async_commits, return_exceptions=True)
                self._settle("close()")
                with contextlib.suppress(KafkaError):
                    await self._send_pending()
                for session in self._leaders.values():
                    if session.epoch != _NEW_SESSION:
                        await self._close_session(session)
                await self._membership.leave()
        finally:
            # Also when the bound cut the goodbyes short: the heartbeat task ends (it would
            # heartbeat on, reconnecting), and the connections close within what is left of
            # the timeout.
            await close_within(deadline, self._membership.stop, self._coordinator.close,
                                self._cluster.close)

    async def _close_session(self, session: _LeaderSession) -> None:
        """ShareAcknowledge with epoch -1: the broker releases what this member still holds.
        Under the session's lock: after a ShareFetch in flight (a poll on another task), whose
        acknowledgements go first."""
        async with session.lock:
            if session.epoch == _NEW_SESSION:
                return
            try:
                conn = await self._cluster.connection(session.node_id)
                await conn.send(make_request(
                    conn, ApiKey.SHARE_ACKNOWLEDGE, group_id=self.group_id,
                    member_id=self._membership.member_id, share_session_epoch=_CLOSE_SESSION,
                    topics=()))
            except KafkaError as exc:
                log.info("event=share_session_close_failed node=%d error=%s", session.node_id,
                         exc)
            session.reset()


class ShareConsumer(Blocking[AsyncShareConsumer]):
    """The blocking ShareConsumer: AsyncShareConsumer's methods, run on the client's loop
    thread. One thread at a time may use it, as with Kafka's KafkaShareConsumer."""

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self._start(on_loop(AsyncShareConsumer, as_config(config)))

    def subscribe(self, topics: Iterable[str]) -> None:
        self._call(self.aio.subscribe, [topics] if isinstance(topics, str) else list(topics))

    def assignment(self) -> set[TopicPartition]:
        return self.aio.assignment()

    def group_metadata(self) -> ShareGroupMetadata:
        return self.aio.group_metadata()

    def poll(self, timeout_ms: float = 1000) -> list[ShareRecord]:
        return self._run(self.aio.poll(timeout_ms))

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT
                    ) -> None:
        self._call(self.aio.acknowledge, record, type)

    def commit_sync(self) -> dict[TopicPartition, KafkaError | None]:
        return self._run(self.aio.commit_sync())

    def commit_async(self) -> None:
        self._call(self.aio.commit_async)

    def acknowledge_transactionally(self, session: Any,
                                    acknowledgments: Mapping[tuple[str, int], Iterable[int]],
                                    type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """KIP-1289: `session` is a TransactionSession (blocking or asyncio)."""
        self._run(self.aio.acknowledge_transactionally(
            getattr(session, "aio", session),
            {tp: list(offsets) for tp, offsets in acknowledgments.items()}, type))

    def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        self._close(self.aio.close(timeout))
