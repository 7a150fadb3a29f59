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
The driver's side of it all goes through the query's QueryCoordinator (exactly.spark.coordinator),
which keeps the clients, the decisions reader and the checks' results in the Python worker from
one micro-batch to the next: a batch in steady state makes no client on the driver but the
sessions that complete its participants (`bootstraps=N` on event=spark_batch_committed).

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
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from exactly import failpoints
from exactly.client import PreparedTxnState
from exactly.spark.clients import PROCESS
from exactly.spark.coordinator import (
    RESUME_TIMEOUT_MS,
    BatchOutputLost,
    Finisher,
    QueryCoordinator,
    query_pattern,
    unfinished,
)
from exactly.spark.options import EXACTLY_ONCE, PRODUCER_ID, WriteOptions
from exactly.spark.sink import send_rows

__all__ = [
    "RESUME_TIMEOUT_MS",
    "BatchOutputLost",
    "StreamWriter",
    "TaskCommit",
    "age_warning",
    "open_transactions",
]

log = logging.getLogger(__name__)


@dataclass
class TaskCommit(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    records: int
    transactional_id: str = ""
    state: str = ""        # PreparedTxnState text; "" when the task has nothing to commit
    replayed: bool = False  # the batch was decided before: nothing written again
    query_id: str = ""     # Spark's id of the query, the same across restarts
    twopc_ms: float = 0.0  # the task's time in initialize() and prepare: what 2PC adds to it
    began_at: float = 0.0  # wall-clock time (time.time()) of the task's begin_transaction


def open_transactions(client: dict[str, str], prefix: str) -> list[str]:
    """Transactional ids of the query (`<prefix>-<n>`) whose transaction is not finished."""
    with PROCESS.admin(client) as admin:
        return unfinished(admin.list_transactions(), query_pattern(prefix))


AGE_WARNING_SHARE = 0.5  # of transaction.timeout.ms: a batch's age past it is warned of


def age_warning(batch: int, began_at: float, now: float, timeout_ms: int) -> str | None:
    """transactionResume=producer-id: the log line that warns of a batch whose oldest
    transaction, begun at `began_at` (wall clock, on an executor), has lived more than
    AGE_WARNING_SHARE of transaction.timeout.ms by `now`, when the driver is about to decide
    it; None if it is younger. A batch decided past the timeout is lost (the broker aborts its
    transactions), so a pipeline whose batches grow old is near losing one."""
    age_ms = (now - began_at) * 1000
    if age_ms < AGE_WARNING_SHARE * timeout_ms:
        return None
    note = (f"the batch's oldest transaction is {age_ms / timeout_ms:.0%} of "
            "transaction.timeout.ms old at its decision; past it, the broker aborts it and its "
            "rows are lost (transactionResume=producer-id): raise kafka.transaction.timeout.ms "
            "or shorten the batches")
    return (f"event=spark_transaction_age_near_timeout batch={batch} age_ms={age_ms:.0f} "
            f"transaction_timeout_ms={timeout_ms} note={note!r}")


class StreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """Made on the driver for each micro-batch and pickled to its tasks, and made again on the
    driver for its commit() (see the module doc). The driver's work goes through the query's
    QueryCoordinator in the process (exactly.spark.coordinator), never pickled: the writer
    holds only options and the newest decision."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.exactly_once = options.delivery == EXACTLY_ONCE
        self.prefix = options.prefix if self.exactly_once else ""
        self.by_producer_id = options.transaction_resume == PRODUCER_ID
        self.timeout_ms = int(options.client.get("transaction.timeout.ms", RESUME_TIMEOUT_MS))
        self.decision = None
        if self.exactly_once:
            coordinator = self._coordinator()
            made = coordinator.clients.bootstraps
            coordinator.check()
            self.decision = coordinator.latest()
            log.debug("event=spark_writer_created prefix=%s pid=%d bootstraps=%d", self.prefix,
                      os.getpid(), coordinator.clients.bootstraps - made)

    def _coordinator(self) -> QueryCoordinator:
        """The query's coordinator in this process: on the driver only."""
        return QueryCoordinator.of(self.options.client, self.prefix,
                                   self.options.decisions_topic, self.options.transaction_resume)

    def _finisher(self) -> Finisher:
        """What a task finishes a transaction with: clients of its own, per call."""
        return Finisher(self.options.client, self.prefix, self.options.transaction_resume)

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
            with PROCESS.producer(self.options.client) as producer:
                return TaskCommit(partition, send_rows(producer, iterator, self.options.topic,
                                                       midway))
        txn_id = f"{self.prefix}-{partition}"
        finisher = self._finisher()
        started = time.perf_counter()
        if self.by_producer_id:
            finisher.commit_decided(txn_id, self.decision)  # before initialize(): it would abort
        with PROCESS.session(finisher.session_config(txn_id)) as session:
            finisher.initialize(session, self.decision)  # fences earlier attempts of this task
            init_ms = (time.perf_counter() - started) * 1000
            if self.decision is not None and self.decision.covers(query_id, batch):
                for _ in iterator:  # replay of a decided batch: its output is already there
                    pass
                return TaskCommit(partition, 0, txn_id, replayed=True, query_id=query_id)
            session.begin_transaction()
            began_at = time.time()
            with PROCESS.producer(self.options.client, session=session) as producer:
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
                              twopc_ms=twopc_ms, began_at=began_at)

    # -- on the driver --------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, TaskCommit)]
        records = sum(m.records for m in done)
        failpoints.hit("spark.driver.after_prepare", count=batchId)  # the tasks' work is done
        if not self.exactly_once:
            log.info("event=spark_batch_written batch=%d records=%d", batchId, records)
            return
        coordinator = self._coordinator()
        query_id = next((m.query_id for m in done), "")
        if self.decision is not None and self.decision.covers(query_id, batchId):
            log.info("event=spark_batch_replayed batch=%d decided=%d", batchId,
                     self.decision.batch)
            coordinator.leftovers(decision=self.decision)
            return
        participants = {m.transactional_id: m.state for m in done if m.state}
        if self.by_producer_id and participants:
            warning = age_warning(batchId, min(m.began_at for m in done if m.state),
                                  time.time(), self.timeout_ms)
            if warning:
                log.warning(warning)
        started = time.perf_counter()
        coordinator.leftovers(keep=set(participants), decision=self.decision)
        coordinator.decide(batchId, participants, query_id)
        decided = time.perf_counter()
        coordinator.complete(batchId, participants)  # BatchOutputLost if the broker aborted any
        # what 2PC adds to the batch: the tasks' initialize() and prepare (summed; they run in
        # parallel), the decision (with the look for leftovers) and the completion; and the
        # clients the driver's side made in this process for the batch (resumes excepted)
        log.info("event=spark_batch_committed batch=%d records=%d participants=%d "
                 "prepare_ms=%.1f decision_ms=%.1f complete_ms=%.1f bootstraps=%d", batchId,
                 records, len(participants), sum(m.twopc_ms for m in done),
                 (decided - started) * 1000, (time.perf_counter() - decided) * 1000,
                 coordinator.batch_bootstraps())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.exactly_once:
            log.warning("event=spark_batch_aborted batch=%d", batchId)
            self._coordinator().leftovers(decision=self.decision)
