"""The streaming sink: exactly-once by two-phase commit with the Spark driver as coordinator.

With deliveryGuarantee=exactly-once (the default), per micro-batch:

1. Each task writes its rows in a transaction of its own, transactional id
   `<prefix>-<partition>`, leaves it open ("prepared") and sends its identity (producer id and
   epoch, as PreparedTxnState text) to the driver in its commit message. Its initialize()
   fences any earlier attempt of the same partition (a retried or speculative task), and first
   finishes what an earlier run left under that id: commit if the newest decision names it,
   abort otherwise.
2. The driver's commit(): leftovers of earlier runs under other ids are finished the same way;
   then the decision (batch id and every participant's state) is recorded in the decisions topic;
   then every participant is committed. A crash anywhere is repaired by the next run: a batch
   whose decision exists is committed, not written again; every other open transaction of the
   query is aborted.

Spark creates this writer anew for each micro-batch (on the driver, then pickled to the tasks)
and again for each commit, so the newest decision is read every time and is never stale. Its
constructor, on the driver, checks that the broker can serve the chosen way of committing
(exactly.spark.capabilities), so a query the broker cannot serve fails before any task runs.

Option transactionResume chooses how a transaction is held open and taken over:

- `keep-prepared` (the default): KIP-939. The task's session has
  transaction.two.phase.commit.enable, so the broker never times the transaction out, and it is
  prepared with prepare_transaction(). Leftovers are found by InitProducerId(KeepPreparedTxn),
  which keeps a prepared transaction, and completed by the decision. No timeout can lose a
  batch, however long the driver is down.
- `producer-id`, for brokers without KeepPreparedTxn (Apache Kafka up to 4.x, or a broker with
  two-phase commit off): the way Flink's KafkaSink commits before FLIP-319. The task writes in
  an ordinary transaction (kafka.transaction.timeout.ms, default 900000 ms: Kafka's default
  transaction.max.timeout.ms) and "prepares" by flushing, without EndTxn. The driver commits
  each participant with TransactionSession.resume(producer id, epoch): EndTxn, no
  InitProducerId. Here InitProducerId aborts an open transaction, so a decided one must be
  committed before anything sends InitProducerId on its id: a task does it at the start of
  write(), before its initialize(), and the driver in its leftover handling; DescribeTransactions
  tells a decided transaction still open (state Ongoing, the decided producer id and epoch)
  from one already ended.

  Guaranteed in this mode: each record of a micro-batch is in the output once, visible to
  read_committed consumers, through retried and speculative tasks (fenced by InitProducerId),
  driver crashes before or after the decision, and broker restarts -- provided every
  participant is committed within transaction.timeout.ms of its first write, that is: the
  batch's tasks and the driver's commit, and after a driver crash the restart of the query, fit
  in that time. Undecided leftovers are aborted (by the query, or by the broker at the timeout
  if the query never runs again).

  Not guaranteed: a participant still open after transaction.timeout.ms is aborted by the
  broker, and its rows of that batch are lost while the batch's other participants may have
  committed (the batch is then neither whole nor absent). This is reported, never silent:
  event=spark_batch_output_lost at ERROR, naming the transactional id, producer id, epoch and
  batch. If the driver's commit of the batch finds it, the query fails with BatchOutputLost
  after committing every other participant, so a live query does not run on past a loss
  unnoticed; its decision stands, so a restart goes on after that batch (writing it again would
  duplicate the participants that did commit). If the recovery after a restart finds it (the
  query was down longer than the timeout; the replayed batch's task of that partition finds it,
  and logs it in the executor's log), it is logged and the query goes on: the loss happened
  while it was down, and failing again would make it impossible to restart. Also not
  guaranteed: anything else that sends InitProducerId on the query's transactional ids between
  a decision and its commit (another query with the same name or prefix) aborts the decided
  transaction.

With deliveryGuarantee=at-least-once each task sends with an idempotent producer and flushes;
a replayed batch is written again.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from exactly import failpoints
from exactly.client import (
    Admin,
    AdminError,
    PreparedTxnState,
    Producer,
    State,
    TransactionError,
    TransactionSession,
)
from exactly.client.admin import TransactionDescription
from exactly.protocol.errors import ErrorCode
from exactly.spark.capabilities import check_keep_prepared, check_producer_id
from exactly.spark.decisions import Decision, ensure_topic, latest_decision, record_decision
from exactly.spark.options import EXACTLY_ONCE, PRODUCER_ID, WriteOptions
from exactly.spark.sink import send_rows

__all__ = ["BatchOutputLost", "StreamWriter", "TaskCommit", "open_transactions"]

log = logging.getLogger(__name__)

# states in which a transactional id holds no open transaction (ListTransactions names them)
FINISHED_STATES = frozenset({"Empty", "CompleteCommit", "CompleteAbort", "Dead"})
# producer-id mode's default transaction.timeout.ms: Kafka's default transaction.max.timeout.ms
RESUME_TIMEOUT_MS = 900_000


class BatchOutputLost(RuntimeError):
    """A decided transaction was aborted by the broker before the driver committed it."""


COMPLETION_THREADS = 8  # participants the driver completes at a time


@dataclass
class TaskCommit(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    records: int
    transactional_id: str = ""
    state: str = ""        # PreparedTxnState text; "" when the task has nothing to commit
    replayed: bool = False  # the batch was decided before: nothing written again
    query_id: str = ""     # Spark's id of the query, the same across restarts
    twopc_ms: float = 0.0  # the task's time in initialize() and prepare: what 2PC adds to it


def open_transactions(client: dict[str, str], prefix: str) -> list[str]:
    """Transactional ids of the query (`<prefix>-<n>`) whose transaction is not finished."""
    pattern = re.compile(re.escape(prefix) + r"-\d+")
    with Admin(client) as admin:
        listed = admin.list_transactions()
    return sorted(t.transactional_id for t in listed
                  if pattern.fullmatch(t.transactional_id) and t.state not in FINISHED_STATES)


class StreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.exactly_once = options.delivery == EXACTLY_ONCE
        self.prefix = options.prefix if self.exactly_once else ""
        self.by_producer_id = options.transaction_resume == PRODUCER_ID
        self.timeout_ms = int(options.client.get("transaction.timeout.ms", RESUME_TIMEOUT_MS))
        if self.exactly_once and self.by_producer_id:
            check_producer_id(options.client, self.prefix, self.timeout_ms)
        elif self.exactly_once:
            check_keep_prepared(options.client, self.prefix)
        self.decision = (latest_decision(options.client, options.decisions_topic, self.prefix)
                         if self.exactly_once else None)

    def _session_config(self, transactional_id: str) -> dict[str, str]:
        if self.by_producer_id:
            return {**self.options.client, "transactional.id": transactional_id,
                    "transaction.timeout.ms": str(self.timeout_ms)}
        return {**self.options.client, "transactional.id": transactional_id,
                "transaction.two.phase.commit.enable": "true"}

    def _initialize(self, session: TransactionSession) -> None:
        """InitProducerId, fencing earlier sessions of the id, and the leftover under it
        finished: kept and completed by the newest decision (keep-prepared), or aborted by the
        broker (producer-id: a decided one was committed before, by _commit_decided)."""
        if self.by_producer_id:
            session.initialize()
            return
        session.initialize(keep_prepared_txn=True)
        if session.state is not State.PREPARED:
            return
        decided = (self.decision.participants.get(session.transactional_id, "")
                   if self.decision else "")
        log.info("event=spark_leftover transactional_id=%s prepared=%s decided=%s",
                 session.transactional_id, session.prepared_state, decided or "-")
        session.complete_transaction(PreparedTxnState(decided))

    # -- producer-id mode: commit by resuming -------------------------------------------------

    def _commit_decided(self, txn_id: str) -> None:
        """Commit txn_id's transaction if the newest decision names it and it is still open;
        report it if the broker aborted it. Runs before anything sends InitProducerId on txn_id."""
        if self.decision is None or not self.decision.participants.get(txn_id):
            return
        state = PreparedTxnState(self.decision.participants[txn_id])
        found = self._describe(txn_id)
        if found is None:
            return
        if found.state == "Ongoing" and (found.producer_id, found.producer_epoch) == (
                state.producer_id, state.epoch):
            log.info("event=spark_leftover transactional_id=%s decided=%s batch=%d action=commit",
                     txn_id, state, self.decision.batch)
            self._resume_commit(txn_id, state, self.decision.batch)
        elif _aborted(found, state):
            _report_lost(txn_id, state, self.decision.batch, found.state)

    def _describe(self, txn_id: str) -> TransactionDescription | None:
        """The coordinator's entry for txn_id; None if it has none (expired)."""
        try:
            with Admin(self.options.client) as admin:
                return admin.describe_transactions([txn_id]).get(txn_id)
        except AdminError as exc:
            if exc.code == ErrorCode.transactional_id_not_found:
                return None
            raise

    def _resume_commit(self, txn_id: str, state: PreparedTxnState, batch: int) -> bool:
        """Commit the transaction of `state` by its producer id and epoch (EndTxn, no
        InitProducerId). False, with the loss reported, if the broker had aborted it."""
        try:
            with TransactionSession.resume(txn_id, state.producer_id, state.epoch,
                                           self._session_config(txn_id)) as session:
                session.commit_transaction()
            return True
        except TransactionError as exc:
            found = self._describe(txn_id)
            if found is not None and _committed(found, state):
                return True  # committed meanwhile by another hand (a retried commit)
            if found is None or not _aborted(found, state):
                raise
            _report_lost(txn_id, state, batch, found.state, cause=str(exc))
            return False

    # -- on the executors -----------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("StreamWriter.write runs in a Spark task")
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1)
        query_id = ctx.getLocalProperty("sql.streaming.queryId") or ""

        def midway(rows: int) -> None:
            if attempt == 0:  # fault points in a task fire on its first attempt only
                failpoints.hit("spark.task.write", count=batch)

        if not self.exactly_once:
            with Producer(self.options.client) as producer:
                return TaskCommit(partition, send_rows(producer, iterator, self.options.topic,
                                                       midway))
        txn_id = f"{self.prefix}-{partition}"
        started = time.perf_counter()
        if self.by_producer_id:
            self._commit_decided(txn_id)  # before initialize(), which would abort it
        with TransactionSession(self._session_config(txn_id)) as session:
            self._initialize(session)  # fences earlier attempts of this task
            init_ms = (time.perf_counter() - started) * 1000
            if self.decision is not None and self.decision.covers(query_id, batch):
                for _ in iterator:  # replay of a decided batch: its output is already there
                    pass
                return TaskCommit(partition, 0, txn_id, replayed=True, query_id=query_id)
            session.begin_transaction()
            with Producer(self.options.client, session=session) as producer:
                count = send_rows(producer, iterator, self.options.topic, midway)
            if count == 0:
                return TaskCommit(partition, 0, txn_id, query_id=query_id)
            # send_rows flushed: in producer-id mode that is the whole of "prepare" (the
            # client's prepare_transaction() would log a warning meant for misuse, per task)
            prepare_started = time.perf_counter()
            state = (PreparedTxnState.of(session.producer_id, session.producer_epoch)
                     if self.by_producer_id else session.prepare_transaction())
            twopc_ms = init_ms + (time.perf_counter() - prepare_started) * 1000
            return TaskCommit(partition, count, txn_id, str(state), query_id=query_id,
                              twopc_ms=twopc_ms)

    # -- on the driver --------------------------------------------------------------------------

    def _finish_others(self, keep: set[str]) -> None:
        """Finish the query's open transactions other than `keep` by the newest decision."""
        for txn_id in open_transactions(self.options.client, self.prefix):
            if txn_id in keep:
                continue
            if self.by_producer_id:
                self._commit_decided(txn_id)
            with TransactionSession(self._session_config(txn_id)) as session:
                self._initialize(session)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, TaskCommit)]
        records = sum(m.records for m in done)
        failpoints.hit("spark.driver.after_prepare", count=batchId)  # the tasks' work is done
        if not self.exactly_once:
            log.info("event=spark_batch_written batch=%d records=%d", batchId, records)
            return
        query_id = next((m.query_id for m in done), "")
        if self.decision is not None and self.decision.covers(query_id, batchId):
            log.info("event=spark_batch_replayed batch=%d decided=%d", batchId,
                     self.decision.batch)
            self._finish_others(keep=set())
            return
        participants = {m.transactional_id: m.state for m in done if m.state}
        started = time.perf_counter()
        self._finish_others(keep=set(participants))
        ensure_topic(self.options.client, self.options.decisions_topic)
        record_decision(self.options.client, self.options.decisions_topic,
                        Decision(self.prefix, batchId, participants, query_id))
        decided = time.perf_counter()
        failpoints.hit("spark.driver.after_decision", count=batchId)

        def complete(item: tuple[str, str]) -> bool:
            committed = self._resume_commit(item[0], PreparedTxnState(item[1]), batchId)
            failpoints.hit("spark.driver.mid_complete", count=batchId)
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
                f"batch {batchId}: the broker aborted the transactions of {', '.join(lost)} "
                "before the driver could commit them (most likely transaction.timeout.ms, "
                f"{self.timeout_ms} ms, passed since their first write): their rows of this "
                "batch are lost (any other participant of it committed). A restart goes on after this "
                "batch. "
                "Raise option kafka.transaction.timeout.ms (up to the broker's "
                "transaction.max.timeout.ms), or use a broker with KIP-939 and "
                "transactionResume=keep-prepared, which cannot lose a batch")
        # what 2PC adds to the batch: the tasks' initialize() and prepare (summed; they run in
        # parallel), the decision (with the look for leftovers) and the completion
        log.info("event=spark_batch_committed batch=%d records=%d participants=%d "
                 "prepare_ms=%.1f decision_ms=%.1f complete_ms=%.1f", batchId, records,
                 len(participants), sum(m.twopc_ms for m in done), (decided - started) * 1000,
                 (time.perf_counter() - decided) * 1000)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.exactly_once:
            log.warning("event=spark_batch_aborted batch=%d", batchId)
            self._finish_others(keep=set())


def _committed(found: TransactionDescription, state: PreparedTxnState) -> bool:
    """The coordinator shows the transaction of `state` committing or committed (version 2
    bumps the epoch on the commit)."""
    return (found.state in ("PrepareCommit", "CompleteCommit")
            and found.producer_id == state.producer_id
            and found.producer_epoch in (state.epoch, state.epoch + 1))


def _aborted(found: TransactionDescription, state: PreparedTxnState) -> bool:
    """The coordinator shows the transaction of `state` aborted (the abort at the timeout bumps
    the epoch once). A later transaction under the id runs at a higher epoch and, in
    producer-id mode, is only ever aborted with a bump (InitProducerId or the timeout), so it
    cannot show up here."""
    return (found.state in ("PrepareAbort", "CompleteAbort")
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
