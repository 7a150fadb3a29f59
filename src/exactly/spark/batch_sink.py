"""Exactly-once batch writes: `df.write.format("exactly").option("deliveryGuarantee",
"exactly-once")`, a two-phase commit (KIP-939) with the Spark driver as coordinator.

Theory of operation. A batch write is one Spark job; Spark's DataSourceWriter gives it three
places to run code: `writer()` on the driver before any task, `write()` in each task attempt, and
`commit(messages)` or `abort(messages)` on the driver at the end.

1. Driver, before the tasks (ExactlyOnceBatchWriter's constructor, from DataSource.writer()):
   check that the broker takes part in two-phase commit (InitProducerId v6 with Enable2Pc and
   KeepPreparedTxn, probed by exactly.spark.capabilities; else fail here, before any task, with
   an error that names what is missing); finish what EARLIER jobs of the same transactional id
   prefix left open (`recover_batch_writes`: commit the transactions the newest decision of the
   prefix names, abort every other); pick a job id, and the job's sequence number, one past the
   newest decision's (the decisions topic keeps the highest per prefix, so a decision numbered
   at least the job's own tells an attempt that its job is over).
2. Each task attempt writes its rows in a transaction of its own, transactional id
   `<prefix>-<job>-<partition>-<task attempt id>`, with transaction.two.phase.commit.enable (so
   the broker never times it out), prepares it and returns its PreparedTxnState in its commit
   message. An attempt that finds its job already decided writes nothing, or, decided while it
   wrote, aborts its own transaction.
3. Driver, commit(messages): record the decision (the job id, its sequence number and every
   participant's state: one record in the decisions topic of exactly.spark.decisions, key the
   prefix), then finish every open transaction of the job: commit the participants, abort the
   rest. abort(messages): record an empty decision (the job is over, nothing commits), then abort
   every open transaction of the job, unless a decision with participants was recorded already
   (Spark calls abort when commit itself failed): then that decision is carried out.

The driver's side (the writer's constructor, commit and abort) goes through the prefix's
QueryCoordinator (exactly.spark.coordinator), which holds its Admin, decisions producer and
decisions reader in the Python worker; the tasks read the newest decision with clients of their
own (exactly.spark.decisions.latest_decision).

Why one transactional id per task attempt. Python data sources do the whole write and prepare
inside write(), so two attempts of one partition (a retry after a failure, or a speculative
copy) can both prepare. Spark's commit coordinator lets one attempt per partition report its
message, and only those messages reach commit(). With one id per partition the second attempt's
InitProducerId would have to abort the first's prepared transaction, which may be the very one
Spark reports: its data would be lost. With an id per attempt no attempt touches another's
transaction, the driver commits exactly the attempts Spark reports, and aborts the others of the
job, which it finds by listing the open transactions of `<prefix>-<job>-*`. The task attempt id
(TaskContext.taskAttemptId) is unique in the Spark application, unlike attemptNumber, which
starts again at 0 when a stage is re-attempted.

An attempt that outlives its job (a speculative copy still running when the job ends) is not in
the driver's list if its first write lands after the driver listed; the decision is recorded
before that list is taken, so such an attempt finds its job decided when it checks after its
prepare, and aborts its own transaction. Only an attempt killed between its first write and that
check leaves a transaction open; the next job of the prefix, or `recover_batch_writes`, aborts it.

Transactional ids: the ids of a job are new, so the broker forgets them after
transactional.id.expiration.ms (7 days by default), as any producer's; open transactions never
pile up, since every job first finishes those of the jobs before it. A driver killed after the
decision is repaired by the next job of the prefix or by `recover_batch_writes(client, prefix)`.

Two batch jobs writing at the same time must use different transactionalIdPrefix values (as
Flink's KafkaSink requires): each job's start finishes every open transaction of its prefix.
The default prefix is `exactly-spark-batch-<topic>`; a write whose topics come from a column
needs the option. A commit that finds a newer decision of its prefix fails the job.

Only brokers with KIP-939 serve this (Exactly, or Kafka with 2PC enabled); with others write
with deliveryGuarantee=at-least-once (exactly.spark.sink.BatchWriter), the default of batch
writes, as in Spark's own Kafka sink.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from exactly import failpoints
from exactly.client import PreparedTxnState, State
from exactly.spark.capabilities import check_keep_prepared
from exactly.spark.clients import PROCESS, ClientFactory
from exactly.spark.coordinator import QueryCoordinator, unfinished
from exactly.spark.decisions import latest_decision
from exactly.spark.options import (
    AT_LEAST_ONCE,
    DECISIONS_TOPIC,
    PRODUCER_ID,
    OptionError,
    WriteOptions,
)
from exactly.spark.sink import send_rows
from exactly.spark.stream_sink import TaskCommit

__all__ = ["ExactlyOnceBatchWriter", "ExactlyOnceUnavailable", "Recovered", "batch_prefix",
           "check_two_phase_commit", "open_batch_transactions", "recover_batch_writes"]

log = logging.getLogger(__name__)


class ExactlyOnceUnavailable(OptionError):
    """The broker cannot take part in the two-phase commit an exactly-once batch write needs."""


class Recovered(NamedTuple):
    """What recover_batch_writes did: transactional ids committed and aborted."""

    committed: list[str]
    aborted: list[str]


def batch_prefix(options: WriteOptions) -> str:
    """The transactional id prefix of a batch write: option transactionalIdPrefix, else
    `exactly-spark-batch-<topic>`."""
    if options.transactional_id_prefix:
        return options.transactional_id_prefix
    if options.topic:
        return f"exactly-spark-batch-{options.topic}"
    raise OptionError("an exactly-once batch write whose topics come from the 'topic' column "
                      "needs option transactionalIdPrefix (one per job that may run at the "
                      "same time), or option topic")


def _two_phase(client: Mapping[str, str], transactional_id: str) -> dict[str, str]:
    """A session's config: KIP-939 2PC, so that the broker never times its transaction out."""
    return {**client, "transactional.id": transactional_id,
            "transaction.two.phase.commit.enable": "true"}


