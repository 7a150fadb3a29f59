"""The `__consumer_offsets` topic: where committed offsets and group metadata are kept.

The coordinator's state is a fold over this topic, as in Kafka: the newest record per key wins and
a None value (tombstone) deletes. Writes go through the ordinary partition log; nothing else holds
durable group state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from exactly.protocol.partitioning import partition_for
from exactly.protocol.records import Record, build_batch, decode_records, iter_batches

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog

OFFSETS_TOPIC = "__consumer_offsets"

# The log layer applies time retention to every topic; Kafka keeps this topic forever through
# compaction, so retention is turned off here (offsets expire by the coordinator's own rule).
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1",
                         "segment.bytes": "104857600"}  # as Kafka: offsets.topic.segment.bytes

_READ_BYTES = 1024 * 1024

log = logging.getLogger("exactly.groups")


class OffsetsLog:
    def __init__(self, logs: LogManager, num_partitions: int) -> None:
        from exactly.log.errors import TopicAlreadyExistsError

        self.logs = logs
        info = logs.topic(OFFSETS_TOPIC)
        if info is None:
            try:
                info = logs.create_topic(OFFSETS_TOPIC, num_partitions, dict(OFFSETS_TOPIC_CONFIGS),
                                         internal=True)
            except TopicAlreadyExistsError:
                info = logs.topic(OFFSETS_TOPIC)
                assert info is not None
        # An existing topic keeps its partition count: group placement must not move.
        self.num_partitions = info.num_partitions

    def partition(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def log_for(self, group_id: str) -> PartitionLog:
        return self.logs.get_log(OFFSETS_TOPIC, self.partition(group_id))

    def append(self, group_id: str, records: list[Record], now_ms: int) -> PartitionLog:
        """Append the records as one batch (atomic: all of a commit or none of it)."""
        plog = self.log_for(group_id)
        plog.append(build_batch(records, timestamp=now_ms), now_ms=now_ms)
        return plog

    def replay(self) -> Iterator[Record]:
        """Every record of every partition, in offset order per partition."""
        for partition in range(self.num_partitions):
            plog = self.logs.get_log(OFFSETS_TOPIC, partition)
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                data = plog.read(offset, _READ_BYTES)
                if not data:
                    log.error("replay of %s-%d read nothing at offset %d of %d", OFFSETS_TOPIC,
                              partition, offset, plog.log_end_offset)
                    break
                start = offset
                for batch in iter_batches(data):
                    offset = batch.next_offset
                    if batch.is_control:
                        continue
                    yield from decode_records(batch)
                if offset <= start:  # no progress: never spin on a malformed read
                    log.warning("replay of %s-%d stopped at offset %d", OFFSETS_TOPIC, partition,
                                offset)
                    break
