"""Every partition log of a broker, and the topic metadata (durable in `<log_dir>/topics.json`).

Crash safety: the metadata file is replaced atomically (temp file, fsync, rename, directory
fsync). Creating writes partition directories first and the metadata last; deleting writes the
metadata first and removes directories after. Partition directories that the metadata does not
list are left-overs of an interrupted create or delete and are removed on start.

The recovery points of every partition (how far each log is fsynced) are kept in
`recovery-point-offset-checkpoint`, as Kafka does: written by `checkpoint_recovery_points` (the
broker calls it every `log.flush.offset.checkpoint.interval.ms`) and after the logs closed,
read once on start, so that recovery after a crash validates only what follows them
(loader.py).

The log start offsets that DeleteRecords moved (KIP-107) are kept in `log-start-offset-checkpoint`,
as Kafka does, written before DeleteRecords answers (so that a crash cannot bring deleted records
back), when a topic is created (an entry left by a deleted topic of the same name must not apply
to the new one) and after the logs closed.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exactly.log.checkpoints import (
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
    write_checkpoint,
)
from exactly.log.config import LogConfig
from exactly.log.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from exactly.log.files import write_atomically
from exactly.log.partition import PartitionLog
from exactly.log.topic_config import (
    TOPIC_CONFIG_KEYS,
    ConfigEntry,
    default_value,
    describe,
    list_operation,
    log_config_for,
    validate_configs,
)

log = logging.getLogger(__name__)

METADATA_FILE = "topics.json"
_METADATA_VERSION = 1
MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 10_000  # per topic: each partition is a directory and a few open files
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIR = re.compile(r"(.+)-(\d+)")


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only
    internal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "topic_id": str(self.topic_id), "num_partitions": self.num_partitions,
                "configs": self.configs, "internal": self.internal}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicInfo:
        return cls(data["name"], uuid.UUID(data["topic_id"]), int(data["num_partitions"]),
                   {str(k): str(v) for k, v in data.get("configs", {}).items()}, bool(data.get("internal")))


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long; the maximum is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'")


class LogManager:
    def __init__(self, log_dir: Path, default_config: LogConfig, *, clock: Callable[[], float] = time.time,
                 default_partitions: int = 1) -> None:
        self.log_dir = Path(log_dir)
        self.default_config = default_config
        self.default_partitions = default_partitions
        self._clock = clock
        self._topics: dict[str, TopicInfo] = {}
        # Counts changes to the topics and their partition counts: what Metadata answers from
        # may be cached until it moves.
        self.topics_version = 0
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self.storage_errors = 0  # appends that failed for the disk's sake (full, I/O error)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._load()

    # -- metadata --------------------------------------------------------------------------

    def _load(self) -> None:
        path = self.log_dir / METADATA_FILE
        (self.log_dir / (METADATA_FILE + ".tmp")).unlink(missing_ok=True)
        partition_dirs = [p for p in self.log_dir.iterdir() if p.is_dir() and _PARTITION_DIR.fullmatch(p.name)]
        if path.exists():
            try:
                doc = json.loads(path.read_text())
                topics = [TopicInfo.from_json(t) for t in doc["topics"]]
            except (ValueError, KeyError, TypeError) as exc:
                raise StorageError(f"topic metadata {path} is unreadable ({exc}); restore it from a "
                                   "backup, the partition data is untouched") from exc
        elif partition_dirs:
            raise StorageError(f"{path} is missing but {self.log_dir} holds partition directories; "
                               "restore the metadata file or point the broker at an empty directory")
        else:
            topics = []
        for info in topics:
            self._topics[info.name] = info
            self._by_id[info.topic_id] = info
        for p in partition_dirs:
            m = _PARTITION_DIR.fullmatch(p.name)
            assert m is not None
            owner = self._topics.get(m.group(1))
            if owner is None or int(m.group(2)) >= owner.num_partitions:
                log.warning("event=orphan_partition_removed dir=%s", p)
                shutil.rmtree(p, ignore_errors=True)
        recovery_points = read_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        log_starts = read_checkpoint(self.log_dir / LOG_START_CHECKPOINT)
        for info in topics:
            config = self.log_config(info.name)
            for partition in range(info.num_partitions):
                self._open_partition(info.name, partition, config,
                                     recovery_points.get((info.name, partition)),
                                     log_starts.get((info.name, partition)))

    def _open_partition(self, name: str, partition: int, config: LogConfig,
                        recovery_point: int | None = None,
                        log_start_offset: int | None = None) -> PartitionLog:
        plog = PartitionLog.open(self.log_dir / f"{name}-{partition}", config, clock=self._clock,
                                 topic=name, partition=partition, recovery_point=recovery_point,
                                 log_start_offset=log_start_offset)
        self._logs[(name, partition)] = plog
        return plog

    def _save(self) -> None:
        write_atomically(self.log_dir / METADATA_FILE, json.dumps(
            {"version": _METADATA_VERSION, "topics": [t.to_json() for t in self._topics.values()]},
            indent=1))

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return info

    # -- topics ----------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str] | None = None, *,
                     internal: bool = False, validate_only: bool = False) -> TopicInfo:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        normalized = name.replace(".", "_")
        for other in self._topics:
            if other.replace(".", "_") == normalized:
                raise InvalidTopicError(
                    f"topic {name!r} collides with existing topic {other!r}: '.' and '_' are "
                    "interchangeable in metric names; pick another name")
        if num_partitions == -1:
            num_partitions = self.default_partitions
        self._check_partition_count(num_partitions)
        overrides = validate_configs(configs or {})
        info = TopicInfo(name, uuid.uuid4(), num_partitions, overrides, internal)
        if validate_only:
            return info
        config = log_config_for(self.default_config, overrides)
        for partition in range(num_partitions):
            self._open_partition(name, partition, config)
        self.checkpoint_log_start_offsets()  # before the topic exists: replaces stale entries
        self._topics[name] = info
        self._by_id[info.topic_id] = info
        self.topics_version += 1
        self._save()
        log.info("event=topic_created topic=%s id=%s partitions=%d", name, info.topic_id, num_partitions)
        return info

    @staticmethod
    def _check_partition_count(count: int) -> None:
        if count < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {count}")
        if count > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"{count} partitions is more than this broker's limit of "
                                         f"{MAX_PARTITIONS} per topic")

    def delete_topic(self, name: str) -> TopicInfo:
        info = self._require(name)
        del self._topics[name]
        del self._by_id[info.topic_id]
        self.topics_version += 1
        self._save()
        for partition in range(info.num_partitions):
            plog = self._logs.pop((name, partition), None)
            if plog is not None:
                plog.delete()
            shutil.rmtree(self.log_dir / f"{name}-{partition}", ignore_errors=True)
        log.info("event=topic_deleted topic=%s id=%s", name, info.topic_id)
        return info

    def create_partitions(self, name: str, total_count: int, *, validate_only: bool = False) -> None:
        info = self._require(name)
        if total_count <= info.num_partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.num_partitions} partitions; the new count {total_count} "
                "must be larger (partitions can only be added)")
        self._check_partition_count(total_count)
        if validate_only:
            return
        config = self.log_config(name)
        for partition in range(info.num_partitions, total_count):
            self._open_partition(name, partition, config)
        info.num_partitions = total_count
        self.topics_version += 1
        self._save()

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def get_log(self, name: str, partition: int) -> PartitionLog:
        plog = self._logs.get((name, partition))
        if plog is None:
            raise UnknownTopicOrPartitionError(f"partition {name}-{partition} does not exist")
        return plog

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """DeleteRecords on one partition: records below `offset` are gone for good, durably
        before this returns. Returns the new log start offset (the low watermark)."""
        plog = self.get_log(name, partition)
        before = plog.log_start_offset
        start = plog.delete_records_before(offset)
        if start != before:
            self.checkpoint_log_start_offsets()
            plog.delete_segments_below_start()
        return start

    # -- configs ---------------------------------------------------------------------------

    def log_config(self, name: str) -> LogConfig:
        return log_config_for(self.default_config, self._require(name).configs)

    def alter_topic_configs(self, name: str, set: Mapping[str, str], delete: Sequence[str], *,
                            append: Mapping[str, str] | None = None,
                            subtract: Mapping[str, str] | None = None,
                            validate_only: bool = False) -> None:
        """IncrementalAlterConfigs on a topic: SET, DELETE (back to the default), and APPEND or
        SUBTRACT on list-typed keys, applied to the current value (the override or the default).
        All or nothing: an InvalidConfigError changes nothing."""
        info = self._require(name)
        for key in delete:
            if key not in TOPIC_CONFIG_KEYS:
                raise InvalidConfigError(f"unknown topic config {key!r}")
        new = {k: v for k, v in info.configs.items() if k not in delete}
        changed = dict(set)
        for operations, is_append in ((append or {}, True), (subtract or {}, False)):
            for key, values in operations.items():
                current = new.get(key)
                if current is None and key in TOPIC_CONFIG_KEYS:
                    current = default_value(key, self.default_config)
                changed[key] = list_operation(key, current or "", values, append=is_append)
        new.update(validate_configs(changed))
        if validate_only:
            return
        info.configs = new
        self._save()
        config = log_config_for(self.default_config, new)
        for partition in range(info.num_partitions):
            self._logs[(name, partition)].update_config(config)

    def set_default_config(self, config: LogConfig) -> None:
        """New broker-wide defaults (dynamic broker configs): every topic's logs take them,
        under the topic's own overrides."""
        self.default_config = config
        for info in self._topics.values():
            topic_config = log_config_for(config, info.configs)
            for partition in range(info.num_partitions):
                self._logs[(info.name, partition)].update_config(topic_config)

    def describe_topic_configs(self, name: str) -> list[ConfigEntry]:
        return describe(self.default_config, self._require(name).configs)

    # -- maintenance -----------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        return sum(plog.apply_retention(now_ms) for plog in self._logs.values())

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Drop idle producers without an open transaction from every log (producer.id.expiration.ms)."""
        return sum(plog.expire_producers(now_ms, expiration_ms) for plog in self._logs.values())

    def flush_all(self, logs: list[PartitionLog] | None = None) -> None:
        """fsync every log (or `logs`: a list taken on the owner's thread, when this runs in a
        worker thread); logs closed meanwhile are skipped."""
        for plog in self.logs() if logs is None else logs:
            if not plog.closed:
                plog.flush()

    def snapshot_producer_states(self) -> list[Callable[[], None]]:
        """A producer-state snapshot of every log that grew since its newest (see
        PartitionLog.snapshot_producer_state): the writes, to run in any thread."""
        writes = [plog.snapshot_producer_state() for plog in self._logs.values()]
        return [write for write in writes if write is not None]

    def checkpoint_recovery_points(self) -> None:
        """Write every partition's recovery point to `recovery-point-offset-checkpoint` (replaced
        whole): each is taken after the index entries leading to it are fsynced."""
        write_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT,
                         {key: plog.recovery_point() for key, plog in self._logs.items()})

    def checkpoint_log_start_offsets(self) -> None:
        """Write every partition's log start offset to `log-start-offset-checkpoint` (replaced
        whole, fsynced)."""
        write_checkpoint(self.log_dir / LOG_START_CHECKPOINT,
                         {key: plog.log_start_offset for key, plog in self._logs.items()})

    def close(self) -> None:
        if not self._logs:  # closed already: keep the checkpoint of that close
            return
        self.checkpoint_log_start_offsets()
        for plog in self._logs.values():
            plog.close()
        self.checkpoint_recovery_points()  # every log is fsynced to its end now
        self._logs.clear()