def check_two_phase_commit(options: WriteOptions, prefix: str,
                           clients: ClientFactory = PROCESS) -> None:
    """Raise ExactlyOnceUnavailable unless the broker offers KIP-939 two-phase commit with
    KeepPreparedTxn (exactly.spark.capabilities probes `<prefix>-probe`)."""
    if options.transaction_resume == PRODUCER_ID:
        raise OptionError(f"option transactionResume={PRODUCER_ID} is for streams; an exactly-once "
                          "batch write commits by KIP-939 two-phase commit only: remove the "
                          f"option, or write with deliveryGuarantee={AT_LEAST_ONCE}")
    try:
        check_keep_prepared(options.client, prefix, clients)
    except OptionError as exc:
        raise ExactlyOnceUnavailable(
            "deliveryGuarantee=exactly-once for a batch write needs KIP-939 two-phase commit "
            f"(transactionResume={PRODUCER_ID} is for streams only; for a batch write on this "
            f"broker use deliveryGuarantee={AT_LEAST_ONCE}, where a retried task may write its "
            f"rows twice): {exc}") from None


def _pattern(prefix: str, job: str | None = None) -> re.Pattern[str]:
    """The transactional ids of the batch writes of `prefix` (of one job, if given)."""
    return re.compile(re.escape(prefix) + "-" + (re.escape(job) if job else "[0-9a-f]{12}")
                      + r"-\d+-\d+")


def open_batch_transactions(client: Mapping[str, str], prefix: str, job: str | None = None
                            ) -> list[str]:
    """Transactional ids of the batch writes of `prefix` (of one job, if given) whose
    transaction is open."""
    with PROCESS.admin(client) as admin:
        return unfinished(admin.list_transactions(), _pattern(prefix, job))


def _finish(coordinator: QueryCoordinator, transactional_id: str, decided: str) -> bool | None:
    """Commit the open transaction of `transactional_id` if `decided` is its PreparedTxnState,
    abort it otherwise: True if committed, False if aborted, None if none was open."""
    with coordinator.clients.session(coordinator.session_config(transactional_id)) as session:
        session.initialize(keep_prepared_txn=True)  # keeps an open transaction, fences its writer
        if session.state is not State.PREPARED:
            return None
        kept = str(session.prepared_state)
        session.complete_transaction(PreparedTxnState(decided))
    log.info("event=spark_batch_finished transactional_id=%s kept=%s decided=%s", transactional_id,
             kept, decided or "-")
    return kept == decided


def _finish_all(coordinator: QueryCoordinator, ids: list[str], decided: Mapping[str, str]
                ) -> Recovered:
    done = Recovered([], [])
    for txn_id in ids:
        committed = _finish(coordinator, txn_id, decided.get(txn_id, ""))
        if committed is not None:
            (done.committed if committed else done.aborted).append(txn_id)
    return done


def recover_batch_writes(client: Mapping[str, str], prefix: str,
                         decisions_topic: str = DECISIONS_TOPIC) -> Recovered:
    """Finish every open transaction of the exactly-once batch writes of `prefix`: commit those
    the newest decision of the prefix names, abort the others. Run it when no job of the prefix
    is running (a job of the prefix does it when it starts)."""
    with QueryCoordinator(client, prefix, decisions_topic) as coordinator:
        return _recover(coordinator)


def _recover(coordinator: QueryCoordinator) -> Recovered:
    newest = coordinator.latest()
    done = _finish_all(coordinator, coordinator.open_transactions(_pattern(coordinator.prefix)),
                       newest.participants if newest else {})
    if done.committed or done.aborted:
        log.warning("event=spark_batch_recovered prefix=%s committed=%d aborted=%d",
                    coordinator.prefix, len(done.committed), len(done.aborted))
    return done


class ExactlyOnceBatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """Created on the driver by DataSource.writer() (see the module docstring), then pickled to
    the tasks and to commit()/abort(): the job id and sequence number travel with it."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.prefix = batch_prefix(options)
        self.job = uuid.uuid4().hex[:12]
        coordinator = self._coordinator()
        check_two_phase_commit(options, self.prefix, coordinator.clients)
        coordinator.ensure_topic()
        _recover(coordinator)
        newest = coordinator.latest()
        self.sequence = newest.batch + 1 if newest else 0

    def _coordinator(self) -> QueryCoordinator:
        """The prefix's coordinator in this process (exactly.spark.coordinator): on the driver
        only, never pickled with the writer."""
        return QueryCoordinator.of(self.options.client, self.prefix, self.options.decisions_topic)

    def _job_over(self) -> bool:
        """A decision of this job, or of a later one, is recorded (asked in the tasks)."""
        newest = latest_decision(self.options.client, self.options.decisions_topic, self.prefix)
        return newest is not None and newest.batch >= self.sequence

    # -- in the tasks ---------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommit:
        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("ExactlyOnceBatchWriter.write runs in a Spark task")
        return self.write_attempt(iterator, ctx.partitionId(), ctx.taskAttemptId(),
                                  first=ctx.attemptNumber() == 0)

    def write_attempt(self, iterator: Iterator[pa.RecordBatch], partition: int, attempt_id: int,
                      *, first: bool = False) -> TaskCommit:
        """One task attempt's work: its rows in a prepared transaction of its own."""
        txn_id = f"{self.prefix}-{self.job}-{partition}-{attempt_id}"

        def midway(rows: int) -> None:
            if first:  # a fault point in a task fires on its first attempt only
                failpoints.hit("spark.batch.task.write", count=partition)

        if self._job_over():  # a late attempt: the job ended without it
            log.info("event=spark_batch_late_attempt transactional_id=%s", txn_id)
            for _ in iterator:  # read to the end, as the Python worker expects
                pass
            return TaskCommit(partition, 0, txn_id, query_id=self.job)
        with PROCESS.session(_two_phase(self.options.client, txn_id)) as session:
            session.initialize()  # a new id: nothing of an earlier attempt to keep
            session.begin_transaction()
            with PROCESS.producer(self.options.client, session=session) as producer:
                count = send_rows(producer, iterator, self.options.topic, midway)
            if count == 0:
                return TaskCommit(partition, 0, txn_id, query_id=self.job)
            state = session.prepare_transaction()
            if self._job_over():  # decided while this attempt wrote: not a participant
                log.info("event=spark_batch_late_attempt transactional_id=%s aborted=true", txn_id)
                session.abort_transaction()
                return TaskCommit(partition, 0, txn_id, query_id=self.job)
        return TaskCommit(partition, count, txn_id, str(state), query_id=self.job)

    # -- on the driver --------------------------------------------------------------------------

    def _complete(self, coordinator: QueryCoordinator, participants: Mapping[str, str]
                  ) -> Recovered:
        """Commit the participants, abort every other open transaction of the job."""
        ids = sorted(set(participants)
                     | set(coordinator.open_transactions(_pattern(self.prefix, self.job))))
        return _finish_all(coordinator, ids, participants)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, TaskCommit)]
        coordinator = self._coordinator()
        newest = coordinator.latest()
        if newest is not None and newest.batch >= self.sequence:
            raise RuntimeError(
                f"another job with transactionalIdPrefix {self.prefix!r} recorded a decision "
                f"while this one (job {self.job}) ran: batch jobs that run at the same time need "
                "different transactionalIdPrefix values; this job is aborted")
        decision = coordinator.decide(self.sequence, {m.transactional_id: m.state
                                                      for m in done if m.state}, self.job)
        failpoints.hit("spark.batch.driver.after_decision")
        finished = self._complete(coordinator, decision.participants)
        log.info("event=spark_batch_job_committed prefix=%s job=%s records=%d participants=%d "
                 "aborted=%d", self.prefix, self.job, sum(m.records for m in done),
                 len(decision.participants), len(finished.aborted))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        coordinator = self._coordinator()
        newest = coordinator.latest()
        if newest is None or newest.batch < self.sequence:
            # Recorded first, so that an attempt still writing finds the job over (see above).
            newest = coordinator.decide(self.sequence, {}, self.job)
        finished = self._complete(coordinator,
                                  newest.participants if newest.query_id == self.job else {})
        log.warning("event=spark_batch_job_aborted prefix=%s job=%s committed=%d aborted=%d",
                    self.prefix, self.job, len(finished.committed), len(finished.aborted))
