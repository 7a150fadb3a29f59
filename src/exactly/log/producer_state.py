"""Idempotent producer state per producer id, with the rules of Kafka's ProducerStateManager.

Transactions (KIP-98): a transactional batch of a producer without an open transaction here opens
one at its base offset; a marker (COMMIT/ABORT control batch) closes it. `ongoing` maps producer
id -> first offset of its open transaction, in first-offset order, which gives the LSO.

The state is a cache of what the log says: it is snapshotted (`<offset>.snapshot`: the state after
every batch below that offset) at segment roll and clean close, and rebuilt on open by loading the
newest usable snapshot and replaying the batches after it.
"""

from __future__ import annotations

import json
import logging
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from exactly.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from exactly.log.files import write_atomically
from exactly.log.txn_index import AbortedTxn
from exactly.protocol.records import NO_PRODUCER_EPOCH, NO_SEQUENCE

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5  # Kafka's max.in.flight for idempotence is 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_TO_KEEP = 3
_SNAPSHOT_VERSION = 1
_CRC = struct.Struct(">I")
_MAX_SEQUENCE = 0x7FFFFFFF


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _MAX_SEQUENCE)


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    # The coordinator epoch of the last marker, and the first offset of the open transaction.
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_sequence(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.epoch, deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.last_timestamp, self.coordinator_epoch, self.current_txn_first_offset,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "producer_id": self.producer_id,
            "epoch": self.epoch,
            "last_timestamp": self.last_timestamp,
            "coordinator_epoch": self.coordinator_epoch,
            "current_txn_first_offset": self.current_txn_first_offset,
            "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                        for b in self.batches],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProducerStateEntry:
        batches = deque((BatchMetadata(*map(int, b)) for b in data["batches"]), maxlen=NUM_BATCHES_TO_RETAIN)
        txn_first = data.get("current_txn_first_offset")
        return cls(int(data["producer_id"]), int(data["epoch"]), batches, int(data["last_timestamp"]),
                   int(data.get("coordinator_epoch", -1)), None if txn_first is None else int(txn_first))


@dataclass(slots=True, frozen=True)
class _TxnEvent:
    producer_id: int
    first_offset: int
    marker_offset: int | None = None  # None: the transaction starts
    aborted: bool = False


class ProducerAppend:
    """The producer-state changes of one append, checked batch by batch, applied by commit()."""

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager
        self.updated: dict[int, ProducerStateEntry] = {}
        self._txn_events: list[_TxnEvent] = []

    def _entry(self, producer_id: int) -> ProducerStateEntry:
        entry = self.updated.get(producer_id)
        if entry is None:
            current = self._manager.entries.get(producer_id)
            entry = current.copy() if current is not None else ProducerStateEntry(producer_id)
        return entry

    def add(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
            last_offset: int, timestamp: int, *, is_control: bool = False, is_transactional: bool = False,
            validate: bool = True) -> BatchMetadata | None:
        """Check one batch against the state so far; returns the cached batch if it is a retry."""
        entry = self._entry(producer_id)
        if validate and not is_control:
            duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
            if duplicate is not None:
                return duplicate
        if validate:
            if epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {producer_id} wrote with epoch {epoch}, but epoch {entry.epoch} is newer: "
                    "this producer has been fenced; re-initialize it (InitProducerId)")
            if not is_control:
                self._check_sequence(entry, epoch, first_seq)
                if not is_transactional and entry.current_txn_first_offset is not None:
                    raise InvalidTxnStateError(
                        f"producer {producer_id} wrote a non-transactional batch while its transaction "
                        f"from offset {entry.current_txn_first_offset} is open; commit or abort it first")
        if epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = epoch
        if not is_control:
            entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
            if is_transactional and entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = first_offset
                self._txn_events.append(_TxnEvent(producer_id, first_offset))
        entry.last_timestamp = timestamp
        self.updated[producer_id] = entry
        return None

    def add_marker(self, producer_id: int, epoch: int, offset: int, timestamp: int, *, commit: bool,
                   coordinator_epoch: int, validate: bool = True) -> None:
        """A COMMIT or ABORT marker at `offset`: ends the producer's open transaction, if any."""
        entry = self._entry(producer_id)
        if validate:
            if epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"marker for producer {producer_id} has epoch {epoch}, but epoch {entry.epoch} is "
                    "newer: the marker comes from a fenced transaction")
            if coordinator_epoch < entry.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"marker for producer {producer_id} comes from coordinator epoch {coordinator_epoch}, "
                    f"older than epoch {entry.coordinator_epoch} of its last marker: a newer coordinator "
                    "owns this transactional id")
        if entry.current_txn_first_offset is not None:
            self._txn_events.append(_TxnEvent(producer_id, entry.current_txn_first_offset, offset, not commit))
            entry.current_txn_first_offset = None
        if epoch != entry.epoch:  # a bumped epoch (KIP-890): the next data batch starts at sequence 0
            entry.batches.clear()
            entry.epoch = epoch
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        self.updated[producer_id] = entry

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, epoch: int, first_seq: int) -> None:
        if epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {entry.producer_id}: first batch of new epoch {epoch} has sequence "
                    f"{first_seq}, expected 0")
        elif not in_sequence(entry.last_sequence, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {entry.producer_id} epoch {epoch}: sequence {first_seq} does not follow "
                f"the last written sequence {entry.last_sequence}")

    def commit(self) -> list[AbortedTxn]:
        """Apply the changes; returns the transactions the append aborted, for the index."""
        manager = self._manager
        manager.entries.update(self.updated)
        self.updated = {}
        aborted: list[AbortedTxn] = []
        ongoing = manager.ongoing
        for event in self._txn_events:
            if event.marker_offset is None:
                ongoing[event.producer_id] = event.first_offset  # offsets grow: order is kept
                continue
            ongoing.pop(event.producer_id, None)
            if event.aborted:
                # As Kafka: the LSO right after the marker, ignoring this producer's transaction.
                lso = next(iter(ongoing.values()), event.marker_offset + 1)
                aborted.append(AbortedTxn(event.producer_id, event.first_offset, event.marker_offset, lso))
        self._txn_events = []
        return aborted


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.entries: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def _rebuild_ongoing(self) -> None:
        open_txns = [(e.current_txn_first_offset, pid) for pid, e in self.entries.items()
                     if e.current_txn_first_offset is not None]
        self.ongoing = {pid: first for first, pid in sorted(open_txns)}

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction."""
        return next(iter(self.ongoing.values()), None)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producers idle for `expiration_ms` without an open transaction (producer.id.expiration.ms)."""
        doomed = [pid for pid, e in self.entries.items()
                  if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in doomed:
            del self.entries[pid]
        return len(doomed)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.entries.get(producer_id)

    def begin(self) -> ProducerAppend:
        return ProducerAppend(self)

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            try:
                offsets.append(int(path.name[: -len(SNAPSHOT_SUFFIX)]))
            except ValueError:
                continue
        return sorted(offsets)

    def take_snapshot(self, offset: int, *, keep_from: int = 0) -> None:
        """Write the state (covering the log below `offset`) atomically, then prune old snapshots."""
        self.store_snapshot(offset, self.encode_snapshot(offset), keep_from=keep_from)

    def encode_snapshot(self, offset: int) -> bytes:
        """The snapshot file's bytes for the state now (the log below `offset`)."""
        payload = json.dumps({
            "version": _SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [e.to_json() for e in self.entries.values()],
        }, separators=(",", ":")).encode()
        return _CRC.pack(crc32c.crc32c(payload)) + payload

    def store_snapshot(self, offset: int, data: bytes, *, keep_from: int = 0) -> None:
        """Write encoded snapshot bytes atomically and prune old snapshots: file work only, so it
        may run in a worker thread."""
        write_atomically(self.snapshot_path(offset), data)
        offsets = [o for o in self.snapshot_offsets() if o >= keep_from]
        keep = set(offsets[-SNAPSHOTS_TO_KEEP:])
        for o in self.snapshot_offsets():
            if o not in keep:
                self.snapshot_path(o).unlink(missing_ok=True)

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        for o in self.snapshot_offsets():
            if (below is not None and o < below) or (above is not None and o > above):
                self.snapshot_path(o).unlink(missing_ok=True)

    def load_snapshot(self, *, min_offset: int, max_offset: int, at_most: int | None = None) -> int | None:
        """Load the newest readable snapshot within [min_offset, min(max_offset, at_most)]; returns
        its offset.

        Snapshots past `max_offset` (the log was truncated under them) and unreadable ones are
        deleted. With none, the state is empty and the caller replays from the log start.
        """
        for tmp in self.directory.glob(f"*{SNAPSHOT_SUFFIX}.tmp"):
            tmp.unlink(missing_ok=True)
        self.delete_snapshots(above=max_offset)
        self.entries = {}
        self.ongoing = {}
        for offset in reversed(self.snapshot_offsets()):
            if at_most is not None and offset > at_most:
                continue
            if offset < min_offset:
                break
            path = self.snapshot_path(offset)
            try:
                data = path.read_bytes()
                (crc,) = _CRC.unpack_from(data, 0)
                payload = data[_CRC.size :]
                if crc32c.crc32c(payload) != crc:
                    raise ValueError("snapshot CRC mismatch")
                doc = json.loads(payload)
                if doc.get("version") != _SNAPSHOT_VERSION:
                    raise ValueError(f"unknown snapshot version {doc.get('version')}")
                entries = {}
                for item in doc["producers"]:
                    entry = ProducerStateEntry.from_json(item)
                    entries[entry.producer_id] = entry
            except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
                log.warning("event=producer_snapshot_dropped path=%s error=%s: the state is "
                            "rebuilt from an older snapshot or the log", path, exc)
                path.unlink(missing_ok=True)
                continue
            self.entries = entries
            self._rebuild_ongoing()
            return offset
        return None
