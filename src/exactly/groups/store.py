"""The `__consumer_offsets` topic: where committed offsets and group metadata are kept.

The coordinator's state is a fold over this topic, as in Kafka: the newest record per key wins and
a None value (tombstone) deletes. Writes go through the ordinary partition log; nothing else holds
durable group state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exactly.log.internal_topic import DEFAULT_SEGMENT_BYTES, InternalTopic, next_sequence
from exactly.log.markers import parse_marker
from exactly.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Record,
    build_own_batch,
    decode_records,
)

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog

OFFSETS_TOPIC = "__consumer_offsets"


log = logging.getLogger("exactly.groups")


@dataclass(frozen=True, slots=True)
class ReplayedBatch:
    """One batch of `__consumer_offsets` as the coordinator folds it on start."""

    partition: int
    producer_id: int
    transactional: bool
    # For a transaction marker: True for COMMIT, False for ABORT; None for a data batch.
    marker: bool | None
    records: list[Record]


@dataclass(frozen=True, slots=True)
class Appended:
    log: PartitionLog
    base_offset: int  # the offset of the batch's first record


class OffsetsLog:
    def __init__(self, logs: LogManager, num_partitions: int,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.logs = logs
        self.topic = InternalTopic(logs, OFFSETS_TOPIC, num_partitions, segment_bytes=segment_bytes)
        self.num_partitions = self.topic.num_partitions

    def partition(self, group_id: str) -> int:
        return self.topic.partition(group_id)

    def log_for(self, group_id: str) -> PartitionLog:
        return self.topic.log_for(group_id)

    def append(self, group_id: str, records: list[Record], now_ms: int, *,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
               transactional: bool = False) -> Appended:
        """Append the records as one batch (atomic: all of a commit or none of it).

        With a producer id the batch is written under that producer (TxnOffsetCommit): the log
        checks the epoch, which fences zombies, and a transactional batch belongs to the
        producer's open transaction in this partition until a marker ends it.
        """
        plog = self.log_for(group_id)
        sequence = -1
        if producer_id >= 0:
            sequence = next_sequence(plog, producer_id, producer_epoch)
        batch = build_own_batch(records, timestamp=now_ms, producer_id=producer_id,
                                producer_epoch=producer_epoch, base_sequence=sequence,
                                transactional=transactional)
        result = plog.append_own(batch, now_ms=now_ms)
        return Appended(plog, result.base_offset)

    def replay(self) -> Iterator[ReplayedBatch]:
        """Every batch of every partition, in offset order per partition."""
        for partition, batch in self.topic.batches():
            if batch.is_control:
                parsed = parse_marker(batch)
                if parsed is not None:
                    yield ReplayedBatch(partition, batch.producer_id, True, parsed.commit, [])
                continue
            yield ReplayedBatch(partition, batch.producer_id, batch.is_transactional, None,
                                decode_records(batch))
