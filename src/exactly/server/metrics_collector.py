"""The broker's state as Prometheus metrics, read when /metrics is scraped (metrics.py serves it).

Nothing polls, and nothing walks the disk: every figure is kept in memory by the component that
owns it. Read here: the seed's `active-transaction-open-time-max` (KIP-939) and transactions by
state; each partition's log start offset, log end offset (the high watermark: one node), last
stable offset and its lag behind the high watermark (an open transaction holds read_committed
back), and size (Kafka's kafka.log:type=Log metrics); each group's lag per partition (high
watermark minus committed offset, classic and KIP-848 groups) and each share-partition's lag
(KIP-932 share groups: the records from the share-partition start offset on not yet delivered
for good, KIP-1226); the log cleaner's progress: bytes read and written, records removed, the
last clean's time and duration, and each compacted partition's dirty ratio (Kafka's LogCleaner
metrics); writes that failed for the disk's sake, and corrupt batches fetches found
(log/checked_reads.py).

Internal topics (`__consumer_offsets`, `__transaction_state`, `__share_group_state`: 50
partitions each by default) are summarized per topic (`exactly_internal_topic_*`: partitions,
total size, sum of log end offsets, largest LSO lag and dirty ratio, corrupt batches) rather
than listed partition by partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from exactly.log.errors import UnknownTopicOrPartitionError
from exactly.txn.state import TxnState

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog
    from exactly.server.services import Services


def _lso_lag(plog: PartitionLog) -> int:
    return plog.high_watermark - plog.last_stable_offset


# The users' topics' partitions: (name after exactly_partition_, help, value).
_PARTITION_GAUGES: tuple[tuple[str, str, Callable[[PartitionLog], int]], ...] = (
    ("log_start_offset", "The first offset kept (retention and DeleteRecords move it).",
     lambda plog: plog.log_start_offset),
    ("log_end_offset", ("The offset the next record gets: the high watermark (one node, every "
                        "append is replicated), what read_uncommitted consumers read up to."),
     lambda plog: plog.high_watermark),
    ("last_stable_offset", "The last stable offset: read_committed consumers read up to it.",
     lambda plog: plog.last_stable_offset),
    ("lso_lag", ("High watermark minus last stable offset: records read_committed consumers "
                 "cannot read yet because a transaction before them is open."), _lso_lag),
    ("size_bytes", "Bytes of the partition's log segments (indexes not included).",
     lambda plog: plog.size_bytes),
)
# The internal topics, one line each: (name after exactly_internal_topic_, help, value).
_INTERNAL_TOPIC_GAUGES: tuple[tuple[str, str, Callable[[list[PartitionLog]], int]], ...] = (
    ("partitions", "Partitions of an internal topic.", len),
    ("size_bytes", "Bytes of an internal topic's log segments, all partitions.",
     lambda parts: sum(p.size_bytes for p in parts)),
    ("log_end_offsets", ("Sum of an internal topic's log end offsets: its rate is the records "
                         "(and markers) the coordinators write per second."),
     lambda parts: sum(p.high_watermark for p in parts)),
    ("lso_lag_max", ("The largest LSO lag among an internal topic's partitions (open "
                     "transactions holding offsets or share acknowledgements back)."),
     lambda parts: max(_lso_lag(p) for p in parts)),
)


class BrokerCollector(Collector):
    """The broker's state as gauges, read when Prometheus scrapes."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def describe(self) -> list[Any]:
        return []  # unchecked collector: its metric names are not reserved in the registry

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._transactions()
        logs = self._partition_logs()
        yield from self._partitions([plog for plog, internal in logs if not internal])
        yield from self._internal_topics([plog for plog, internal in logs if internal])
        yield from self._group_lag()
        yield from self._cleaner()
        errors = CounterMetricFamily("exactly_log_storage_errors",
                                     "Writes that failed for the disk's sake (full, I/O error): "
                                     "answered KAFKA_STORAGE_ERROR.")
        errors.add_metric([], self.services.logs.storage_errors)
        yield errors

    def _partition_logs(self) -> list[tuple[PartitionLog, bool]]:
        """Every opened partition log, by topic and partition, each with whether its topic is
        internal."""
        logs = self.services.logs
        found: list[tuple[PartitionLog, bool]] = []
        for info in sorted(logs.topics(), key=lambda t: t.name):
            for partition in range(info.num_partitions):
                try:
                    found.append((logs.get_log(info.name, partition), info.internal))
                except UnknownTopicOrPartitionError:  # a partition not opened (yet)
                    continue
        return found

    @staticmethod
    def _partitions(plogs: list[PartitionLog]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """One line per partition of the users' topics (Kafka's kafka.log:type=Log metrics)."""
        labels = ["topic", "partition"]
        for name, text, value in _PARTITION_GAUGES:
            gauge = GaugeMetricFamily(f"exactly_partition_{name}", text, labels=labels)
            for plog in plogs:
                gauge.add_metric([plog.topic, str(plog.partition)], value(plog))
            yield gauge
        corrupt = CounterMetricFamily(
            "exactly_log_corrupt_batches",
            "Corrupt batches (CRC, length, offsets) that fetches found in segment bytes read from "
            "disk, each counted once: fetches from them are answered CORRUPT_MESSAGE; run "
            "`exactly log verify`.", labels=labels)
        for plog in plogs:
            corrupt.add_metric([plog.topic, str(plog.partition)], plog.corrupt_batches.count)
        yield corrupt

    def _internal_topics(self, plogs: list[PartitionLog]
                         ) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The internal topics, one line per topic: totals, or the largest figure where a
        total means nothing."""
        by_topic: dict[str, list[PartitionLog]] = {}
        for plog in plogs:
            by_topic.setdefault(plog.topic, []).append(plog)
        ratios = self.services.cleaner.metrics.dirty_ratios
        dirty = GaugeMetricFamily("exactly_internal_topic_dirty_ratio_max",
                                  "The largest dirty ratio among an internal topic's partitions "
                                  "(they are compacted), as of the cleaner's last look.",
                                  labels=["topic"])
        corrupt = CounterMetricFamily("exactly_internal_topic_corrupt_batches",
                                      "Corrupt batches fetches found, all partitions.",
                                      labels=["topic"])
        for name, text, value in _INTERNAL_TOPIC_GAUGES:
            gauge = GaugeMetricFamily(f"exactly_internal_topic_{name}", text, labels=["topic"])
            for topic, parts in by_topic.items():
                gauge.add_metric([topic], value(parts))
            yield gauge
        for topic, parts in by_topic.items():
            dirty.add_metric([topic], max(ratios.get((topic, p.partition), 0.0) for p in parts))
            corrupt.add_metric([topic], sum(p.corrupt_batches.count for p in parts))
        yield from (dirty, corrupt)

    def _group_lag(self) -> Iterator[GaugeMetricFamily]:
        """Consumer lag per group and partition, from what is in memory: committed offsets
        (classic and KIP-848 groups) and share-partition start offsets (share groups)."""
        logs = self.services.logs
        lag = GaugeMetricFamily(
            "exactly_consumer_group_lag",
            "High watermark minus the group's committed offset (classic and consumer groups), "
            "per partition with an offset committed.", labels=["group", "topic", "partition"])
        groups = self.services.groups
        for listing in sorted(groups.list_groups(), key=lambda g: g.group_id):
            committed = groups.fetch_offsets(listing.group_id, None)
            for (topic, partition), offset in sorted(committed.items()):
                plog = _log_or_none(logs, topic, partition)
                if offset is None or offset.offset < 0 or plog is None:
                    continue
                lag.add_metric([listing.group_id, topic, str(partition)],
                               max(plog.high_watermark - offset.offset, 0))
        yield lag
        share_lag = GaugeMetricFamily(
            "exactly_share_group_lag",
            "Records of a share-partition from its start offset (SPSO) up to the high watermark "
            "not yet delivered for good (KIP-932 share groups; KIP-1226's lag).",
            labels=["group", "topic", "partition"])
        share = self.services.share
        for group_id, topic_id, partition in sorted(share.store.states):
            info = logs.topic_by_id(topic_id)
            plog = _log_or_none(logs, info.name, partition) if info is not None else None
            if info is None or plog is None:
                continue
            share_lag.add_metric([group_id, info.name, str(partition)],
                                 share.lag(group_id, topic_id, partition, plog.high_watermark))
        yield share_lag

    def _cleaner(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        m = self.services.cleaner.metrics
        for name, text, value in (
            ("runs", "Cleans done.", m.runs),
            ("read_bytes", "Bytes of segments the cleaner read (offset map and copy).",
             m.bytes_read),
            ("written_bytes", "Bytes of cleaned segments the cleaner wrote.", m.bytes_written),
            ("removed_records", "Records the cleaner removed.", m.records_removed),
        ):
            counter = CounterMetricFamily(f"exactly_log_cleaner_{name}", text)
            counter.add_metric([], value)
            yield counter
        last = GaugeMetricFamily("exactly_log_cleaner_last_clean_timestamp_seconds",
                                 "When the last clean was planned (0: none yet).")
        last.add_metric([], m.last_clean_ms / 1000)
        yield last
        took = GaugeMetricFamily("exactly_log_cleaner_last_clean_duration_seconds",
                                 "How long the last clean took.")
        took.add_metric([], m.last_clean_seconds)
        yield took
        dirty = GaugeMetricFamily(
            "exactly_log_cleaner_dirty_ratio",
            "Share of a compacted partition's cleanable bytes not cleaned yet, as of the "
            "cleaner's last look (min.cleanable.dirty.ratio is the threshold). Internal topics: "
            "exactly_internal_topic_dirty_ratio_max.",
            labels=["topic", "partition"])
        logs = self.services.logs
        for (topic, partition), ratio in sorted(m.dirty_ratios.items()):
            info = logs.topic(topic)
            if info is not None and not info.internal:
                dirty.add_metric([topic, str(partition)], ratio)
        yield dirty

    def _transactions(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now_ms = self.services.clock()
        open_max = 0
        by_state = {s.display_name: 0 for s in TxnState}
        for meta in self.services.txn.list_transactions(now_ms=now_ms):
            by_state[meta.state.display_name] += 1
            if meta.state.is_open and meta.txn_start_ms >= 0:
                open_max = max(open_max, now_ms - meta.txn_start_ms)
        g = GaugeMetricFamily(
            "exactly_transaction_active_open_time_max_ms",
            "The longest time a currently open transaction has been open, in ms "
            "(Kafka's transaction-coordinator-metrics active-transaction-open-time-max).",
        )
        g.add_metric([], open_max)
        yield g
        states = GaugeMetricFamily(
            "exactly_transactions", "Transactional ids known to the coordinator, by state.",
            labels=["state"])
        for name, count in sorted(by_state.items()):
            states.add_metric([name], count)
        yield states
        expired = CounterMetricFamily(
            "exactly_transaction_expired_aborts",
            "Transactions the coordinator aborted on its own, by reason: timeout "
            "(transaction.timeout.ms) or session (KIP-1309: no heartbeat for the session "
            "timeout).", labels=["reason"])
        for reason, count in sorted(self.services.txn.expired_aborts.items()):
            expired.add_metric([reason], count)
        yield expired

def _log_or_none(logs: LogManager, topic: str, partition: int) -> PartitionLog | None:
    try:
        plog: PartitionLog = logs.get_log(topic, partition)
    except UnknownTopicOrPartitionError:  # deleted since, or never opened
        return None
    return plog
