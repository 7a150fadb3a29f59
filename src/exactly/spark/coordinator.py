"""The driver's side of an exactly-once write: a QueryCoordinator per query and process, which
holds the clients the two-phase commit needs from one micro-batch to the next.

Where the driver's side runs. Python data sources run their driver-side code in Python workers
that the Spark driver's JVM spawns and reuses, not in the driver's own Python process: a stream
writer is made in one worker for each micro-batch, to be pickled to the tasks (its constructor
checks the broker and reads the newest decision there), and made again in another for each
commit() or abort() (exactly.spark.stream_sink). A worker's module-level state lives as long as
the worker, so `QueryCoordinator.of` keeps one coordinator per query (its transactional id
prefix, decisions topic, way of committing and client settings) in each process. A new worker
(the first batch, or one Spark starts after it reaped an idle one) starts from nothing and works
the same, at the cost of making its clients once.

What it holds: one Admin (ListTransactions, DescribeTransactions, the decisions topic's metadata
and offsets), one producer of decisions (acks=all, not idempotent; see exactly.spark.decisions),
and the query's DecisionReader with its consumer, which reads only what was written since the
last batch. The broker's capabilities (exactly.spark.capabilities) and the decisions topic's
existence are established once per process, on first use. In steady state a micro-batch makes no
client on the driver, apart from the one session per participant that completing it takes
(TransactionSession.resume by producer id and epoch: EndTxn, no InitProducerId).

Held clients go bad: a broker restarted between batches, a connection closed while idle. A call
that fails in a way that may be the client's (a lost connection, a timeout, a retriable error
code) discards the client and is made once more with a new one; a broker's definite answer is
raised as is. Each call so repeated may run twice: reads, CreateTopics (TOPIC_ALREADY_EXISTS is
fine) and the decision's record (a duplicate is the same decision). Clients not used for
IDLE_CLOSE_S are closed, to be made anew when next needed.

Every client a coordinator makes comes from its ClientFactory (exactly.spark.clients), which
counts them; `batch_bootstraps()` gives what a micro-batch's driver work made in this process,
reported by `event=spark_batch_committed` as `bootstraps=N`.

`Finisher` is the part of the commit the tasks share: finishing one transactional id's
transaction by a decision (KIP-939's InitProducerId(KeepPreparedTxn) and completeTransaction, or
a commit by producer id and epoch as Flink's KafkaSink did before FLIP-319). In a task it makes
its clients per call; in a QueryCoordinator it describes transactions with the held Admin.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

from exactly import failpoints
from exactly.client import (
    Admin,
    AdminError,
    Consumer,
    IllegalStateError,
    KafkaError,
    PreparedTxnState,
    Producer,
    State,
    TransactionError,
    TransactionSession,
)
from exactly.client.admin import TransactionDescription, TransactionListing
from exactly.client.types import TransactionState
from exactly.protocol.errors import ErrorCode
from exactly.spark.capabilities import check_keep_prepared, check_producer_id
from exactly.spark.clients import ADMIN, CONSUMER, PROCESS, PRODUCER, ClientFactory
from exactly.spark.decisions import (
    DECISIONS_PRODUCER,
    Decision,
    DecisionReader,
    create_topic_if_missing,
    send_decision,
)
from exactly.spark.options import DECISIONS_TOPIC, KEEP_PREPARED, PRODUCER_ID

__all__ = ["COMPLETION_THREADS", "IDLE_CLOSE_S", "NEWEST", "RESUME_TIMEOUT_MS", "BatchOutputLost",
           "Finisher", "QueryCoordinator", "close_all", "query_pattern", "unfinished"]

log = logging.getLogger("exactly.spark.stream_sink")  # the events the sink has always logged

T = TypeVar("T")

# producer-id mode's default transaction.timeout.ms: Kafka's default transaction.max.timeout.ms
RESUME_TIMEOUT_MS = 900_000
COMPLETION_THREADS = 8  # participants the driver completes at a time
IDLE_CLOSE_S = 600.0  # a coordinator's clients unused this long are closed (made anew on use)


class BatchOutputLost(RuntimeError):
    """A decided transaction was aborted by the broker before the driver committed it."""


class _Newest(enum.Enum):
    NEWEST = enum.auto()


NEWEST = _Newest.NEWEST  # QueryCoordinator.leftovers: by the newest decision, read now


def query_pattern(prefix: str) -> re.Pattern[str]:
    """The transactional ids of a streaming query: `<prefix>-<partition>`."""
    return re.compile(re.escape(prefix) + r"-\d+")


def unfinished(listed: Iterable[TransactionListing], pattern: re.Pattern[str]) -> list[str]:
    """The ids `pattern` matches whose transaction is not finished, sorted."""
    return sorted(t.transactional_id for t in listed
                  if pattern.fullmatch(t.transactional_id) and _unfinished(t.state))


def _unfinished(name: str) -> bool:
    """A transaction in this state may still be open; one in a state this client does not
    know is taken as open, so that it is finished rather than left behind."""
    state = TransactionState.parse(name)
    return state is None or state.is_open


def _describe(admin: Admin, txn_id: str) -> TransactionDescription | None:
    """The coordinator's entry for txn_id; None if it has none (expired)."""
    try:
        return admin.describe_transactions([txn_id]).get(txn_id)
    except AdminError as exc:
        if exc.code == ErrorCode.transactional_id_not_found:
            return None
        raise


