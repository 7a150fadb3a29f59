"""What the web console shows, read from the cluster with Exactly's async Admin client.

Each page's data is a plain dataclass built here, so that the templates only format it. A part
the broker refuses or cannot answer becomes a `problem` text on its page, not an error page: an
operator looking at an incident needs what can be read.

In-doubt transactions (KIP-939): a two-phase-commit transaction (Enable2Pc, so its timeout is
-1 and it never times out) that is Ongoing waits for its external coordinator (Spark's driver,
the database of a dual write) to commit or abort it. The broker cannot tell one still being
written from one already prepared (prepare is the client's flush), so every open 2PC
transaction is listed first, as in doubt. Until it ends, it holds the last stable offset (LSO)
of each of its partitions at its first offset there: read_committed consumers see nothing
written after it. `held_back` is how many offsets that is (the partition's end offset minus the
transaction's first offset there).

A hanging transaction (KIP-664) is open in a partition's producer state but unknown to any
coordinator as an open transaction on that partition: no one will ever end it but an operator
writing its abort marker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from exactly.client.admin import (
    AsyncAdmin,
    ClusterDescription,
    OffsetSpec,
    ProducerState,
    TransactionDescription,
)
from exactly.client.errors import KafkaConnectionError, KafkaError
from exactly.client.types import NO_TIMEOUT_MS, TransactionState
from exactly.protocol.structs import TopicPartition

READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"


def problem_text(what: str, exc: BaseException) -> str:
    """`what` failed, and why, for a page."""
    if isinstance(exc, (KafkaConnectionError, OSError, TimeoutError)):
        return f"{what}: cannot reach the broker ({exc or type(exc).__name__})"
    if isinstance(exc, KafkaError):
        return f"{what}: {exc}"
    return f"{what}: {type(exc).__name__}: {exc}"


# -- topics and partitions -----------------------------------------------------------------------

@dataclass(slots=True)
class PartitionView:
    topic: str
    partition: int
    leader: int
    log_start: int | None = None
    end: int | None = None  # the high watermark
    lso: int | None = None  # the last stable offset: read_committed reads up to here
    size: int | None = None  # bytes on the leader's disk

    @property
    def held_back(self) -> int | None:
        """Offsets written but not yet readable read_committed (open transactions)."""
        return None if self.end is None or self.lso is None else self.end - self.lso


@dataclass(slots=True)
class TopicView:
    name: str
    internal: bool
    partitions: list[PartitionView]

    @property
    def size(self) -> int:
        return sum(p.size or 0 for p in self.partitions)

    @property
    def records(self) -> int:
        return sum((p.end or 0) - (p.log_start or 0) for p in self.partitions)

    @property
    def held_back(self) -> int:
        return sum(p.held_back or 0 for p in self.partitions)


@dataclass(slots=True)
class TopicsView:
    topics: list[TopicView]
    problems: list[str] = field(default_factory=list)

    def partition(self, tp: tuple[str, int]) -> PartitionView | None:
        for t in self.topics:
            if t.name == tp[0]:
                return next((p for p in t.partitions if p.partition == tp[1]), None)
        return None


async def topics_view(admin: AsyncAdmin, *, include_internal: bool = True) -> TopicsView:
    """Every topic's partitions with their offsets and sizes; user topics first."""
    view = TopicsView([])
    try:
        names = await admin.list_topics(include_internal=include_internal)
        described = await admin.describe_topics(names) if names else {}
    except Exception as exc:  # noqa: BLE001 - shown on the page
        view.problems.append(problem_text("list topics", exc))
        return view
    for d in sorted(described.values(), key=lambda d: (d.internal, d.name)):
        view.topics.append(TopicView(d.name, d.internal, [
            PartitionView(d.name, p.partition, p.leader) for p in d.partitions]))
    parts = {TopicPartition(p.topic, p.partition): p for t in view.topics for p in t.partitions}
    if not parts:
        return view
    offsets = await asyncio.gather(
        _offsets(admin, parts, OffsetSpec.earliest(), READ_UNCOMMITTED),
        _offsets(admin, parts, OffsetSpec.latest(), READ_UNCOMMITTED),
        _offsets(admin, parts, OffsetSpec.latest(), READ_COMMITTED),
        return_exceptions=True)
    for (what, attr), found in zip((("log start offsets", "log_start"), ("end offsets", "end"),
                                    ("last stable offsets", "lso")), offsets, strict=True):
        if isinstance(found, BaseException):
            view.problems.append(problem_text(f"list {what}", found))
            continue
        for tp, offset in found.items():
            setattr(parts[tp], attr, offset)
    try:
        for log_dirs in (await admin.describe_log_dirs()).values():
            for log_dir in log_dirs:
                for tp, replica in log_dir.replicas.items():
                    if tp in parts and not replica.is_future:
                        parts[tp].size = (parts[tp].size or 0) + replica.size
    except Exception as exc:  # noqa: BLE001
        view.problems.append(problem_text("describe log dirs (sizes)", exc))
    return view


