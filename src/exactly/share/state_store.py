"""The `__share_group_state` topic: the durable state of every share-partition, as Kafka's share
coordinator keeps it (KIP-932), and the share groups' configs.

The state of a share-partition is a fold: its latest ShareSnapshot, then every ShareUpdate
written after it, each merged over the previous state (an update's batches replace the states
of their offsets; its start offset, unless -1, moves the SPSO and drops what lies below). Every
`share.coordinator.snapshot.update.records.per.snapshot` updates, the next write is a snapshot
of the folded state instead, so a replay folds at most that many updates per share-partition.

As in Kafka, the topic has `cleanup.policy=delete` with no time retention: compaction would keep
only the last update of a share-partition and lose the ones before it. Kafka prunes the records
before each share-partition's latest snapshot (DeleteRecords); this broker has no DeleteRecords
yet, so the topic keeps its history and a start replays it all.

Writes go through the ordinary partition log; the caller syncs `Written.log` under the flush
policy before it answers the client.

Transactional acknowledgements (KIP-1289) are written as Kafka writes TxnOffsetCommit's offsets
to `__consumer_offsets`: a ShareUpdate holding the states the transaction's commit would give
(ACKNOWLEDGED/ARCHIVED, with the delivery counts), in a transactional batch of the transaction's
producer id and epoch, in the state partition of the share-partition, which joins the
transaction. The transaction coordinator writes its COMMIT or ABORT marker there too, as the
draft's `ShareCoordinatorShard.replayEndTransactionMarker` expects. A replay holds such a batch
until its producer's marker: a COMMIT folds it at the marker's position, an ABORT drops it, and
one with no marker yet is an open transaction (`open_txns`), whose records the share-partition
holds as TX_PENDING until the coordinator's roll-forward or abort writes the marker.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exactly.log.errors import TopicAlreadyExistsError
from exactly.log.internal_topic import InternalTopic, next_sequence
from exactly.log.markers import parse_marker
from exactly.protocol.records import Record, build_own_batch, iter_keys_values
from exactly.share.codec import (
    SNAPSHOT_KEY,
    UPDATE_KEY,
    ShareSnapshot,
    ShareStateCodecError,
    ShareUpdate,
    StateKey,
    decode_group_configs,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_group_configs,
    encode_group_key,
    encode_snapshot,
    encode_state_key,
    encode_update,
)
from exactly.share.partition import RecordState, StateBatch, StateChange

if TYPE_CHECKING:
    from exactly.log import LogManager, PartitionLog

SHARE_STATE_TOPIC = "__share_group_state"
STATE_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1"}

log = logging.getLogger("exactly.share")

# (group id, topic id, partition): one share-partition.
ShareKey = tuple[str, uuid.UUID, int]


@dataclass(slots=True)
class DurableState:
    """The folded durable state of one share-partition."""

    start_offset: int
    states: dict[int, tuple[RecordState, int]] = field(default_factory=dict)
    state_epoch: int = 0
    snapshot_epoch: int = 0
    updates_since_snapshot: int = 0
    create_timestamp: int = -1

    def merge(self, start_offset: int, batches: tuple[StateBatch, ...]) -> None:
        for b in batches:
            for offset in range(b.first_offset, b.last_offset + 1):
                self.states[offset] = (b.state, b.delivery_count)
        if start_offset >= 0 and start_offset != self.start_offset:
            self.start_offset = start_offset
            for offset in [o for o in self.states if o < start_offset]:
                del self.states[offset]

    def batches(self) -> tuple[StateBatch, ...]:
        out: list[StateBatch] = []
        for offset in sorted(self.states):
            state, count = self.states[offset]
            last = out[-1] if out else None
            if (last is not None and last.last_offset + 1 == offset and last.state is state
                    and last.delivery_count == count):
                out[-1] = StateBatch(last.first_offset, offset, state, count)
            else:
                out.append(StateBatch(offset, offset, state, count))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Written:
    log: PartitionLog


class ShareStateStore:
    def __init__(self, logs: LogManager, num_partitions: int, segment_bytes: int,
                 updates_per_snapshot: int) -> None:
        self.logs = logs
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[ShareKey, DurableState] = {}
        self.group_configs: dict[str, dict[str, str]] = {}
        # After a replay: the staged acknowledgements of transactions with no marker yet,
        # producer id -> share-partition -> the states their commit gives.
        self.open_txns: dict[int, dict[ShareKey, list[StateBatch]]] = {}
        # Created with the first write, as Kafka creates it with the first share group: a
        # broker that never sees one keeps no 50 more partitions open.
        self._topic: InternalTopic | None = None
        if logs.topic(SHARE_STATE_TOPIC) is not None:
            self._replay(self._open())

    def _open(self) -> InternalTopic:
        if self._topic is None:
            if self.logs.topic(SHARE_STATE_TOPIC) is None:
                try:
                    self.logs.create_topic(
                        SHARE_STATE_TOPIC, self.num_partitions,
                        {**STATE_TOPIC_CONFIGS, "segment.bytes": str(self.segment_bytes)},
                        internal=True)
                except TopicAlreadyExistsError:
                    pass
            self._topic = InternalTopic(self.logs, SHARE_STATE_TOPIC, self.num_partitions,
                                        segment_bytes=self.segment_bytes)
        return self._topic

    # -- reads ----------------------------------------------------------------------------

    def _replay(self, topic: InternalTopic) -> None:
        # (state partition, producer id) -> the records of its open transaction, in order
        staged: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}
        for partition, batch in topic.batches():
            if batch.is_control:
                marker = parse_marker(batch)
                held = staged.pop((partition, batch.producer_id), [])
                if marker is not None and marker.commit:
                    for held_key, held_value in held:
                        self._fold_safely(held_key, held_value)
                continue
            txn = batch.is_transactional and batch.producer_id >= 0
            for _offset, raw_key, raw_value in iter_keys_values(batch):
                if raw_key is None:
                    continue
                if txn:
                    staged.setdefault((partition, batch.producer_id), []).append(
                        (raw_key, raw_value))
                else:
                    self._fold_safely(raw_key, raw_value)
        for (_, producer_id), held in staged.items():
            for raw_key, raw_value in held:
                try:
                    key = decode_key(raw_key)
                    if isinstance(key, str) or raw_value is None:
                        continue
                    batches = decode_update(raw_value).batches
                except ShareStateCodecError as exc:
                    log.error("event=share_state_record_skipped reason=%r", str(exc))
                    continue
                share_key = (key.group_id, key.topic_id, key.partition)
                self.open_txns.setdefault(producer_id, {}).setdefault(
                    share_key, []).extend(batches)

    def _fold_safely(self, raw_key: bytes, raw_value: bytes | None) -> None:
        try:
            self._fold(raw_key, raw_value)
        except ShareStateCodecError as exc:
            log.error("event=share_state_record_skipped reason=%r", str(exc))

    def _fold(self, raw_key: bytes, raw_value: bytes | None) -> None:
        key = decode_key(raw_key)
        if isinstance(key, str):
            if raw_value is None:
                self.group_configs.pop(key, None)
            else:
                self.group_configs[key] = decode_group_configs(raw_value)
            return
        share_key = (key.group_id, key.topic_id, key.partition)
        if raw_value is None:
            self.states.pop(share_key, None)
        elif key.kind == SNAPSHOT_KEY:
            snap = decode_snapshot(raw_value)
            state = DurableState(snap.start_offset, state_epoch=snap.state_epoch,
                                 snapshot_epoch=snap.snapshot_epoch,
                                 create_timestamp=snap.create_timestamp)
            state.merge(-1, snap.batches)
            self.states[share_key] = state
        else:
            current = self.states.get(share_key)
            if current is None:
                return  # an update without a snapshot: its state was deleted since
            update = decode_update(raw_value)
            current.merge(update.start_offset, update.batches)
            current.updates_since_snapshot += 1

    # -- writes ---------------------------------------------------------------------------

    def _append(self, key_text: str, records: list[Record], now_ms: int) -> Written:
        plog = self._open().log_for(key_text)
        plog.append_own(build_own_batch(records, timestamp=now_ms), now_ms=now_ms)
        return Written(plog)

    @staticmethod
    def _placement(key: ShareKey) -> str:
        # Kafka's SharePartitionKey "groupId:topicId:partition" decides the state partition.
        return f"{key[0]}:{key[1]}:{key[2]}"

    def initialize(self, key: ShareKey, start_offset: int, now_ms: int) -> Written:
        """InitializeShareGroupState: a first snapshot at `start_offset`."""
        previous = self.states.get(key)
        state = DurableState(start_offset, create_timestamp=now_ms,
                             state_epoch=previous.state_epoch + 1 if previous else 0)
        self.states[key] = state
        return self._write_snapshot(key, state, now_ms)

    def partition_of(self, key: ShareKey) -> int:
        """The `__share_group_state` partition that holds this share-partition's state."""
        return self._open().partition(self._placement(key))

    def stage(self, key: ShareKey, batches: tuple[StateBatch, ...], producer_id: int,
              producer_epoch: int, now_ms: int) -> Written:
        """Transactional acknowledgements (KIP-1289): a ShareUpdate with the states the
        transaction's commit gives, in a transactional batch of its producer, folded only when
        the COMMIT marker follows. The durable state is not changed now: the commit's own
        update does that. The log checks the producer epoch (LogError for a fenced one)."""
        state = self.states[key]
        value = ShareUpdate(state.snapshot_epoch, 0, -1, batches)
        record = Record(encode_state_key(StateKey(UPDATE_KEY, *key)), encode_update(value))
        plog = self._open().log_for(self._placement(key))
        batch = build_own_batch([record], timestamp=now_ms, producer_id=producer_id,
                                producer_epoch=producer_epoch,
                                base_sequence=next_sequence(plog, producer_id, producer_epoch),
                                transactional=True)
        plog.append_own(batch, now_ms=now_ms)
        return Written(plog)

    def write(self, key: ShareKey, change: StateChange, now_ms: int) -> Written:
        """WriteShareGroupState: an update, or a snapshot when enough updates piled up."""
        state = self.states.setdefault(key, DurableState(change.start_offset,
                                                         create_timestamp=now_ms))
        state.merge(change.start_offset, change.batches)
        if state.updates_since_snapshot + 1 >= self.updates_per_snapshot:
            return self._write_snapshot(key, state, now_ms)
        state.updates_since_snapshot += 1
        value = ShareUpdate(state.snapshot_epoch, 0, change.start_offset, change.batches)
        record = Record(encode_state_key(StateKey(UPDATE_KEY, *key)), encode_update(value))
        return self._append(self._placement(key), [record], now_ms)

    def _write_snapshot(self, key: ShareKey, state: DurableState, now_ms: int) -> Written:
        state.snapshot_epoch += 1
        state.updates_since_snapshot = 0
        value = ShareSnapshot(state.snapshot_epoch, state.state_epoch, 0, state.start_offset,
                              state.create_timestamp, now_ms, state.batches())
        record = Record(encode_state_key(StateKey(SNAPSHOT_KEY, *key)), encode_snapshot(value))
        return self._append(self._placement(key), [record], now_ms)

    def delete(self, key: ShareKey, now_ms: int) -> Written | None:
        """DeleteShareGroupState: tombstones for the share-partition's keys."""
        if self.states.pop(key, None) is None:
            return None
        records = [Record(encode_state_key(StateKey(kind, *key)), None)
                   for kind in (SNAPSHOT_KEY, UPDATE_KEY)]
        return self._append(self._placement(key), records, now_ms)

    def write_group(self, group_id: str, configs: dict[str, str] | None,
                    now_ms: int) -> Written:
        """The group's existence and config overrides; None deletes the group."""
        if configs is None:
            self.group_configs.pop(group_id, None)
        else:
            self.group_configs[group_id] = dict(configs)
        value = None if configs is None else encode_group_configs(configs)
        return self._append(group_id, [Record(encode_group_key(group_id), value)], now_ms)