class Finisher:
    """Finishes a streaming query's transactions by a decision, in either way of committing
    (exactly.spark.stream_sink). The tasks use it before their InitProducerId (with `clients`
    making a client per call); the driver's QueryCoordinator is one."""

    def __init__(self, client: Mapping[str, str], prefix: str,
                 transaction_resume: str = KEEP_PREPARED, clients: ClientFactory = PROCESS) -> None:
        self.client = dict(client)
        self.prefix = prefix
        self.by_producer_id = transaction_resume == PRODUCER_ID
        self.timeout_ms = int(self.client.get("transaction.timeout.ms", RESUME_TIMEOUT_MS))
        self.clients = clients

    def session_config(self, transactional_id: str) -> dict[str, str]:
        """A session's config: an ordinary transaction with the query's timeout (producer-id),
        or KIP-939 2PC, which the broker never times out (keep-prepared)."""
        if self.by_producer_id:
            return {**self.client, "transactional.id": transactional_id,
                    "transaction.timeout.ms": str(self.timeout_ms)}
        return {**self.client, "transactional.id": transactional_id,
                "transaction.two.phase.commit.enable": "true"}

    def describe(self, txn_id: str) -> TransactionDescription | None:
        """The coordinator's entry for txn_id; None if it has none (expired)."""
        with self.clients.admin(self.client) as admin:
            return _describe(admin, txn_id)

    def initialize(self, session: TransactionSession, decision: Decision | None) -> None:
        """InitProducerId, fencing earlier sessions of the id, and the leftover under it
        finished: kept and completed by `decision` (keep-prepared), or aborted by the broker
        (producer-id: a decided one was committed before, by commit_decided)."""
        if self.by_producer_id:
            session.initialize()
            return
        session.initialize(keep_prepared_txn=True)
        if session.state is not State.PREPARED:
            return
        decided = decision.participants.get(session.transactional_id, "") if decision else ""
        log.info("event=spark_leftover transactional_id=%s prepared=%s decided=%s",
                 session.transactional_id, session.prepared_state, decided or "-")
        session.complete_transaction(PreparedTxnState(decided))

    def commit_decided(self, txn_id: str, decision: Decision | None) -> None:
        """Producer-id mode: commit txn_id's transaction if `decision` names it and it is still
        open; report it if the broker aborted it. Runs before anything sends InitProducerId on
        txn_id."""
        if decision is None or not decision.participants.get(txn_id):
            return
        state = PreparedTxnState(decision.participants[txn_id])
        found = self.describe(txn_id)
        if found is None:
            return
        if found.state == TransactionState.ONGOING and (found.producer_id, found.producer_epoch) == (
                state.producer_id, state.epoch):
            log.info("event=spark_leftover transactional_id=%s decided=%s batch=%d action=commit",
                     txn_id, state, decision.batch)
            self.resume_commit(txn_id, state, decision.batch)
        elif _aborted(found, state):
            _report_lost(txn_id, state, decision.batch, found.state)

    def resume_commit(self, txn_id: str, state: PreparedTxnState, batch: int) -> bool:
        """Commit the transaction of `state` by its producer id and epoch (EndTxn, no
        InitProducerId). False, with the loss reported, if the broker had aborted it."""
        try:
            with self.clients.resume(txn_id, state.producer_id, state.epoch,
                                     self.session_config(txn_id)) as session:
                session.commit_transaction()
            return True
        except TransactionError as exc:
            found = self.describe(txn_id)
            if found is not None and _committed(found, state):
                return True  # committed meanwhile by another hand (a retried commit)
            if found is None or not _aborted(found, state):
                raise
            _report_lost(txn_id, state, batch, found.state, cause=str(exc))
            return False