async def _offsets(admin: AsyncAdmin, partitions: Iterable[TopicPartition], spec: OffsetSpec,
                   isolation_level: str) -> dict[TopicPartition, int]:
    found = await admin.list_offsets({tp: spec for tp in partitions},
                                     isolation_level=isolation_level)
    return {TopicPartition(*tp): info.offset for tp, info in found.items()}


# -- transactions ------------------------------------------------------------------------------

@dataclass(slots=True)
class TxnPartition:
    tp: TopicPartition
    start_offset: int | None  # the transaction's first offset there, if the leader knows it
    held_back: int | None  # offsets it keeps from read_committed readers there


@dataclass(slots=True)
class TxnView:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    age_ms: int | None
    partitions: list[TxnPartition]

    @property
    def two_pc(self) -> bool:
        return self.timeout_ms == NO_TIMEOUT_MS

    @property
    def open(self) -> bool:
        state = TransactionState.parse(self.state)
        return state is not None and state.is_open

    @property
    def in_doubt(self) -> bool:
        """A 2PC transaction waiting for its coordinator's decision (module docstring)."""
        return self.two_pc and self.state == TransactionState.ONGOING

    @property
    def held_back(self) -> int | None:
        return max((p.held_back for p in self.partitions if p.held_back is not None),
                   default=None)


@dataclass(slots=True)
class HangingView:
    tp: TopicPartition
    producer: ProducerState
    held_back: int | None
    age_ms: int | None  # since the producer's last write there


@dataclass(slots=True)
class TransactionsView:
    transactions: list[TxnView]  # in doubt first, then other open ones, then idle ones
    hanging: list[HangingView]
    problems: list[str] = field(default_factory=list)

    @property
    def in_doubt(self) -> list[TxnView]:
        return [t for t in self.transactions if t.in_doubt]

    @property
    def open(self) -> list[TxnView]:
        return [t for t in self.transactions if t.open]


def _txn_order(t: TxnView) -> tuple[int, int, str]:
    rank = 0 if t.in_doubt else 1 if t.open else 2
    return rank, -(t.age_ms or 0), t.transactional_id


async def transactions_view(admin: AsyncAdmin, now_ms: int,
                            topics: TopicsView | None = None) -> TransactionsView:
    """Every transactional id the coordinators know, and the hanging transactions of every
    partition. The partitions' producers are read before the transactions, so that a
    transaction open in a partition was begun before it was listed: one ended meanwhile may
    show as hanging until the next refresh, one open is never missed."""
    view = TransactionsView([], [])
    topics = topics if topics is not None else await topics_view(admin)
    view.problems.extend(topics.problems)
    partitions = [TopicPartition(p.topic, p.partition) for t in topics.topics for p in t.partitions]
    producers: dict[TopicPartition, list[ProducerState]] = {}
    try:
        producers = await admin.describe_producers(partitions) if partitions else {}
    except Exception as exc:  # noqa: BLE001
        view.problems.append(problem_text("describe producers", exc))
    descriptions: dict[str, TransactionDescription] = {}
    try:
        listing = await admin.list_transactions()
        if listing:
            descriptions = await admin.describe_transactions(t.transactional_id for t in listing)
    except Exception as exc:  # noqa: BLE001
        view.problems.append(problem_text("list transactions", exc))

    def end_of(tp: TopicPartition) -> int | None:
        p = topics.partition(tp)
        return None if p is None else p.end

    open_on: set[tuple[int, TopicPartition]] = set()
    for txn_id, d in descriptions.items():
        txn_parts = []
        for tp in d.partitions:
            start = next((s.current_txn_start_offset for s in producers.get(tp, [])
                          if s.producer_id == d.producer_id and s.current_txn_start_offset >= 0),
                         None)
            end = end_of(tp)
            held = None if start is None or end is None else max(end - start, 0)
            txn_parts.append(TxnPartition(tp, start, held))
            open_on.add((d.producer_id, tp))
        view.transactions.append(TxnView(
            txn_id, d.state, d.producer_id, d.producer_epoch, d.timeout_ms, d.start_time_ms,
            now_ms - d.start_time_ms if d.start_time_ms >= 0 else None, txn_parts))
    view.transactions.sort(key=_txn_order)
    for tp in sorted(producers):
        for s in producers[tp]:
            if s.current_txn_start_offset < 0 or (s.producer_id, tp) in open_on:
                continue
            end = end_of(tp)
            view.hanging.append(HangingView(
                tp, s, None if end is None else max(end - s.current_txn_start_offset, 0),
                now_ms - s.last_timestamp if s.last_timestamp >= 0 else None))
    return view


