"""Offset ranges, resolved on the driver: which partitions a query reads, and from where to where.

A range is [start, end). With read_committed (the default) "latest" is the last stable offset,
so a batch never waits on an open transaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exactly.spark.clients import PROCESS
from exactly.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions

__all__ = ["PartitionRange", "partitions_of", "resolve_offsets", "resolve_ranges"]


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    start: int
    end: int


def partitions_of(options: ReadOptions) -> list[tuple[str, int]]:
    """The (topic, partition) pairs the options select, sorted."""
    if options.assign:
        return sorted((t, p) for t, parts in options.assign.items() for p in parts)
    with PROCESS.admin(options.client) as admin:
        if options.subscribe_pattern is not None:
            pattern = re.compile(options.subscribe_pattern)
            topics = [t for t in admin.list_topics() if pattern.fullmatch(t)]
        else:
            topics = list(options.subscribe)
        found = admin.describe_topics(topics) if topics else {}
    missing = sorted(set(topics) - set(found))
    if missing:
        raise OptionError(f"topic(s) {', '.join(missing)} do not exist (option subscribe)")
    return sorted((t, p.partition) for t, d in found.items() for p in d.partitions)


def resolve_offsets(client: Mapping[str, str], tps: Iterable[tuple[str, int]], spec: OffsetSpec,
                    default: int) -> dict[tuple[str, int], int]:
    """Concrete offsets for `spec`; partitions the spec does not name get `default`
    (EARLIEST or LATEST)."""
    wanted: dict[tuple[str, int], int] = {}
    for tp in tps:
        if spec == "earliest":
            wanted[tp] = EARLIEST
        elif spec == "latest":
            wanted[tp] = LATEST
        else:
            wanted[tp] = spec.get(tp, default)
    symbolic = [tp for tp, o in wanted.items() if o in (EARLIEST, LATEST)]
    if not symbolic:
        return wanted
    with PROCESS.consumer({**client, "auto.offset.reset": "none"}) as consumer:
        consumer.assign(symbolic)
        consumer.seek_to_beginning([tp for tp in symbolic if wanted[tp] == EARLIEST])
        consumer.seek_to_end([tp for tp in symbolic if wanted[tp] == LATEST])
        for tp in symbolic:
            wanted[tp] = consumer.position(tp)
    return wanted


def resolve_ranges(options: ReadOptions) -> list[PartitionRange]:
    tps = partitions_of(options)
    unknown = [tp for spec in (options.starting, options.ending) if isinstance(spec, dict)
               for tp in spec if tp not in set(tps)]
    if unknown:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(set(unknown)))
        raise OptionError(f"startingOffsets/endingOffsets name partitions not read: {names}")
    starts = resolve_offsets(options.client, tps, options.starting, EARLIEST)
    ends = resolve_offsets(options.client, tps, options.ending, LATEST)
    return [PartitionRange(t, p, starts[t, p], max(starts[t, p], ends[t, p])) for t, p in tps]
