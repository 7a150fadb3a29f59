"""The admin client's records and logs: delete records below an offset (KIP-107), describe the
brokers' log directories (KIP-113), and ListOffsets by OffsetSpec with an isolation level, each
asked of the partitions' leaders.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from exactly.client.admin.base import AdminBase, item_error, raise_failures
from exactly.client.cluster import make_request, request_module
from exactly.client.types import (
    ListOffsetsResultInfo,
    LogDirDescription,
    OffsetSpec,
    ReplicaLogInfo,
)
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.structs import TopicPartition

_ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


class RecordsAdmin(AdminBase):
    """Records, log directories and offsets."""

    async def delete_records(self, before: Mapping[tuple[str, int], int], *, partial: bool = False
                             ) -> dict[TopicPartition, Any]:
        """Move each partition's log start offset up to the given offset (-1: its high
        watermark), as kafka-delete-records.sh does (KIP-107); the new low watermarks. With
        `partial`, a partition that failed maps to its KafkaError instead of raising AdminError,
        so that the others' results are not lost."""
        out: dict[TopicPartition, Any] = {}
        wanted = {TopicPartition(*tp): offset for tp, offset in before.items()}
        leaders, failures = await self._by_leader(wanted, "delete records of")
        for conn, topics in leaders:
            module = request_module(conn, ApiKey.DELETE_RECORDS)
            response = await conn.send(make_request(
                conn, ApiKey.DELETE_RECORDS, timeout=self._timeout, topics=tuple(
                    build(module.DeleteRecordsTopic, name=t, partitions=tuple(
                        build(module.DeleteRecordsPartition, partition_index=p,
                              offset=wanted[TopicPartition(t, p)]) for p in ps))
                    for t, ps in topics.items())))
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if (e := item_error(f"delete records of {tp.topic}-{tp.partition}",
                                         p.error_code)) is not None:
                        failures[tp] = e
                    else:
                        out[tp] = p.low_watermark
        if partial:
            return {**out, **failures}
        raise_failures(failures)
        return out

    async def describe_log_dirs(self, topics: Iterable[str] | None = None
                                ) -> dict[int, list[LogDirDescription]]:
        """Each broker's log directories with the partitions in them (of `topics`, or all),
        per broker id, as kafka-log-dirs.sh --describe shows them (KIP-113)."""
        # The request names partitions, not topics: every partition of each topic asked for.
        names = None if topics is None else list(topics)
        md = await self.cluster.refresh([] if names is None else names)
        wanted = None if names is None else {
            t: tuple(sorted(md.topics[t].partitions)) if t in md.topics else () for t in names}
        out: dict[int, list[LogDirDescription]] = {}
        for broker_id in sorted(md.brokers):
            conn = await self.cluster.connection(broker_id)
            module = request_module(conn, ApiKey.DESCRIBE_LOG_DIRS)
            response = await conn.send(make_request(
                conn, ApiKey.DESCRIBE_LOG_DIRS, topics=None if wanted is None else tuple(
                    build(module.DescribableLogDirTopic, topic=t, partitions=ps)
                    for t, ps in wanted.items())))
            if (e := item_error(f"describe log dirs of broker {broker_id}",
                                 getattr(response, "error_code", 0))) is not None:
                raise e
            out[broker_id] = [LogDirDescription(
                r.log_dir, int(r.error_code),
                {TopicPartition(t.name, p.partition_index):
                     ReplicaLogInfo(p.partition_size, p.offset_lag, p.is_future_key)
                 for t in r.topics for p in t.partitions},
                getattr(r, "total_bytes", -1), getattr(r, "usable_bytes", -1))
                for r in response.results]
        return out

    async def list_offsets(self, specs: Mapping[tuple[str, int], OffsetSpec], *,
                           isolation_level: str = "read_uncommitted"
                           ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """ListOffsets at each partition's leader: the earliest or latest offset, the offset
        of the record with the largest timestamp, or the first at or after a timestamp.
        read_committed makes "latest" the last stable offset (KIP-98)."""
        isolation = _ISOLATION_LEVELS.get(isolation_level)
        if isolation is None:
            raise ValueError(f"isolation_level {isolation_level!r}: read_uncommitted or "
                             "read_committed")
        wanted = {TopicPartition(*tp): spec for tp, spec in specs.items()}
        leaders, failures = await self._by_leader(wanted, "list offsets of")
        out: dict[TopicPartition, ListOffsetsResultInfo] = {}
        for conn, topics in leaders:
            module = request_module(conn, ApiKey.LIST_OFFSETS)
            response = await conn.send(make_request(
                conn, ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=isolation,
                topics=tuple(build(module.ListOffsetsTopic, name=t, partitions=tuple(
                    build(module.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                          timestamp=wanted[TopicPartition(t, p)].timestamp, max_num_offsets=1)
                    for p in ps)) for t, ps in topics.items())))
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if (e := item_error(f"list offsets of {t.name}-{p.partition_index}",
                                         p.error_code)):
                        failures[tp] = e
                        continue
                    epoch = getattr(p, "leader_epoch", -1)
                    out[tp] = ListOffsetsResultInfo(p.offset, p.timestamp,
                                                    epoch if epoch >= 0 else None)
        raise_failures(failures)
        return out