# -- producers per partition ---------------------------------------------------------------------

@dataclass(slots=True)
class ProducerRow:
    tp: TopicPartition
    state: ProducerState
    transactional_id: str | None  # when a coordinator knows the producer id


@dataclass(slots=True)
class ProducersView:
    rows: list[ProducerRow]
    problems: list[str] = field(default_factory=list)


async def producers_view(admin: AsyncAdmin) -> ProducersView:
    view = ProducersView([])
    topics = await topics_view(admin)
    view.problems.extend(topics.problems)
    partitions = [TopicPartition(p.topic, p.partition) for t in topics.topics for p in t.partitions]
    try:
        producers = await admin.describe_producers(partitions) if partitions else {}
    except Exception as exc:  # noqa: BLE001
        view.problems.append(problem_text("describe producers", exc))
        return view
    ids: dict[int, str] = {}
    try:
        ids = {t.producer_id: t.transactional_id for t in await admin.list_transactions()}
    except Exception as exc:  # noqa: BLE001
        view.problems.append(problem_text("list transactions", exc))
    view.rows = [ProducerRow(tp, s, ids.get(s.producer_id))
                 for tp in sorted(producers) for s in producers[tp]]
    return view


# -- consumer groups -----------------------------------------------------------------------------

@dataclass(slots=True)
class GroupPartition:
    tp: TopicPartition
    committed: int | None
    end: int | None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None or self.end is None else max(
            self.end - self.committed, 0)


@dataclass(slots=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    assignment: list[TopicPartition]


@dataclass(slots=True)
class GroupView:
    group_id: str
    type: str
    state: str
    members: list[MemberView]
    partitions: list[GroupPartition]
    problem: str | None = None

    @property
    def lag(self) -> int | None:
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None


@dataclass(slots=True)
class GroupsView:
    groups: list[GroupView]
    problems: list[str] = field(default_factory=list)


async def groups_view(admin: AsyncAdmin) -> GroupsView:
    """Every consumer group: its members and each committed partition's lag behind the end."""
    view = GroupsView([])
    try:
        listing = await admin.list_consumer_groups()
    except Exception as exc:  # noqa: BLE001
        view.problems.append(problem_text("list consumer groups", exc))
        return view
    ids = sorted(g.group_id for g in listing)
    if not ids:
        return view
    try:
        described = await admin.describe_consumer_groups(ids)
    except Exception as exc:  # noqa: BLE001
        view.problems.append(problem_text("describe consumer groups", exc))
        described = {}
    for group_id in ids:
        d: Any = described.get(group_id)
        group = GroupView(group_id, d.type if d else "", d.state if d else "?", [], [])
        if d is not None:
            group.members = [MemberView(m.member_id, m.client_id, m.host, sorted(m.assignment))
                             for m in d.members]
        try:
            committed = await admin.list_consumer_group_offsets(group_id)
            ends = await _offsets(admin, committed, OffsetSpec.latest(), READ_UNCOMMITTED)
            group.partitions = [GroupPartition(TopicPartition(*tp), o.offset, ends.get(tp))
                                for tp, o in sorted(committed.items())]
        except Exception as exc:  # noqa: BLE001
            group.problem = problem_text(f"offsets of group {group_id!r}", exc)
        view.groups.append(group)
    return view


# -- overview ------------------------------------------------------------------------------------

@dataclass(slots=True)
class OverviewView:
    cluster: ClusterDescription | None
    topics: TopicsView
    transactions: TransactionsView
    groups: GroupsView
    problems: list[str] = field(default_factory=list)

    @property
    def user_topics(self) -> list[TopicView]:
        return [t for t in self.topics.topics if not t.internal]


async def overview_view(admin: AsyncAdmin, now_ms: int) -> OverviewView:
    problems = []
    cluster = None
    try:
        cluster = await admin.describe_cluster()
    except Exception as exc:  # noqa: BLE001
        problems.append(problem_text("describe cluster", exc))
        if isinstance(exc, (KafkaConnectionError, OSError, TimeoutError)):
            # Each other read would wait as long to say the same.
            return OverviewView(None, TopicsView([]), TransactionsView([], []), GroupsView([]),
                                problems)
    topics = await topics_view(admin)
    transactions = await transactions_view(admin, now_ms, topics)
    groups = await groups_view(admin)
    return OverviewView(cluster, topics, transactions, groups, problems)
