"""Options of the `exactly` data source, named as in Spark's own Kafka connector.

Spark hands options over as strings, with keys in any case; they are matched case-insensitively.
Any `kafka.<key>` option is passed to the client as `<key>` and checked by ClientConfig; other
unknown options raise OptionError naming them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from exactly.client import ClientConfig, ConfigError

__all__ = ["AT_LEAST_ONCE", "DECISIONS_TOPIC", "EARLIEST", "EXACTLY_ONCE", "KEEP_PREPARED",
           "LATEST", "PRODUCER_ID", "OffsetSpec", "OptionError", "ReadOptions", "WriteOptions",
           "parse_read_options", "parse_write_options"]

EARLIEST = -2  # Spark's JSON offsets use -2 for earliest and -1 for latest
LATEST = -1

# "earliest" / "latest", or an offset per (topic, partition) with EARLIEST/LATEST allowed.
OffsetSpec = Literal["earliest", "latest"] | dict[tuple[str, int], int]


class OptionError(ValueError):
    """A bad or unknown option of the `exactly` data source; the message names it."""


@dataclass(frozen=True)
class ReadOptions:
    client: dict[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None


EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
DECISIONS_TOPIC = "_exactly_spark_decisions"

# Option transactionResume: how the driver commits the exactly-once sink's transactions, which
# the tasks wrote and left open (exactly.spark.stream_sink; what the broker needs for each:
# exactly.spark.capabilities).
#   keep-prepared (default)  KIP-939 2PC: prepared transactions that never time out, finished
#                            after a crash by InitProducerId(KeepPreparedTxn).
#   producer-id              for brokers without KeepPreparedTxn (Apache Kafka up to 4.x):
#                            ordinary transactions, committed by resuming their producer id and
#                            epoch, as Flink's KafkaSink did before FLIP-319. A batch committed
#                            later than kafka.transaction.timeout.ms after a task's first write
#                            is lost (aborted by the broker); the default timeout is 900000 ms.
KEEP_PREPARED = "keep-prepared"
PRODUCER_ID = "producer-id"


@dataclass(frozen=True)
class WriteOptions:
    client: dict[str, str]
    topic: str | None = None
    delivery: str = EXACTLY_ONCE
    query_name: str | None = None
    transactional_id_prefix: str | None = None
    decisions_topic: str = DECISIONS_TOPIC
    transaction_resume: str = KEEP_PREPARED

    @property
    def prefix(self) -> str:
        """Transactional ids of an exactly-once query are `<prefix>-<partition>`."""
        if self.transactional_id_prefix:
            return self.transactional_id_prefix
        if self.query_name:
            return f"exactly-spark-{self.query_name}"
        raise OptionError("an exactly-once stream needs a stable name for its transactional ids: "
                          "set .queryName(...) on the query or option transactionalIdPrefix "
                          "(or deliveryGuarantee=at-least-once)")


# Options Spark itself passes to a streaming source or sink.
_SPARK_KEYS = {"queryname", "checkpointlocation", "path"}
_SOURCE_KEYS = {"subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
                "maxoffsetspertrigger"} | _SPARK_KEYS
_SINK_KEYS = {"topic", "deliveryguarantee", "transactionalidprefix", "decisionstopic",
              "transactionresume"} | _SPARK_KEYS


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _client_config(opts: dict[str, str], own: set[str], defaults: Mapping[str, str]
                   ) -> dict[str, str]:
    client = dict(defaults)
    unknown = []
    for key, value in opts.items():
        if key.startswith("kafka."):
            client[key[len("kafka."):]] = value
        elif key == "bootstrap.servers":
            client.setdefault("bootstrap.servers", value)
        elif key not in own:
            unknown.append(key)
    if unknown:
        raise OptionError(f"unknown option(s) {', '.join(sorted(unknown))} for format 'exactly'; "
                          f"known: kafka.bootstrap.servers, {', '.join(sorted(own))}, "
                          "and kafka.<client config key>")
    if not client.get("bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers (or bootstrap.servers) is required")
    try:
        ClientConfig(client)
    except ConfigError as exc:
        raise OptionError(f"bad kafka.* option: {exc}") from None
    return client


def _offsets(name: str, text: str | None, default: Literal["earliest", "latest"]) -> OffsetSpec:
    if text is None:
        return default
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word  # type: ignore[return-value]
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise TypeError("not an object")
        spec = {(str(t), int(p)): int(o)
                for t, parts in parsed.items() for p, o in dict(parts).items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise OptionError(f"bad value for option {name}: {text!r} ({exc}); use 'earliest', "
                          'latest\' or JSON like {"topic":{"0":23,"1":-2}}') from None
    for (topic, part), offset in spec.items():
        if offset < EARLIEST or part < 0:
            raise OptionError(f"bad offset {offset} for {topic}-{part} in option {name}")
    return spec


def _assign(text: str) -> dict[str, tuple[int, ...]]:
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict) or not parsed:
            raise ValueError("not a non-empty object")
        return {str(t): tuple(int(p) for p in parts) for t, parts in parsed.items()}
    except (ValueError, TypeError) as exc:
        raise OptionError(f"bad value for option assign: {text!r} ({exc}); "
                          'use JSON like {"topic":[0,1]}') from None


def parse_read_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """Options of a read; `streaming` for readStream (startingOffsets defaults to latest there,
    endingOffsets is not allowed, maxOffsetsPerTrigger is)."""
    opts = _lower(options)
    client = _client_config(opts, _SOURCE_KEYS, {"isolation.level": "read_committed"})
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign is "
                          f"needed; given: {', '.join(chosen) or 'none'}")
    subscribe = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
    if "subscribe" in opts and not subscribe:
        raise OptionError("option subscribe needs a comma-separated list of topics")
    pattern = opts.get("subscribepattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"bad regex in option subscribePattern: {exc}") from None
    if streaming:
        if "endingoffsets" in opts:
            raise OptionError("option endingOffsets is for batch queries only, not for streams")
        starting = _offsets("startingOffsets", opts.get("startingoffsets"), "latest")
        return ReadOptions(client=client, subscribe=subscribe, subscribe_pattern=pattern,
                           assign=_assign(opts["assign"]) if "assign" in opts else {},
                           starting=starting,
                           max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"))
    if "maxoffsetspertrigger" in opts:
        raise OptionError("option maxOffsetsPerTrigger is for streams only, not for batch queries")
    starting = _offsets("startingOffsets", opts.get("startingoffsets"), "earliest")
    ending = _offsets("endingOffsets", opts.get("endingoffsets"), "latest")
    if starting == "latest":
        raise OptionError("option startingOffsets='latest' is not valid for a batch query")
    if ending == "earliest":
        raise OptionError("option endingOffsets='earliest' is not valid for a batch query")
    if isinstance(starting, dict) and LATEST in starting.values():
        raise OptionError("option startingOffsets: -1 (latest) is not valid for a batch query")
    if isinstance(ending, dict) and EARLIEST in ending.values():
        raise OptionError("option endingOffsets: -2 (earliest) is not valid for a batch query")
    return ReadOptions(client=client, subscribe=subscribe, subscribe_pattern=pattern,
                       assign=_assign(opts["assign"]) if "assign" in opts else {},
                       starting=starting, ending=ending)


def _positive(opts: dict[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
        if value <= 0:
            raise ValueError
    except ValueError:
        raise OptionError(f"bad value for option {key}: {opts[key]!r}; "
                          "expected a positive whole number") from None
    return value


def parse_write_options(options: Mapping[str, str], *, batch: bool = False) -> WriteOptions:
    """Options of a write; deliveryGuarantee defaults to exactly-once for a stream and, as in
    Spark's own Kafka sink, to at-least-once for a `batch` write."""
    opts = _lower(options)
    client = _client_config(opts, _SINK_KEYS, {"enable.idempotence": "true", "acks": "all"})
    topic = opts.get("topic")
    delivery = opts.get("deliveryguarantee", AT_LEAST_ONCE if batch else EXACTLY_ONCE)
    delivery = delivery.strip().lower()
    if delivery not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise OptionError(f"bad value for option deliveryGuarantee: {opts['deliveryguarantee']!r}; "
                          f"use {EXACTLY_ONCE} or {AT_LEAST_ONCE}")
    return WriteOptions(client=client, topic=topic.strip() if topic else None, delivery=delivery,
                        query_name=opts.get("queryname") or None,
                        transactional_id_prefix=opts.get("transactionalidprefix") or None,
                        decisions_topic=opts.get("decisionstopic") or DECISIONS_TOPIC,
                        transaction_resume=_transaction_resume(opts))


def _transaction_resume(opts: dict[str, str]) -> str:
    value = opts.get("transactionresume", KEEP_PREPARED).strip().lower()
    if value not in (KEEP_PREPARED, PRODUCER_ID):
        raise OptionError(f"bad value for option transactionResume: {opts['transactionresume']!r}; "
                          f"use {KEEP_PREPARED} (KIP-939 two-phase commit, the default) or "
                          f"{PRODUCER_ID} (for brokers without KeepPreparedTxn)")
    return value
