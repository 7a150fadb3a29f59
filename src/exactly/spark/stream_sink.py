"""The streaming sink: exactly-once by two-phase commit with the Spark driver as coordinator.

With deliveryGuarantee=exactly-once (the default), per micro-batch:

1. Each task writes its rows in a transaction of its own, transactional id
   `<prefix>-<partition>` (KIP-939 2PC enabled, so it cannot time out), prepares it and sends
   its PreparedTxnState to the driver in its commit message. Its initialize() fences any earlier
   attempt of the same partition (a retried or speculative task), and first finishes what an
   earlier run left under that id: commit if the newest decision names it, abort otherwise.
2. The driver's commit(): leftovers of earlier runs under other ids are finished the same way;
   then the decision (batch id and every participant's state) is recorded in the decisions topic;
   then every participant is completed. A crash anywhere is repaired by the next run: a batch
   whose decision exists is completed, not written again; every other open transaction of the
   query is aborted.

Spark creates this writer anew for each micro-batch (on the driver, then pickled to the tasks)
and again for each commit, so the newest decision is read every time and is never stale.

With deliveryGuarantee=at-least-once each task sends with an idempotent producer and flushes;
a replayed batch is written again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from exactly import failpoints
from exactly.client import Admin, PreparedTxnState, Producer, State, TransactionSession
from exactly.spark.decisions import Decision, ensure_topic, latest_decision, record_decision
from exactly.spark.options import EXACTLY_ONCE, WriteOptions
from exactly.spark.sink import send_rows

__all__ = ["StreamWriter", "TaskCommit", "open_transactions"]

log = logging.getLogger(__name__)

_FINISHED = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}


@dataclass
class TaskCommit(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    records: int
    transactional_id: str = ""
    state: str = ""        # PreparedTxnState text; "" when the task has nothing to commit
    replayed: bool = False  # the batch was decided before: nothing written again
    query_id: str = ""     # Spark's id of the query, the same across restarts


def open_transactions(client: dict[str, str], prefix: str) -> list[str]:
    """Transactional ids of the query (`<prefix>-<n>`) whose transaction is not finished."""
    pattern = re.compile(re.escape(prefix) + r"-\d+")
    with Admin(client) as admin:
        listed = admin.list_transactions()
    return sorted(t.transactional_id for t in listed
                  if pattern.fullmatch(t.transactional_id) and t.state not in _FINISHED)


class StreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.exactly_once = options.delivery == EXACTLY_ONCE
        self.prefix = options.prefix if self.exactly_once else ""
        self.decision = (latest_decision(options.client, options.decisions_topic, self.prefix)
                         if self.exactly_once else None)

    def _session_config(self, transactional_id: str) -> dict[str, str]:
        return {**self.options.client, "transactional.id": transactional_id,
                "transaction.two.phase.commit.enable": "true"}

    def _finish_leftover(self, session: TransactionSession) -> None:
        """After initialize(keep_prepared_txn=True): commit the kept transaction if the newest
        decision names it, abort it otherwise."""
        if session.state is not State.PREPARED:
            return
        decided = (self.decision.participants.get(session.transactional_id, "")
                   if self.decision else "")
        log.info("event=spark_leftover transactional_id=%s prepared=%s decided=%s",
                 session.transactional_id, session.prepared_state, decided or "-")
        session.complete_transaction(PreparedTxnState(decided))

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
        with TransactionSession(self._session_config(txn_id)) as session:
            session.initialize(keep_prepared_txn=True)  # fences earlier attempts of this task
            self._finish_leftover(session)
            if self.decision is not None and self.decision.covers(query_id, batch):
                for _ in iterator:  # replay of a decided batch: its output is already there
                    pass
                return TaskCommit(partition, 0, txn_id, replayed=True, query_id=query_id)
            session.begin_transaction()
            with Producer(self.options.client, session=session) as producer:
                count = send_rows(producer, iterator, self.options.topic, midway)
            if count == 0:
                return TaskCommit(partition, 0, txn_id, query_id=query_id)
            state = session.prepare_transaction()
            return TaskCommit(partition, count, txn_id, str(state), query_id=query_id)

    # -- on the driver --------------------------------------------------------------------------

    def _finish_others(self, keep: set[str]) -> None:
        """Finish the query's open transactions other than `keep` by the newest decision."""
        for txn_id in open_transactions(self.options.client, self.prefix):
            if txn_id in keep:
                continue
            with TransactionSession(self._session_config(txn_id)) as session:
                session.initialize(keep_prepared_txn=True)
                self._finish_leftover(session)

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
        self._finish_others(keep=set(participants))
        ensure_topic(self.options.client, self.options.decisions_topic)
        record_decision(self.options.client, self.options.decisions_topic,
                        Decision(self.prefix, batchId, participants, query_id))
        failpoints.hit("spark.driver.after_decision", count=batchId)
        for txn_id, text in sorted(participants.items()):
            state = PreparedTxnState(text)
            with TransactionSession.resume(txn_id, state.producer_id, state.epoch,
                                           self._session_config(txn_id)) as session:
                session.commit_transaction()
            failpoints.hit("spark.driver.mid_complete", count=batchId)
        log.info("event=spark_batch_committed batch=%d records=%d participants=%d", batchId,
                 records, len(participants))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.exactly_once:
            log.warning("event=spark_batch_aborted batch=%d", batchId)
            self._finish_others(keep=set())

