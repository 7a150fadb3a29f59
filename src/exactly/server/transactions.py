"""Carrying out the transaction coordinator's decisions: markers into the partitions.

The coordinator (exactly.txn) decides; the broker writes. A decided transaction is finished in
the order that keeps DESIGN invariant 4: the PrepareCommit/PrepareAbort record is made durable,
then a marker goes into every partition of the transaction (and pending transactional offsets in
`__consumer_offsets` are applied or dropped), those are made durable, and only then is the
transaction recorded complete.

EndTxn is answered once the decision is durable, as in Apache Kafka: the outcome is fixed from
then on (a restart rolls it forward), and the markers follow in a task of their own. While a
transaction's markers are being written, requests for its transactional id wait for them
(`wait_for_markers`) instead of answering CONCURRENT_TRANSACTIONS, which clients back off on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from exactly.groups import OFFSETS_TOPIC
from exactly.log import PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode, error_name
from exactly.server.faults import fault_point, pause_point

if TYPE_CHECKING:
    from exactly.server.broker import Broker
    from exactly.txn import TxnMarkers

log = logging.getLogger("exactly.transactions")


def write_markers(broker: Broker, producer_id: int, producer_epoch: int, *, commit: bool,
                  coordinator_epoch: int, partitions: list[tuple[str, int]],
                  ) -> tuple[dict[tuple[str, int], ErrorCode], list[PartitionLog]]:
    """Append a COMMIT or ABORT marker for `producer_id` to each partition."""
    now = broker.now_ms()
    errors: dict[tuple[str, int], ErrorCode] = {}
    written: list[PartitionLog] = []
    for topic, partition in partitions:
        try:
            plog = broker.logs.get_log(topic, partition)
            plog.append_marker(producer_id, producer_epoch, commit=commit,
                               coordinator_epoch=coordinator_epoch, now_ms=now)
        except LogError as exc:
            # A deleted topic or a fenced marker: nothing more can be done for this partition.
            errors[(topic, partition)] = exc.error_code
            log.warning("marker for producer %d not written to %s-%d: %s %s", producer_id, topic,
                        partition, error_name(exc.error_code), exc)
            continue
        errors[(topic, partition)] = ErrorCode.none
        written.append(plog)
        broker.notify_append(plog)
        if topic == OFFSETS_TOPIC:
            broker.groups.complete_txn(partition, producer_id, commit, now)
    return errors, written


async def finish(broker: Broker, markers: TxnMarkers) -> tuple[int, int]:
    """Roll a prepared transaction forward; returns the producer id and epoch now current."""
    done = _markers_pending(broker, markers.transactional_id)
    try:
        await broker.sync([broker.txn.log_for(markers.transactional_id)])
        fault_point("txn.after_prepare")
        return await _write_and_complete(broker, markers)
    finally:
        _markers_done(broker, markers.transactional_id, done)


async def decide(broker: Broker, markers: TxnMarkers) -> None:
    """EndTxn's part of finishing: return once the PrepareX record is durable (the client may be
    answered then), with the markers and CompleteX under way in a task of their own."""
    done = _markers_pending(broker, markers.transactional_id)
    try:
        await broker.sync([broker.txn.log_for(markers.transactional_id)])
    except BaseException:
        _markers_done(broker, markers.transactional_id, done)
        raise
    fault_point("txn.after_prepare")
    task = asyncio.create_task(_finish_in_background(broker, markers, done))
    broker.background_tasks.add(task)
    task.add_done_callback(broker.background_tasks.discard)


async def wait_for_markers(broker: Broker, transactional_id: str) -> None:
    """Return once no markers of `transactional_id` are being written."""
    while (done := broker.markers_in_progress.get(transactional_id)) is not None:
        await done.wait()


async def wait_for_all_markers(broker: Broker) -> None:
    """Return once the markers being written now are written (not those begun meanwhile)."""
    for done in list(broker.markers_in_progress.values()):
        await done.wait()


async def _finish_in_background(broker: Broker, markers: TxnMarkers, done: asyncio.Event) -> None:
    try:
        await pause_point("txn.before_markers")
        await _write_and_complete(broker, markers)
    except Exception:
        # The decision is durable: the next start rolls it forward. Until then the transaction
        # stays in PrepareX and requests for it answer CONCURRENT_TRANSACTIONS, as before.
        log.exception("markers of transaction %r (producer %d) not written; a restart rolls "
                      "it forward", markers.transactional_id, markers.producer_id)
    finally:
        _markers_done(broker, markers.transactional_id, done)


async def _write_and_complete(broker: Broker, markers: TxnMarkers) -> tuple[int, int]:
    _, written = write_markers(broker, markers.producer_id, markers.producer_epoch,
                               commit=markers.commit, coordinator_epoch=markers.coordinator_epoch,
                               partitions=markers.partitions)
    await broker.sync(written)
    fault_point("txn.after_markers")
    result = broker.txn.markers_written(markers.transactional_id, broker.now_ms())
    log.debug("transaction %r of producer %d epoch %d %s in %d partition(s)",
             markers.transactional_id, markers.producer_id, markers.producer_epoch,
             "committed" if markers.commit else "aborted", len(markers.partitions))
    return result


def _markers_pending(broker: Broker, transactional_id: str) -> asyncio.Event:
    done = asyncio.Event()
    broker.markers_in_progress[transactional_id] = done
    return done


def _markers_done(broker: Broker, transactional_id: str, done: asyncio.Event) -> None:
    if broker.markers_in_progress.get(transactional_id) is done:
        del broker.markers_in_progress[transactional_id]
    done.set()


async def recover(broker: Broker) -> None:
    """On start: finish what the coordinator had decided, then abort what nobody owns.

    A partition can hold an open transaction the coordinator does not know (or no longer holds
    that partition in): a crash between writing the data and the coordinator's record, or a
    power cut that kept one file's pages and not the other's. Its data was never acknowledged,
    so it is aborted; otherwise its LSO would never move again (DESIGN invariant 7).
    """
    for markers in broker.txn.pending_markers():
        await finish(broker, markers)
    written: list[PartitionLog] = []
    for plog in broker.logs.logs():
        for producer_id in list(plog.ongoing_transactions()):
            owned = broker.txn.ongoing_partitions(producer_id)
            if owned is not None and (plog.topic, plog.partition) in owned:
                continue
            epoch = next((p.epoch for p in plog.producers() if p.producer_id == producer_id), 0)
            log.warning("aborting an orphaned transaction of producer %d in %s-%d",
                        producer_id, plog.topic, plog.partition)
            _, logs = write_markers(broker, producer_id, epoch, commit=False,
                                    coordinator_epoch=broker.txn.config.coordinator_epoch,
                                    partitions=[(plog.topic, plog.partition)])
            written.extend(logs)
    await broker.sync(written)
