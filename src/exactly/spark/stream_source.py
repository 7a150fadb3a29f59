"""Streaming reads. Offsets are Spark's Kafka JSON, {"topic": {"0": 42}}, kept in the query's
checkpoint, so a restarted query re-reads exactly what it had not committed.

With read_committed (the default) the end of a micro-batch is the last stable offset: a batch
never waits on an open transaction, and the offsets it spans include control records and the
records of aborted transactions, which the tasks skip.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from exactly.spark.offsets import PartitionRange, partitions_of, resolve_offsets
from exactly.spark.options import EARLIEST, LATEST, ReadOptions
from exactly.spark.source import read_range, to_arrow

__all__ = ["StreamReader", "limit_offsets"]

Offsets = dict[tuple[str, int], int]


def _to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _from_json(offsets: dict[str, dict[str, int]]) -> Offsets:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def limit_offsets(start: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """At most `max_rows` offsets in all past `start`, shared in proportion to each partition's
    lag (as Spark's Kafka source shares maxOffsetsPerTrigger)."""
    lags = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(lags.values())
    if total <= max_rows:
        return dict(end)
    limited = {}
    for tp, lag in lags.items():
        take = lag * max_rows // total
        limited[tp] = start.get(tp, end[tp]) + (max(1, take) if lag else 0)
    return limited


class StreamReader(DataSourceStreamReader):  # type: ignore[misc]
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def _start_offsets(self, tps: list[tuple[str, int]]) -> Offsets:
        return resolve_offsets(self.options.client, tps, self.options.starting, EARLIEST)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        return _to_json(self._start_offsets(partitions_of(self.options)))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def _with_new_partitions(self, start: Offsets, tps: list[tuple[str, int]]) -> Offsets:
        """Partitions that appeared since `start` was taken are read from their beginning."""
        new = [tp for tp in tps if tp not in start]
        return {**start, **resolve_offsets(self.options.client, new, "earliest", EARLIEST)}

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit
                     ) -> dict[str, dict[str, int]]:
        tps = partitions_of(self.options)
        begin = self._with_new_partitions(_from_json(start), tps)
        end = resolve_offsets(self.options.client, tps, "latest", LATEST)
        end = {tp: max(end[tp], begin[tp]) for tp in tps}
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(begin, end, limit.max_rows)
        return _to_json(end)

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
                   ) -> Sequence[InputPartition]:
        stop = _from_json(end)
        begin = self._with_new_partitions(_from_json(start), sorted(stop))
        return [InputPartition(PartitionRange(t, p, begin[t, p], stop[t, p]))
                for (t, p) in sorted(stop) if stop[t, p] > begin[t, p]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for chunk in read_range(self.options.client, partition.value):
            yield to_arrow(chunk)
