"""What DescribeConfigs tells about each config besides its value, as Kafka 4.4 tells it: the
type (KIP-226's ConfigType: BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD),
the documentation (v3+, KIP-569) and the synonyms (v1+, KIP-226): every place the value could
come from, in order of precedence.

Kafka's synonym rules (ConfigHelper): a broker key's synonyms are its own name and, for
log.retention.ms and log.roll.ms, the coarser keys behind it (minutes, hours), each with every
layer that has a value (dynamic per-broker, dynamic default, static, default), then cut before
the first entry named as the key itself. A topic key's synonyms are its override, then the
synonyms of the broker key that gives its default (retention.ms -> log.retention.ms, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from exactly.configdef import render
from exactly.server.config import CONFIG_TYPE_IDS, KEYS

Synonym = tuple[str, str, int]  # name, value, source (DescribeConfigs' source ids)
DEFAULT_SOURCE, TOPIC_SOURCE = 5, 1

# Kafka's LogConfig types of the topic keys Exactly knows.
TOPIC_TYPES: dict[str, str] = {
    "cleanup.policy": "LIST", "compression.type": "STRING", "delete.retention.ms": "LONG",
    "file.delete.delay.ms": "LONG", "flush.messages": "LONG", "flush.ms": "LONG",
    "follower.replication.throttled.replicas": "LIST", "index.interval.bytes": "INT",
    "leader.replication.throttled.replicas": "LIST", "max.compaction.lag.ms": "LONG",
    "max.message.bytes": "INT",
    "message.timestamp.after.max.ms": "LONG", "message.timestamp.before.max.ms": "LONG",
    "message.timestamp.type": "STRING",
    "min.cleanable.dirty.ratio": "DOUBLE", "min.compaction.lag.ms": "LONG",
    "min.insync.replicas": "INT", "preallocate": "BOOLEAN", "retention.bytes": "LONG",
    "retention.ms": "LONG", "segment.bytes": "INT", "segment.index.bytes": "INT",
    "segment.jitter.ms": "LONG", "segment.ms": "LONG",
    "unclean.leader.election.enable": "BOOLEAN",
}

TOPIC_DOCS: dict[str, str] = {
    "cleanup.policy": "delete: old segments are removed by retention; compact: the latest "
                      "record of each key is kept (both: both).",
    "compression.type": "The compression of the topic's batches; producer keeps the "
                        "producer's.",
    "delete.retention.ms": "How long delete markers (tombstones) and transaction markers stay "
                           "after compaction reached them.",
    "file.delete.delay.ms": "Accepted; Exactly deletes a removed segment's files at once.",
    "flush.messages": "Accepted; Exactly's durability is the broker's log.flush.policy.",
    "flush.ms": "Accepted; Exactly's durability is the broker's log.flush.policy.",
    "follower.replication.throttled.replicas": "Accepted; one replica: nothing to throttle.",
    "index.interval.bytes": "Bytes of records between two offset index entries.",
    "leader.replication.throttled.replicas": "Accepted; one replica: nothing to throttle.",
    "max.compaction.lag.ms": "The longest a record stays uncompacted.",
    "max.message.bytes": "The largest record batch the topic takes.",
    "message.timestamp.after.max.ms": "How far in the future a record's timestamp may be.",
    "message.timestamp.before.max.ms": "How far in the past a record's timestamp may be.",
    "message.timestamp.type": "CreateTime (the producer's) or LogAppendTime (the broker's).",
    "min.cleanable.dirty.ratio": "The share of uncompacted bytes that makes a log cleanable.",
    "min.compaction.lag.ms": "The least time a record stays uncompacted.",
    "min.insync.replicas": "Accepted; one replica is always in sync.",
    "preallocate": "Accepted; segments grow as written.",
    "retention.bytes": "The most bytes a partition keeps (-1: no limit).",
    "retention.ms": "How long records are kept (-1: no limit).",
    "segment.bytes": "The size at which a segment is rolled.",
    "segment.index.bytes": "The size of a segment's offset and time indexes.",
    "segment.jitter.ms": "Accepted; segments roll at segment.ms.",
    "segment.ms": "The age at which a segment is rolled.",
    "unclean.leader.election.enable": "Accepted; one replica: no election.",
}

# Kafka's ServerTopicConfigSynonyms: the broker key that gives a topic key its default.
TOPIC_TO_BROKER: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy", "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages", "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas", "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes", "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes", "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms", "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

# Broker keys whose value may come from coarser keys (Kafka's DynamicBrokerConfig).
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
}


# Kafka's broker keys without a default value (their coarser synonyms give it): a topic key
# that takes its default from one of them lists no broker synonym.
NULL_DEFAULTS = frozenset({"log.flush.interval.ms", "log.roll.jitter.ms"})


def config_type(name: str, topic: bool) -> int:
    """DescribeConfigs' type id of a key (0: unknown)."""
    if topic:
        kind = TOPIC_TYPES.get(name)
    elif name in KEYS:
        # Kafka's secrets are of type PASSWORD, whatever their text
        kind = "PASSWORD" if KEYS[name].sensitive else KEYS[name].type
    else:
        kind = None
    return CONFIG_TYPE_IDS.get(kind, 0) if kind else 0


def documentation(name: str, topic: bool) -> str | None:
    if topic:
        return TOPIC_DOCS.get(name)
    return KEYS[name].doc if name in KEYS else None


def broker_synonyms(name: str, layers: Callable[[str], Sequence[Synonym]]) -> list[Synonym]:
    """A broker key's synonyms; `layers(key)` gives the (name, value, source) of every layer
    of one key that has a value, most precedent first."""
    found = [s for key in BROKER_SYNONYMS.get(name, (name,)) for s in layers(key)]
    for i, s in enumerate(found):
        if s[0] == name:
            return found[i:]
    return []


def topic_synonyms(name: str, override: str | None, default: str | None,
                   layers: Callable[[str], Sequence[Synonym]]) -> list[Synonym]:
    """A topic key's synonyms: its override, then its broker key's synonyms (the broker keys
    Exactly does not declare give the topic key's default, as Kafka's defaults are)."""
    out: list[Synonym] = [] if override is None else [(name, override, TOPIC_SOURCE)]
    broker = TOPIC_TO_BROKER.get(name)
    if broker is None or broker in NULL_DEFAULTS:
        return out
    if broker in KEYS:
        return out + broker_synonyms(broker, layers)
    if default is not None:
        out.append((broker, default, DEFAULT_SOURCE))
    return out


def default_layer(name: str) -> list[Synonym]:
    """The DEFAULT_CONFIG layer of a broker key, when its default is a value."""
    key = KEYS.get(name)
    if key is None or key.default is None:
        return []
    text = render(key.typed_default())
    return [] if text is None else [(name, text, DEFAULT_SOURCE)]
