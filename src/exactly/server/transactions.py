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
   appended after it and synced with it (an AddPartitionsToTxn, a Produce that adds a
   partition, an EndTxn), and until then the durable PrepareX rolls forward to the same end.

So a 1-partition transaction of an older client (AddPartitionsToTxn, Produce, EndTxn) syncs four
times, three of them on its answers' path (its Ongoing record, its data, PrepareX) and the
markers' round while the client turns around; every one of those answers promises what it
acknowledged is on disk, so none of the three can be left for a later round. Concurrent
transactions share rounds, coordinator records and data alike. (The AddPartitionsToTxn round
also makes the id's previous CompleteX durable before the client may write again: transaction
version 1 keeps the producer id and epoch across transactions, so with that CompleteX lost, a
restart's roll-forward of PrepareX would write its marker over the next transaction's open data
and end it too; tests/system/server/test_add_partitions_sync.py.)

EndTxn is answered once the decision is durable, as in Apache Kafka: the outcome is fixed from
then on (a restart rolls it forward), and the markers follow in a task of their own, which the
driver owns. While a transaction's markers are being written, requests for its transactional id
wait for them (`wait_for_markers`) instead of answering CONCURRENT_TRANSACTIONS, which clients
back off on.

The driver also holds the produce side (`produce_gate`, server/admission.py): the rules that
order a Produce request's checks, appends, syncs and answer, KIP-890's verification and implicit
add of a transactional batch's partition among them, with the state of one request kept in an
`Admission` of its own.

Fault points (exactly.failpoints): txn.after_prepare, txn.before_markers, txn.after_markers;
txn.markers.sync (skip).
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
from exactly.server.admission import ProduceGate
from exactly.server.appends import AppendService
from exactly.share.coordinator import ShareCoordinator
from exactly.share.state_store import SHARE_STATE_TOPIC
from exactly.txn import TransactionCoordinator, TxnMarkers

log = logging.getLogger("exactly.transactions")


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
        # Transactional id -> set once its markers are written.
        self._markers_in_progress: dict[str, asyncio.Event] = {}
        self._background: set[asyncio.Task[None]] = set()  # markers after an EndTxn answer
        # The produce side (server/admission.py); its requests wait for this driver's markers.
        self.produce_gate = ProduceGate(
            coordinator=coordinator, logs=logs, appends=appends, markers=self, clock=clock,
            transaction_version=transaction_version, verification_enabled=verification_enabled)

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
        failpoints.hit("txn.after_prepare")
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
        if self._background:
            _, late = await asyncio.wait(set(self._background), timeout=timeout)
            for task in late:
                task.cancel()

    async def _finish_in_background(self, markers: TxnMarkers, done: asyncio.Event) -> None:
        try:
            await failpoints.hit_async("txn.before_markers")
            await self._write_and_complete(markers)
        except Exception:
            # The decision is durable: the next start rolls it forward. Until then the
            # transaction stays in PrepareX and requests for it answer CONCURRENT_TRANSACTIONS.
            log.exception("markers of transaction %r (producer %d) not written; a restart rolls "
                          "it forward", markers.transactional_id, markers.producer_id)
        finally:
            self._markers_done(markers.transactional_id, done)

    async def _write_and_complete(self, markers: TxnMarkers) -> tuple[int, int]:
        _, written = self.write_markers(markers.producer_id, markers.producer_epoch,
                                        commit=markers.commit,
                                        coordinator_epoch=markers.coordinator_epoch,
                                        partitions=markers.partitions)
        if not failpoints.skip("txn.markers.sync"):  # a test's way to break step 3's order
            await self.appends.sync(written)
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