class QueryCoordinator(Finisher):
    """The driver's side of one exactly-once query in this process: see the module doc.

    `of(...)` gives the process's coordinator of a query; one made directly (`with
    QueryCoordinator(...) as c:`) is the caller's, closed by it."""

    def __init__(self, client: Mapping[str, str], prefix: str,
                 decisions_topic: str = DECISIONS_TOPIC,
                 transaction_resume: str = KEEP_PREPARED) -> None:
        super().__init__(client, prefix, transaction_resume, ClientFactory(parent=PROCESS))
        self.transaction_resume = transaction_resume
        self.decisions_topic = decisions_topic
        self.reader = DecisionReader(self.client, decisions_topic, self.clients)
        self._held: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._checked = False
        self._topic_exists = False
        self._counted = 0  # bootstraps when batch_bootstraps() was last asked
        self.last_used = time.monotonic()

    @classmethod
    def of(cls, client: Mapping[str, str], prefix: str, decisions_topic: str = DECISIONS_TOPIC,
           transaction_resume: str = KEEP_PREPARED) -> QueryCoordinator:
        """This process's coordinator of the query, made on first use."""
        key = (prefix, decisions_topic, transaction_resume, tuple(sorted(client.items())))
        now = time.monotonic()
        with _registry_lock:
            for other in _coordinators.values():
                if now - other.last_used > IDLE_CLOSE_S:
                    other.close()
            coordinator = _coordinators.get(key)
            if coordinator is None:
                coordinator = _coordinators[key] = cls(client, prefix, decisions_topic,
                                                       transaction_resume)
            coordinator.last_used = now
        return coordinator

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the held clients -------------------------------------------------------------------

    def _make(self, kind: str) -> Any:
        if kind == ADMIN:
            return self.clients.admin(self.client)
        if kind == PRODUCER:
            return self.clients.producer({**self.client, **DECISIONS_PRODUCER})
        return self.clients.consumer(self.reader.consumer_config)

    def _client(self, kind: str) -> Any:
        with self._lock:
            held = self._held.get(kind)
            if held is None:
                held = self._held[kind] = self._make(kind)
            return held

    def _discard(self, kind: str, client: Any) -> None:
        with self._lock:
            if self._held.get(kind) is not client:
                return  # discarded and made anew already, by another thread
            del self._held[kind]
        _close_quietly(client)

    def _use(self, kinds: tuple[str, ...], action: Callable[..., T]) -> T:
        """action(*clients of `kinds`), with the held clients; if it fails in a way that may be
        theirs, once more with new ones (see the module doc)."""
        self.last_used = time.monotonic()
        for attempt in (1, 2):
            clients = [self._client(kind) for kind in kinds]
            try:
                return action(*clients)
            except Exception as exc:
                if not _client_may_be_at_fault(exc):
                    raise
                for kind, client in zip(kinds, clients, strict=True):
                    self._discard(kind, client)
                if attempt == 2:
                    raise
                log.info("event=spark_client_renewed prefix=%s clients=%s error=%r",
                         self.prefix, ",".join(kinds), exc)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the held clients; the coordinator makes new ones if it is used again."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for client in held:
            _close_quietly(client)

    def batch_bootstraps(self) -> int:
        """Clients this coordinator made (resumed sessions excepted) since the last call: a
        micro-batch's driver work in this process, asked at the end of its commit."""
        total = self.clients.bootstraps
        made, self._counted = total - self._counted, total
        return made

    # -- once per process -------------------------------------------------------------------

    def check(self) -> None:
        """Raise OptionError unless the broker can serve this way of committing (once)."""
        if self._checked:
            return
        if self.by_producer_id:
            check_producer_id(self.client, self.prefix, self.timeout_ms, self.clients)
        else:
            check_keep_prepared(self.client, self.prefix, self.clients)
        self._checked = True

    def ensure_topic(self) -> None:
        """Create the decisions topic unless it exists (asked once)."""
        if self._topic_exists:
            return
        self._use((ADMIN,), lambda admin: create_topic_if_missing(admin, self.decisions_topic))
        self._topic_exists = True

    # -- the two-phase commit ---------------------------------------------------------------

    def latest(self) -> Decision | None:
        """The newest decision of the query (reading what is new since the last call)."""
        def read(admin: Admin, consumer: Consumer) -> Decision | None:
            return self.reader.latest(self.prefix, admin, consumer)
        return self._use((ADMIN, CONSUMER), read)

    def describe(self, txn_id: str) -> TransactionDescription | None:
        return self._use((ADMIN,), lambda admin: _describe(admin, txn_id))

    def open_transactions(self, pattern: re.Pattern[str] | None = None) -> list[str]:
        """The transactional ids of the query (or those `pattern` matches) whose transaction
        is not finished."""
        listed = self._use((ADMIN,), lambda admin: admin.list_transactions())
        return unfinished(listed, pattern or query_pattern(self.prefix))

    def leftovers(self, keep: Collection[str] = (),
                  decision: Decision | None | _Newest = NEWEST) -> None:
        """Finish the query's open transactions other than `keep` by `decision` (the newest,
        read now, unless given): a decided one is committed, any other aborted."""
        if decision is NEWEST:
            decision = self.latest()
        for txn_id in self.open_transactions():
            if txn_id in keep:
                continue
            if self.by_producer_id:
                self.commit_decided(txn_id, decision)
            with self.clients.session(self.session_config(txn_id)) as session:
                self.initialize(session, decision)

    def decide(self, batch: int, participants: Mapping[str, str], query_id: str) -> Decision:
        """Record the decision to commit `participants` (transactional id -> PreparedTxnState
        text) as batch `batch` of the query, durably (acks=all), before any is completed."""
        self.ensure_topic()
        decision = Decision(self.prefix, batch, dict(participants), query_id)
        self._use((PRODUCER,), lambda producer: send_decision(producer, self.decisions_topic,
                                                              decision))
        return decision

    def complete(self, batch: int, participants: Mapping[str, str]) -> None:
        """Commit the decided participants of `batch`. Raises BatchOutputLost, after every
        other participant is committed, if the broker had aborted any (producer-id mode, past
        transaction.timeout.ms)."""
        failpoints.hit("spark.driver.after_decision", count=batch)

        def complete(item: tuple[str, str]) -> bool:
            committed = self.resume_commit(item[0], PreparedTxnState(item[1]), batch)
            failpoints.hit("spark.driver.mid_complete", count=batch)
            return committed

        # The first participant alone, then the others side by side, a few at a time (they are
        # independent), so that a batch of many partitions does not wait for one round trip
        # after the other; the fault point after the first then finds the others still open.
        items = sorted(participants.items())
        with ThreadPoolExecutor(max_workers=COMPLETION_THREADS) as pool:
            done_first = [complete(item) for item in items[:1]]
            results = done_first + list(pool.map(complete, items[1:]))
        lost = [txn_id for (txn_id, _), committed in zip(items, results, strict=True)
                if not committed]
        if lost:
            raise BatchOutputLost(
                f"batch {batch}: the broker aborted the transactions of {', '.join(lost)} "
                "before the driver could commit them (most likely transaction.timeout.ms, "
                f"{self.timeout_ms} ms, passed since their first write): their rows of this "
                "batch are lost (any other participant of it committed). A restart goes on after "
                "this batch. "
                "Raise option kafka.transaction.timeout.ms (up to the broker's "
                "transaction.max.timeout.ms), or use a broker with KIP-939 and "
                "transactionResume=keep-prepared, which cannot lose a batch")


