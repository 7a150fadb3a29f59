"""Carrying out the transaction coordinator's decisions: markers into the partitions.

The coordinator (exactly.txn) decides; the broker writes. A decided transaction is finished in
the order that keeps DESIGN invariant 4: the PrepareCommit/PrepareAbort record is made durable,
then a marker goes into every partition of the transaction (and pending transactional offsets in
`__consumer_offsets` are applied or dropped), those are made durable, and only then is the
transaction recorded complete.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from exactly.groups import OFFSETS_TOPIC
from exactly.log import PartitionLog
from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode, error_name
from exactly.server.faults import fault_point

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
    await broker.sync([broker.txn.log_for(markers.transactional_id)])
    fault_point("txn.after_prepare")
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
