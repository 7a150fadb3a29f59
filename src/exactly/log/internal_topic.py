"""An internal topic that a coordinator keeps its state in (`__consumer_offsets`,
`__transaction_state`): records keyed by a coordinator key, placed as Kafka places them, read
back whole on start."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from exactly.log.errors import TopicAlreadyExistsError
from exactly.log.manager import LogManager
from exactly.log.partition import PartitionLog
from exactly.protocol.partitioning import partition_for
from exactly.protocol.records import RecordBatchHeader, iter_batches

log = logging.getLogger("exactly.log")

# Kafka keeps these topics forever through compaction; the log's time retention is turned off
# (the coordinators expire their entries by their own rules, with tombstones).
INTERNAL_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1"}
# offsets.topic.segment.bytes and transaction.state.log.segment.bytes. Kafka's default is 100 MiB;
# ours is 256 KiB: a coordinator replays its topic's active segments (which the cleaner never
# touches) on every start, each of its 50 partitions has one, and a Python broker replays about
# 30 MiB a second (bench/recovery.py). Small segments roll, so the cleaner keeps the rest small.
DEFAULT_SEGMENT_BYTES = 256 * 1024
_READ_BYTES = 1024 * 1024


class InternalTopic:
    def __init__(self, logs: LogManager, name: str, num_partitions: int, *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.logs = logs
        self.name = name
        info = logs.topic(name)
        if info is None:
            try:
                info = logs.create_topic(
                    name, num_partitions,
                    {**INTERNAL_TOPIC_CONFIGS, "segment.bytes": str(segment_bytes)}, internal=True)
            except TopicAlreadyExistsError:
                info = logs.topic(name)
                assert info is not None
        # An existing topic keeps its partition count (keys must not move to other partitions)
        # and its segment.bytes, as Kafka applies these keys only when it creates the topic.
        self.num_partitions = info.num_partitions

    def partition(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def log_for(self, key: str) -> PartitionLog:
        return self.logs.get_log(self.name, self.partition(key))

    def batches(self) -> Iterator[tuple[int, RecordBatchHeader]]:
        """(partition, batch) for every stored batch, markers included, in offset order."""
        for partition in range(self.num_partitions):
            plog = self.logs.get_log(self.name, partition)
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                data = plog.read(offset, _READ_BYTES)
                if not data:
                    log.error("replay of %s-%d read nothing at offset %d of %d", self.name,
                              partition, offset, plog.log_end_offset)
                    break
                start = offset
                for batch in iter_batches(data):
                    offset = batch.next_offset
                    yield partition, batch
                if offset <= start:  # no progress: never spin on a malformed read
                    log.warning("replay of %s-%d stopped at offset %d", self.name, partition,
                                offset)
                    break


def next_sequence(plog: PartitionLog, producer_id: int, producer_epoch: int) -> int:
    """The sequence the log expects next from this producer in this partition.

    The log refuses a producer id without a sequence, so the coordinator writes real sequences,
    taken from the partition's own producer state: 0 for a new epoch, else the next one. That
    state is rebuilt from the log on start, so nothing here needs to be kept.
    """
    entry = plog.producer_state.last_entry(producer_id)
    if entry is None or entry.epoch != producer_epoch or entry.last_sequence < 0:
        return 0
    return (entry.last_sequence + 1) & 0x7FFFFFFF