_coordinators: dict[tuple[object, ...], QueryCoordinator] = {}
_registry_lock = threading.Lock()


def close_all() -> None:
    """Close every coordinator's clients in this process (at exit, and for tests)."""
    with _registry_lock:
        coordinators = list(_coordinators.values())
        _coordinators.clear()
    for coordinator in coordinators:
        coordinator.close()


atexit.register(close_all)  # before the client's own clean-up, which warns of unclosed clients


def _client_may_be_at_fault(exc: BaseException) -> bool:
    """A lost connection or a timeout (the client's KafkaConnectionError and KafkaTimeoutError
    are OSErrors), a retriable error code, or a client in a state it cannot go on from: a new
    client may well succeed. A broker's definite answer (an unknown transactional id, a refusal,
    an unsupported version) would be the same again."""
    if isinstance(exc, OSError | IllegalStateError):
        return True
    return isinstance(exc, KafkaError) and exc.retriable


def _close_quietly(client: Any) -> None:
    """Close a held client that may be broken, without waiting long for a broker that is gone."""
    with contextlib.suppress(Exception):
        if isinstance(client, Producer | Consumer):
            client.close(timeout=5.0)
        else:
            client.close()


def _committed(found: TransactionDescription, state: PreparedTxnState) -> bool:
    """The coordinator shows the transaction of `state` committing or committed (version 2
    bumps the epoch on the commit)."""
    return (found.state in (TransactionState.PREPARE_COMMIT,
                        TransactionState.COMPLETE_COMMIT)
            and found.producer_id == state.producer_id
            and found.producer_epoch in (state.epoch, state.epoch + 1))


def _aborted(found: TransactionDescription, state: PreparedTxnState) -> bool:
    """The coordinator shows the transaction of `state` aborted (the abort at the timeout bumps
    the epoch once). A later transaction under the id runs at a higher epoch and, in
    producer-id mode, is only ever aborted with a bump (InitProducerId or the timeout), so it
    cannot show up here."""
    return (found.state in (TransactionState.PREPARE_ABORT,
                        TransactionState.COMPLETE_ABORT)
            and found.producer_id == state.producer_id
            and found.producer_epoch in (state.epoch, state.epoch + 1))


def _report_lost(txn_id: str, state: PreparedTxnState, batch: int, found: str,
                 cause: str = "") -> None:
    log.error("event=spark_batch_output_lost transactional_id=%s producer_id=%d epoch=%d batch=%d "
              "coordinator_state=%s cause=%r note=%r", txn_id, state.producer_id, state.epoch,
              batch, found, cause or "found aborted by the restarted query",
              "a decided transaction was aborted by the broker before its commit, most likely "
              "because transaction.timeout.ms passed (transactionResume=producer-id): its rows "
              "of this batch are lost")
