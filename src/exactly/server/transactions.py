"""The transaction driver: carries out the transaction coordinator's decisions on the logs.

The coordinator (exactly.txn) decides; the driver writes. A decided transaction is finished in
the order that keeps DESIGN invariant 4: the PrepareCommit/PrepareAbort record is made durable,
then a marker goes into every partition of the transaction (and pending transactional offsets in
`__consumer_offsets` are applied or dropped, and so are the share acknowledgements staged in
`__share_group_state` by TxnShareAcknowledge, KIP-1289), those are made durable, and only then is
the transaction recorded complete. Markers that come from elsewhere (WriteTxnMarkers) take the
same path, and so do the aborts of orphaned transactions found on start.

Under `log.flush.policy=fsync` the order is one of sync rounds (server/appends.py), each of
which ends before the next record is appended at all, since the page cache may write back any
written page at any moment and only a completed sync orders anything:

1. PrepareX durable (the EndTxn answer waits for it): from here a restart rolls the outcome
   forward, so a marker on disk can never meet a coordinator that would decide otherwise.
2. The markers, in every partition of the transaction and `__consumer_offsets`: one round over
   all their files, synced in parallel (a round costs about one sync, however many partitions).
3. CompleteX, appended only after that round: on disk without its markers, it would let a
   restart take the partitions' open data for an orphan and abort a committed transaction (the
   power-cut test shows it with the round left out, fault point `txn.markers.sync=skip`).
   CompleteX itself is not waited for: the next record of the id, in the same file, is
   appended after it and synced with it (the first Produce into a partition, a Produce that
   adds a partition, an EndTxn), and until then the durable PrepareX rolls forward to the same
   end.

An older client (transaction version 1: AddPartitionsToTxn, Produce, EndTxn, each sent after
the previous answer) waits for two rounds, not three: its AddPartitionsToTxn is answered once
the Ongoing record holding the partition is written, not synced, and the first Produce of the
transaction into that partition is answered only after a round that syncs the data and that
record's `__transaction_state` partition together (`verify_write` notes it, the Produce adds it
to its round: one round, the files in parallel). EndTxn's PrepareX round covers it as well. The
markers' round follows while the client turns around. This holds only when every transactional
write into the partition is verified with the coordinator (KIP-890,
`transaction.partition.verification.enable`, on by default) and only Produce writes there
(`add_needs_sync`); otherwise AddPartitionsToTxn waits for its round as before. Why a power cut
anywhere keeps DESIGN's invariants 1, 3 and 7:

- Before the Produce is answered nothing of the transaction in that partition was acknowledged
  as durable: the AddPartitionsToTxn answer only lets the client write there.
- Cut before the data reached the disk, with the Ongoing record lost: nothing is open anywhere.
  The client's retried Produce fails verification (INVALID_TXN_STATE: the restarted coordinator
  does not hold the partition) and nothing is written; its EndTxn fails too, or aborts what the
  coordinator still holds. The client aborts or starts over with InitProducerId. (If the page
  cache wrote the Ongoing record back on its own, the transaction simply goes on.)
- Cut with the data on disk and the Ongoing record lost (the two files are written back in any
  order): the partition holds an open transaction no coordinator knows. `recover`, which runs at
  every start, aborts it (an orphan), so the LSO moves on (invariant 7); the data was never
  acknowledged (invariant 1), and an aborted transaction's records are never read committed
  (invariant 3). The client's retried Produce then fails verification as above, so it cannot be
  answered as a duplicate of the aborted batch. (A client that added the same partition again
  after that restart and then retried the batch would be answered with the aborted batch's
  offset; no client adds a partition twice in one transaction: librdkafka, the Java client,
  aiokafka and Exactly's client keep the partitions added. A transaction version 2 Produce does
  add its partition itself, every retry again: that is why the partitions it adds are synced
  before its data is appended, `sync_added_partitions`.)
- Cut after the Produce was answered: its round made the data and the Ongoing record durable,
  so after the restart the coordinator holds the partition and the client's EndTxn commits it.
- The other records of the id keep their order: CompleteX, then Ongoing, then PrepareX are
  appended to one file in that order, and a restart keeps a prefix of it (log recovery
  truncates at the first batch that did not survive), so a durable Ongoing never follows a lost
  CompleteX, and a durable PrepareX still rolls forward.

So a 1-partition transaction of an older client syncs four files in three rounds, two of them on
its answers' path. Concurrent transactions share rounds, coordinator records and data alike.

EndTxn is answered once the decision is durable, as in Apache Kafka: the outcome is fixed from
then on (a restart rolls it forward), and the markers follow in a task of their own, which the
driver owns (or, when nothing in writing them can wait: the `os` policy and no fault point
armed, in a callback run right after the answer, which spares the task). While a transaction's
markers are being written, requests for its transactional id wait for them
(`wait_for_markers`) instead of answering CONCURRENT_TRANSACTIONS, which clients back off on.

The driver also holds the produce side of KIP-890 (`verify_write`): a transactional batch goes
only into a partition of its producer's ongoing transaction, added implicitly by a transaction
version 2 client, or verified with the coordinator for an older one.

Fault points (exactly.failpoints): txn.after_prepare, txn.before_markers, txn.after_markers;
txn.markers.sync (skip). EXACTLY_FAILPOINTS is read when the driver is made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from exactly import failpoints
from exactly.groups import OFFSETS_TOPIC, GroupCoordinator
from exactly.log import LogManager, PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition
from exactly.server.appends import FSYNC, AppendService
from exactly.share.coordinator import ShareCoordinator
from exactly.share.state_store import SHARE_STATE_TOPIC
from exactly.txn import TransactionCoordinator, TxnMarkers

log = logging.getLogger("exactly.transactions")

# Partitions that requests other than Produce write into (TxnOffsetCommit, TxnShareAcknowledge).
_WRITTEN_BY_OTHERS = frozenset({OFFSETS_TOPIC, SHARE_STATE_TOPIC})

# The fault points of this module: EXACTLY_FAILPOINTS is read once, when the driver is made (a
# check per hit costs an environment lookup on every transaction).
_FAULT_POINTS = frozenset({"txn.after_prepare", "txn.before_markers", "txn.after_markers",
                           "txn.markers.sync"})


class TransactionDriver:
    def __init__(self, *, coordinator: TransactionCoordinator, groups: GroupCoordinator,
                 logs: LogManager, appends: AppendService, clock: Callable[[], int],
                 transaction_version: int, verification_enabled: bool,
                 share: ShareCoordinator | None = None) -> None:
        self.coordinator = coordinator
        self.groups = groups
        self.share = share  # None: a broker without share groups (some tests build one)
        self.logs = logs
        self.appends = appends
        self.clock = clock
        self.transaction_version = transaction_version
        self.verification_enabled = verification_enabled
        # Transactional id -> set once its markers are written.
        self._markers_in_progress: dict[str, asyncio.Event] = {}
        self._background: set[asyncio.Task[None]] = set()  # markers after an EndTxn answer
        self._added: set[PartitionLog] = set()  # transaction logs owed a sync (verify_write)
        # Transaction logs whose Ongoing record a Produce's own sync round must cover (a
        # transaction version 1 partition, verified by `verify_write`; `add_needs_sync`).
        self._owed: list[PartitionLog] = []
        self._fault_points = bool(_FAULT_POINTS & failpoints.active().keys())
        # Nothing in writing markers can wait (no sync, no pause): they are written by a plain
        # callback right after the EndTxn answer, without the cost of a task.
        self._markers_inline = appends.flush_policy != FSYNC and not self._fault_points

    # -- waiting for markers ----------------------------------------------------------------

    def writing_markers(self, transactional_id: str | None) -> bool:
        """Are the markers of this transactional id's last transaction being written?"""
        return transactional_id in self._markers_in_progress

    async def wait_for_markers(self, transactional_id: str) -> None:
        """Return once no markers of `transactional_id` are being written."""
        while (done := self._markers_in_progress.get(transactional_id)) is not None:
            await done.wait()

    async def wait_for_all_markers(self) -> None:
        """Return once the markers being written now are written (not those begun meanwhile)."""
        for done in list(self._markers_in_progress.values()):
            await done.wait()

    # -- KIP-890: verification of a transactional write ----------------------------------------

    def verify_write(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     tp: TopicPartition, *, implicit_add: bool) -> ErrorCode:
        """May this producer's transactional batch go into `tp`? With `implicit_add` (a Produce
        request of a transaction version 2 client, when the broker runs version 2) the partition
        is added to the transaction; otherwise an older client's partition is verified, if
        `transaction.partition.verification.enable` is on."""
        if implicit_add and self.transaction_version >= 2:
            error = self.coordinator.add_partitions(
                transactional_id, producer_id, producer_epoch, [tp], now_ms=self.clock(),
                client_transaction_version=2)[tp]
            if error == ErrorCode.none:
                # Synced by `sync_added_partitions`, before the data is appended.
                self._added.add(self.coordinator.log_for(transactional_id))
            return error
        if self.verification_enabled:
            error = self.coordinator.verify_partitions(transactional_id, producer_id,
                                                       producer_epoch, [tp])[tp]
            if error == ErrorCode.none:
                # The first write of the transaction here: its answer must find the partition's
                # Ongoing record durable (`add_needs_sync`).
                self._owed.append(self.coordinator.log_for(transactional_id))
            return error
        return ErrorCode.none

    def add_needs_sync(self, partitions: Iterable[tuple[str, int]]) -> bool:
        """Must the answer to AddPartitionsToTxn (transaction version 1) of `partitions` wait
        for its Ongoing record to be durable? Not when every write into them is verified
        (KIP-890) and so answered only once a sync round has covered that record too (see the
        module's docstring); the partitions of `__consumer_offsets` and `__share_group_state`
        are written by other requests, which do not take that care."""
        return not self.verification_enabled or any(
            topic in _WRITTEN_BY_OTHERS for topic, _ in partitions)

    def sync_added_partitions(self) -> list[PartitionLog]:
        """Called by a Produce request once, after checking all its partitions and before it
        appends any: makes durable the partitions `verify_write` added (transaction version 2;
        a blocking sync of their transaction logs under the fsync policy, one for all the
        partitions the request adds), so that the coordinator knows a partition before its
        data can be on disk. Returns the transaction logs whose Ongoing records the request's
        own sync round must cover (transaction version 1, `add_needs_sync`)."""
        added, self._added = self._added, set()
        for plog in added:
            self.appends.sync_now(plog)
        owed, self._owed = self._owed, []
        return owed

    # -- finishing transactions ---------------------------------------------------------------

    def write_markers(self, producer_id: int, producer_epoch: int, *, commit: bool,
                      coordinator_epoch: int, partitions: Iterable[tuple[str, int]],
                      ) -> tuple[dict[tuple[str, int], ErrorCode], list[PartitionLog]]:
        """Append a COMMIT or ABORT marker for `producer_id` to each partition."""
        now = self.clock()
        errors: dict[tuple[str, int], ErrorCode] = {}
        written: list[PartitionLog] = []
        for topic, partition in partitions:
            try:
                plog = self.logs.get_log(topic, partition)
                plog.append_marker(producer_id, producer_epoch, commit=commit,
                                   coordinator_epoch=coordinator_epoch, now_ms=now)
            except LogError as exc:
                # A deleted topic or a fenced marker: nothing more can be done for this partition.
                errors[TopicPartition(topic, partition)] = exc.error_code
                log.warning("marker for producer %d not written to %s-%d: %s %s", producer_id,
                            topic, partition, error_name(exc.error_code), exc)
                continue
            errors[TopicPartition(topic, partition)] = ErrorCode.none
            written.append(plog)
            self.appends.notify_append(plog)
            if topic == OFFSETS_TOPIC:
                self.groups.complete_txn(partition, producer_id, commit, now)
            elif topic == SHARE_STATE_TOPIC and self.share is not None:
                # Appended after the marker, to the same partition: synced with it.
                self.share.complete_txn(partition, producer_id, commit, now)
        return errors, written

    async def finish(self, markers: TxnMarkers) -> tuple[int, int]:
        """Roll a prepared transaction forward; returns the producer id and epoch now current."""
        done = self._markers_pending(markers.transactional_id)
        try:
            await self.appends.sync([self.coordinator.log_for(markers.transactional_id)])
            if self._fault_points:
                failpoints.hit("txn.after_prepare")
            return await self._write_and_complete(markers)
        finally:
            self._markers_done(markers.transactional_id, done)

    async def decide(self, markers: TxnMarkers) -> None:
        """EndTxn's part of finishing: return once the PrepareX record is durable (the client may
        be answered then), with the markers and CompleteX under way in a task of the driver's."""
        done = self._markers_pending(markers.transactional_id)
        try:
            await self.appends.sync([self.coordinator.log_for(markers.transactional_id)])
        except BaseException:
            self._markers_done(markers.transactional_id, done)
            raise
        if self._fault_points:
            failpoints.hit("txn.after_prepare")
        if self._markers_inline:
            asyncio.get_running_loop().call_soon(self._finish_inline, markers, done)
            return
        task = asyncio.create_task(self._finish_in_background(markers, done))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def abort_timed_out(self) -> None:
        """Abort the transactions past their timeout or their producer's session timeout
        (KIP-1309); the coordinator's tick decides which."""
        decided = self.coordinator.tick(self.clock())
        for markers in decided:
            log.info("transaction %r timed out: aborting it", markers.transactional_id)
            await self.finish(markers)

    async def recover(self) -> None:
        """On start: finish what the coordinator had decided, then abort what nobody owns.

        A partition can hold an open transaction the coordinator does not know (or no longer
        holds that partition in): a crash between writing the data and the coordinator's record,
        or a power cut that kept one file's pages and not the other's. Its data was never
        acknowledged, so it is aborted; otherwise its LSO would never move again (DESIGN
        invariant 7).
        """
        for markers in self.coordinator.pending_markers():
            await self.finish(markers)
        written: list[PartitionLog] = []
        for plog in self.logs.logs():
            for producer_id in list(plog.ongoing_transactions()):
                owned = self.coordinator.ongoing_partitions(producer_id)
                if owned is not None and (plog.topic, plog.partition) in owned:
                    continue
                epoch = next((p.epoch for p in plog.producers() if p.producer_id == producer_id),
                             0)
                log.warning("aborting an orphaned transaction of producer %d in %s-%d",
                            producer_id, plog.topic, plog.partition)
                _, logs = self.write_markers(
                    producer_id, epoch, commit=False,
                    coordinator_epoch=self.coordinator.config.coordinator_epoch,
                    partitions=[TopicPartition(plog.topic, plog.partition)])
                written.extend(logs)
        await self.appends.sync(written)

    async def stop(self, timeout: float = 10) -> None:
        """Let the markers of answered commits land rather than leave them to recovery."""
        await asyncio.sleep(0)  # markers written inline: their callbacks are due now
        if self._background:
            _, late = await asyncio.wait(set(self._background), timeout=timeout)
            for task in late:
                task.cancel()

    async def _finish_in_background(self, markers: TxnMarkers, done: asyncio.Event) -> None:
        try:
            if self._fault_points:
                await failpoints.hit_async("txn.before_markers")
            await self._write_and_complete(markers)
        except Exception:  # noqa: BLE001 - logged, with its traceback, by _not_written
            self._not_written(markers)
        finally:
            self._markers_done(markers.transactional_id, done)

    def _finish_inline(self, markers: TxnMarkers, done: asyncio.Event) -> None:
        """`_finish_in_background` when nothing in it can wait (`_markers_inline`)."""
        try:
            self._write_markers_of(markers)
            self._complete(markers)
        except Exception:  # noqa: BLE001 - logged, with its traceback, by _not_written
            self._not_written(markers)
        finally:
            self._markers_done(markers.transactional_id, done)

    @staticmethod
    def _not_written(markers: TxnMarkers) -> None:
        # The decision is durable: the next start rolls it forward. Until then the transaction
        # stays in PrepareX and requests for it answer CONCURRENT_TRANSACTIONS.
        log.exception("markers of transaction %r (producer %d) not written; a restart rolls it "
                      "forward", markers.transactional_id, markers.producer_id)

    async def _write_and_complete(self, markers: TxnMarkers) -> tuple[int, int]:
        written = self._write_markers_of(markers)
        # A test's way to break step 3's order.
        if not (self._fault_points and failpoints.skip("txn.markers.sync")):
            await self.appends.sync(written)
        return self._complete(markers)

    def _write_markers_of(self, markers: TxnMarkers) -> list[PartitionLog]:
        _, written = self.write_markers(markers.producer_id, markers.producer_epoch,
                                        commit=markers.commit,
                                        coordinator_epoch=markers.coordinator_epoch,
                                        partitions=markers.partitions)
        return written

    def _complete(self, markers: TxnMarkers) -> tuple[int, int]:
        """CompleteX, once the markers are durable."""
        if self._fault_points:
            failpoints.hit("txn.after_markers")
        result = self.coordinator.markers_written(markers.transactional_id, self.clock())
        log.debug("transaction %r of producer %d epoch %d %s in %d partition(s)",
                  markers.transactional_id, markers.producer_id, markers.producer_epoch,
                  "committed" if markers.commit else "aborted", len(markers.partitions))
        return result

    def _markers_pending(self, transactional_id: str) -> asyncio.Event:
        done = asyncio.Event()
        self._markers_in_progress[transactional_id] = done
        return done

    def _markers_done(self, transactional_id: str, done: asyncio.Event) -> None:
        if self._markers_in_progress.get(transactional_id) is done:
            del self._markers_in_progress[transactional_id]
        done.set()
