"""The log of one partition: append with assigned offsets, read, offsets by time, roll, retention,
recovery after a crash (loader.py), transactions: markers, the last stable offset, aborted
transactions (txn_index.py).

The log start offset (the low watermark) is logical, as Kafka's: DeleteRecords (KIP-107) moves
it into the middle of a segment; reads below it fail with OFFSET_OUT_OF_RANGE, and the segments
wholly below it are deleted (at once, or by the next retention round while the cleaner works).
The log manager keeps it in `log-start-offset-checkpoint`; open() takes it back from there.

Not thread-safe: call everything from one thread, except flush(), which only fsyncs and may run
in a worker thread while the owner keeps appending (group commit).
"""

from __future__ import annotations

import logging
import os
import struct
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import crc32c

from exactly import failpoints
from exactly.log.checked_reads import BadBatch, CorruptBatches, UncheckedBytes
from exactly.log.config import LogConfig
from exactly.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from exactly.log.files import fsync_dir
from exactly.log.loader import load_producer_state, load_segments
from exactly.log.markers import Marker, build_marker, parse_marker
from exactly.log.producer_state import ProducerAppend, ProducerStateEntry, ProducerStateManager
from exactly.log.segment import FileRecords, LogSegment, TornBatch, segment_name
from exactly.log.txn_index import AbortedTxn
from exactly.protocol.records import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    OwnBatch,
    RecordBatchError,
    RecordBatchHeader,
    decode_records,
)

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF
LOG_APPEND_TIME = "LogAppendTime"


class AppendResult(NamedTuple):
    """What an append gave. A NamedTuple: one is made per append, and a frozen dataclass sets
    each field through object.__setattr__ (issue 19)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime or this is a duplicate
    log_start_offset: int
    duplicate: bool = False


def _parse_dir_name(name: str) -> tuple[str, int]:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"partition directory {name!r} is not named <topic>-<partition>")
    return topic, int(part)


class PartitionLog:
    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], float],
                 topic: str, partition: int) -> None:
        self.directory = directory
        self.config = config
        self.topic = topic
        self.partition = partition
        self._clock = clock
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.producer_state = ProducerStateManager(directory)
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.flushed_offset = 0  # everything below is on disk (fsync)
        self.cleaning = False  # the log cleaner works on it: retention waits (log/cleaner.py)
        self.closed = False  # closed or deleted: a clean in progress is dropped
        self.corrupt_batches = CorruptBatches()  # what reads found bad (checked_reads.py)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- open and recovery -----------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, clock: Callable[[], float] = time.time,
             topic: str | None = None, partition: int | None = None,
             recovery_point: int | None = None, log_start_offset: int | None = None,
             ) -> PartitionLog:
        """Open the partition in `directory`, creating it, or recovering it after a crash: from
        `recovery_point` (this partition's entry of the recovery-point checkpoint) when the files
        agree with it, see loader.py. `log_start_offset` is its entry of the log-start-offset
        checkpoint (DeleteRecords)."""
        directory = Path(directory)
        if topic is None or partition is None:
            parsed_topic, parsed_partition = _parse_dir_name(directory.name)
            topic = parsed_topic if topic is None else topic
            partition = parsed_partition if partition is None else partition
        directory.mkdir(parents=True, exist_ok=True)
        self = cls(directory, config, clock, topic, partition)
        self._load(recovery_point)
        if log_start_offset is not None and log_start_offset > self.log_start_offset:
            # Past the log end only when a power cut lost the records it was moved over: they
            # were deleted anyway, and no offset below the log end is readable again.
            self.log_start_offset = min(log_start_offset, self.log_end_offset)
        return self

    def _load(self, recovery_point: int | None) -> None:
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        loaded = load_segments(self.directory, self.config, clean=clean, now_ms=self._now_ms(),
                               recovery_point=recovery_point)
        segments = loaded.segments
        # Bytes read and CRC-checked at open, from the recovery point to the end (0 after a clean
        # stop): what a crash cost this start.
        self.validated_bytes_at_open = loaded.validated_bytes
        self._synced_recovery_point = -1  # recovery_point() fsynced the indexes leading to it
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = segments[0].base_offset
        self.log_end_offset = self.high_watermark = segments[-1].next_offset
        # Where the producer state's replay began: the newest usable snapshot, or the log start.
        self.replayed_from_at_open = load_producer_state(
            self.producer_state, segments, log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset, txn_rebuild_from=loaded.txn_rebuild_from)
        # After a crash, what recovery validated past the recovery point may not be on disk yet.
        if clean:
            self.flushed_offset = self.log_end_offset
        elif loaded.recovered_from is not None:
            self.flushed_offset = loaded.recovered_from
        else:
            self.flushed_offset = self.log_start_offset
        self._snapshot_offset = max(self.producer_state.snapshot_offsets(), default=-1)
        marker.unlink(missing_ok=True)
        fsync_dir(self.directory)  # the marker must be gone before anything new is written

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- append ----------------------------------------------------------------------------

    def _parse(self, view: memoryview, allow_control: bool, from_client: bool = False,
               parsed: Sequence[RecordBatchHeader] = ()) -> list[RecordBatchHeader]:
        """The batches of `view`, each checked; `parsed`: the headers of its first batches,
        read already by the caller (`append`), taken instead of reading them again."""
        total = len(view)
        if total == 0:
            raise InvalidRecordError("the produce request holds no record batch")
        max_size = self.config.max_message_bytes
        headers: list[RecordBatchHeader] = []
        pos = 0
        while pos < total:
            if parsed and len(headers) < len(parsed):
                h = parsed[len(headers)]
                if h.position != pos:
                    raise ValueError(f"parsed header {len(headers)} is at {h.position}, "
                                     f"not at its batch's position {pos}: parse it from these "
                                     f"records")
            else:
                try:
                    h = RecordBatchHeader(view, pos)
                except RecordBatchError as exc:
                    raise CorruptRecordError(f"batch {len(headers)}: {exc}") from None
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.end > total:
                raise CorruptRecordError(
                    f"batch {len(headers)}: length {h.batch_length} does not fit in the "
                    f"{total - pos} bytes left in the request")
            if h.size > max_size:
                raise self._too_large(h.size)
            try:
                h.validate()
            except RecordBatchError as exc:
                cls = CorruptRecordError if exc.corrupt else InvalidRecordError
                raise cls(f"batch {len(headers)}: {exc}") from None
            if h.is_control and not allow_control:
                raise InvalidRecordError(
                    f"batch {len(headers)} is a control batch; only the broker writes those")
            if h.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL) and h.producer_id < 0:
                raise InvalidRecordError(
                    f"batch {len(headers)} is transactional but has no producer id")
            if h.records_count == 0:
                raise InvalidRecordError(f"batch {len(headers)} holds no records")
            if h.producer_id >= 0 and h.base_sequence < 0 and not h.is_control:
                raise InvalidRecordError(
                    f"batch {len(headers)} has producer id {h.producer_id} but no sequence number")
            headers.append(h)
            pos = h.end
        # cleanup.policy is a validated list of "delete" and "compact": a substring test will do.
        if from_client and "compact" in self.config.cleanup_policy:
            self._require_keys(headers)
        if total > self.config.segment_bytes:
            raise self._list_too_large(total)
        return headers

    def _too_large(self, size: int) -> RecordTooLargeError:
        return RecordTooLargeError(
            f"batch of {size} bytes exceeds max.message.bytes={self.config.max_message_bytes} of "
            f"{self.topic}-{self.partition}; send smaller batches or raise max.message.bytes")

    def _list_too_large(self, size: int) -> RecordListTooLargeError:
        return RecordListTooLargeError(
            f"{size} bytes of batches exceed segment.bytes={self.config.segment_bytes}")

    def _require_keys(self, headers: list[RecordBatchHeader]) -> None:
        """A compacted topic keeps the newest value per key: a record without a key is refused,
        with its index in its batch, as Kafka's LogValidator does."""
        reason = (f"Compacted topic cannot accept message without key in topic partition "
                  f"{self.topic}-{self.partition}.")
        missing: list[tuple[int, str | None]] = []
        for h in headers:
            try:
                records = decode_records(h)
            except RecordBatchError as exc:
                raise CorruptRecordError(f"batch at {h.position}: {exc}") from None
            missing += [(index, reason) for index, record in enumerate(records)
                        if record.key is None]
        if missing:
            shown = ", ".join(f"RecordError(batchIndex={index}, message='{why}')"
                              for index, why in missing[:3])
            raise InvalidRecordError(
                f"One or more records have been rejected due to {len(missing)} record errors in "
                f"total, and only showing the first three errors at most: [{shown}]",
                tuple(missing))

    def append(self, records: bytes | bytearray | memoryview, *, now_ms: int | None = None,
               allow_control: bool = False, from_client: bool = False,
               headers: Sequence[RecordBatchHeader] = ()) -> AppendResult:
        """Append the batches of one Produce request, all or nothing.

        Control batches (transaction markers) are refused unless `allow_control`: clients may not
        write them, only the broker's own coordinators. A client's batches (`from_client`) to a
        compacted topic must give every record a key; the coordinators' own records always have
        one, and are not decoded again to check.

        `headers`: the headers of the first batches, as the caller read them from these bytes
        (or from bytes these begin: a Produce partition's records cut after their batch), so
        that a request's batch header is read once (server/admission.py). Only the reading is
        saved: each batch is checked here as if this had read it (lengths, size, magic, CRC,
        producer id, sequence; then epoch and sequence against the producer state).
        """
        view = memoryview(records).cast("B") if not isinstance(records, bytes) else memoryview(records)
        return self._write(view, self._parse(view, allow_control, from_client, headers), now_ms,
                           None)

    def append_own(self, batch: OwnBatch, *, now_ms: int | None = None,
                   marker: Marker | None = None) -> AppendResult:
        """Append one batch this broker built (a coordinator's record, a marker): as `append`
        does, without parsing it again or checking its CRC, which its builder just computed.
        Only an OwnBatch takes this path; a client's bytes always go through `append`."""
        if not isinstance(batch, OwnBatch):
            raise TypeError(f"append_own takes an OwnBatch the broker built, not "
                            f"{type(batch).__name__}; a client's batches go through append()")
        size = batch.header.size
        if size > self.config.max_message_bytes:
            raise self._too_large(size)
        if size > self.config.segment_bytes:
            raise self._list_too_large(size)
        return self._write(memoryview(batch.data), [batch.header], now_ms, marker)

    def _write(self, view: memoryview, headers: list[RecordBatchHeader], now_ms: int | None,
               marker: Marker | None) -> AppendResult:
        """Assign offsets to the checked `headers` of `view`, update producer state, write."""
        if now_ms is None:
            now_ms = self._now_ms()
        append_time = now_ms if self.config.message_timestamp_type == LOG_APPEND_TIME else -1
        # Producer state is staged only for batches with a producer id: the coordinators' own
        # records have none, and most appends of a small transaction are theirs.
        staged: ProducerAppend | None = None
        plan: list[tuple[RecordBatchHeader, int]] = []
        next_offset = self.log_end_offset
        for h in headers:
            base = next_offset
            last = base + h.last_offset_delta
            if h.producer_id >= 0:
                if staged is None:
                    staged = self.producer_state.begin()
                ts = append_time if append_time >= 0 else h.max_timestamp
                if h.attributes & ATTR_CONTROL:
                    found = marker if marker is not None and len(headers) == 1 else parse_marker(h)
                    if found is None:
                        raise InvalidRecordError("control batch is not a transaction marker")
                    staged.add_marker(h.producer_id, h.producer_epoch, base, ts, commit=found.commit,
                                      coordinator_epoch=found.coordinator_epoch)
                else:
                    dup = staged.add(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                                     base, last, ts,
                                     is_transactional=bool(h.attributes & ATTR_TRANSACTIONAL))
                    if dup is not None:
                        # As Kafka: a duplicate is answered with its original's offsets and
                        # time (its max timestamp, or its log append time).
                        return AppendResult(dup.first_offset, dup.last_offset, dup.timestamp,
                                            self.log_start_offset, duplicate=True)
            plan.append((h, base))
            next_offset = last + 1

        if append_time >= 0:
            max_ts = append_time
        else:
            max_ts = max(h.max_timestamp for h in headers) if len(headers) > 1 else (
                headers[0].max_timestamp)
        segment = self._maybe_roll(len(view), next_offset - 1, max_ts, now_ms)
        buffers: list[bytes | bytearray | memoryview] = []
        batches: list[tuple[int, int, int, int]] = []
        for h, base in plan:
            max_ts = h.max_timestamp
            if append_time >= 0:
                buf = bytearray(h.raw())
                _PREFIX.pack_into(buf, 0, base, h.batch_length, 0)
                struct.pack_into(">h", buf, 21, h.attributes | ATTR_TIMESTAMP_TYPE)
                struct.pack_into(">q", buf, 35, append_time)
                struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[21:]))
                buffers.append(buf)
                max_ts = append_time
            else:
                # Only baseOffset and partitionLeaderEpoch change; both are outside the CRC.
                buffers.append(_PREFIX.pack(base, h.batch_length, 0))
                buffers.append(view[h.position + 16 : h.end])
            batches.append((base, base + h.last_offset_delta + 1, max_ts, h.size))
        segment.append(buffers, batches)
        if staged is not None:
            for txn in staged.commit():
                segment.txn_index.append(txn)
        base_offset = plan[0][1]
        self.log_end_offset = self.high_watermark = next_offset
        return AppendResult(base_offset, next_offset - 1, append_time, self.log_start_offset)

    def append_marker(self, producer_id: int, producer_epoch: int, *, commit: bool,
                      coordinator_epoch: int = 0, now_ms: int | None = None) -> AppendResult:
        """Write a COMMIT or ABORT marker ending `producer_id`'s transaction in this partition.

        The marker's epoch becomes the producer's epoch here: a bumped epoch (KIP-890) fences the
        old one. A marker without an open transaction (a coordinator's retry) is still written.
        """
        if producer_id < 0 or producer_epoch < 0:
            raise InvalidRecordError(
                f"a marker needs a producer id and epoch, got {producer_id} and {producer_epoch}")
        if now_ms is None:
            now_ms = self._now_ms()
        batch = OwnBatch.of(build_marker(producer_id, producer_epoch, commit=commit,
                                         coordinator_epoch=coordinator_epoch, timestamp=now_ms))
        return self.append_own(batch, now_ms=now_ms, marker=Marker(commit, coordinator_epoch))

    # -- DeleteRecords (KIP-107) -----------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset forward to `offset` (at most the high watermark); returns
        the new log start offset (the low watermark). Producer state stays (KIP-360: a producer
        whose records are gone is still known). The caller makes the new start durable
        (LogManager's checkpoint), then deletes the segments below it
        (delete_segments_below_start): no file goes before the start that hides it is on disk."""
        if not 0 <= offset <= self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic}-{self.partition} before offset {offset}: "
                f"it must be within [0, {self.high_watermark}] (the high watermark; -1 means it)")
        self.log_start_offset = max(self.log_start_offset, offset)
        return self.log_start_offset

    def delete_segments_below_start(self) -> int:
        """Delete the segments wholly below the log start offset (unless the cleaner works on
        the log: then the next retention round will); returns how many."""
        count = self._breached_by_start()
        self._delete_segments(count, "log_start_offset")
        return count

    def _breached_by_start(self) -> int:
        """How many oldest segments lie wholly below the log start offset (never the active one)."""
        count = 0
        while count < len(self._bases) - 1 and self._bases[count + 1] <= self.log_start_offset:
            count += 1
        return 0 if self.cleaning else count  # the cleaner copies them: the next round will

    def _delete_segments(self, count: int, reason: str) -> None:
        """Delete the `count` oldest segments; the log start offset moves to the first kept one
        if that is past it."""
        if not count:
            return
        doomed, self._segments = self._segments[:count], self._segments[count:]
        self._bases = self._bases[count:]
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        for seg in doomed:
            seg.delete()
        self.producer_state.delete_snapshots(below=self.log_start_offset)
        log.info("event=segments_deleted reason=%s dir=%s segments=%d log_start_offset=%d",
                 reason, self.directory, count, self.log_start_offset)

    # -- transactions ----------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """Below it every transactional record is committed or aborted: read_committed reads up to it."""
        first = self.producer_state.first_unstable_offset()
        lso = self.high_watermark if first is None else min(first, self.high_watermark)
        return max(lso, self.log_start_offset)

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions that have records in
        [start_offset, end_offset), ordered by first offset: what read_committed Fetch lists."""
        found = self.aborted_transaction_entries(start_offset, end_offset)
        found.sort(key=lambda t: t.first_offset)
        return [(t.producer_id, t.first_offset) for t in found]

    def aborted_transaction_entries(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted-transaction index entries with records in [start_offset, end_offset),
        markers' offsets included (what the cleaner needs)."""
        found: list[AbortedTxn] = []
        idx = max(0, bisect_right(self._bases, start_offset) - 1)
        for seg in self._segments[idx:]:
            if seg.txn_index.collect(start_offset, end_offset, found):
                break
        return found

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return dict(self.producer_state.ongoing)

    def in_transaction(self, producer_id: int) -> bool:
        """Has `producer_id` an open transaction here? (Without copying ongoing_transactions.)"""
        return producer_id in self.producer_state.ongoing

    def producers(self) -> list[ProducerStateEntry]:
        """A copy of every producer's state (DescribeProducers)."""
        return [e.copy() for e in self.producer_state.entries.values()]

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for `expiration_ms` and without an open transaction."""
        return self.producer_state.expire(now_ms, expiration_ms)

    def _maybe_roll(self, size: int, last_offset: int, max_timestamp: int, now_ms: int) -> LogSegment:
        seg = self._segments[-1]
        if seg.is_empty:
            return seg
        cfg = self.config
        # As Kafka: the age of a segment is measured in record time when the records carry
        # timestamps (new batch's max timestamp - first batch's), else in wall-clock time.
        if seg.first_timestamp >= 0 and max_timestamp >= 0:
            age = max_timestamp - seg.first_timestamp
        else:
            age = now_ms - seg.created_ms
        if (
            seg.size + size > cfg.segment_bytes
            or age >= cfg.segment_ms
            or last_offset - seg.base_offset > _MAX_RELATIVE_OFFSET
            or seg.index.size_bytes + 8 > cfg.segment_index_bytes
            or seg.time_index.size_bytes + 12 > cfg.segment_index_bytes
        ):
            return self.roll(now_ms)
        return seg

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Seal the active segment (fsync: older segments are always durable) and start a new one.
        An empty active segment is not rolled (two segments would share a base offset)."""
        if now_ms is None:
            now_ms = self._now_ms()
        old = self._segments[-1]
        if old.is_empty:
            return old
        old.seal()
        self.flushed_offset = max(self.flushed_offset, self.log_end_offset)
        self.producer_state.take_snapshot(self.log_end_offset, keep_from=self.log_start_offset)
        self._snapshot_offset = self.log_end_offset
        seg = LogSegment.create(self.directory, self.log_end_offset,
                                index_interval=self.config.index_interval_bytes, created_ms=now_ms)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        if not failpoints.skip("log.roll.fsync_dir"):  # a test's way to lose the new segment
            fsync_dir(self.directory)
        log.debug("event=segment_rolled dir=%s base=%d", self.directory, seg.base_offset)
        return seg

    # -- read ------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> bytes:
        """Whole batches from the one holding `offset`, up to `max_bytes`, none with a base
        offset >= `max_offset` (default: the high watermark). With `min_one_batch` the first
        batch comes whole even when larger than `max_bytes` (KIP-74); without, nothing does.

        Bytes loaded from disk are CRC-checked by the first read of them (checked_reads.py): a
        bad batch ends what is returned, and a read that starts at one raises CorruptRecordError."""
        found = self._locate(offset, max_bytes, max_offset, min_one_batch)
        return b"" if found is None else self._read_checked(offset, *found)

    def read_records(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                     min_one_batch: bool = True) -> tuple[bytes | FileRecords, int]:
        """What read() returns, with the offset after its last batch (-1 when empty): the same
        batches, as a range of the segment's file (FileRecords, for a zero-copy fetch) when every
        byte of the range is already checked, else as bytes read and checked as read() does."""
        found = self._locate(offset, max_bytes, max_offset, min_one_batch)
        if found is None:
            return b"", -1
        seg, start, end = found
        if any(a < end and start < b for a, b in seg.unchecked.ranges):
            data = self._read_checked(offset, seg, start, end)
            return data, (seg.next_offset_before(start, start + len(data)) if data else -1)
        next_offset = seg.next_offset_before(start, end)
        return FileRecords(seg, start, end - start, next_offset), next_offset

    def _locate(self, offset: int, max_bytes: int, max_offset: int | None,
                min_one_batch: bool) -> tuple[LogSegment, int, int] | None:
        """The segment and file range [start, end) of what read() returns; None for nothing."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {self.topic}-{self.partition}'s range "
                f"[{self.log_start_offset}, {self.log_end_offset}]")
        limit = self.high_watermark if max_offset is None else min(max_offset, self.high_watermark)
        if offset >= limit or (max_bytes <= 0 and not min_one_batch):
            return None  # nothing below the bound, or no room (a Fetch answer already full)
        idx = max(0, bisect_right(self._bases, offset) - 1)
        for seg in self._segments[idx:]:
            if seg.base_offset >= limit:
                return None
            found = self._indexed_batch(seg, offset) if not seg.unchecked else None
            if found is not None:
                start = found
                if limit >= seg.next_offset and seg.size - start <= max_bytes:
                    return seg, start, seg.size  # the rest of the segment: no header to read
                header = RecordBatchHeader(seg.read(start, HEADER_SIZE), 0)
            else:
                try:
                    batch = seg.find_batch(offset)
                except TornBatch as exc:  # only in bytes from disk that no read has checked yet
                    raise self._corrupt(seg, BadBatch(exc.position, offset, exc.reason)) from None
                if batch is None:
                    continue
                start, header = batch
            if header.base_offset >= limit:
                return None
            if header.size >= max_bytes:
                # The first batch alone reaches the limit (a fetch cut at one batch per
                # partition): no scan of what follows it.
                return None if header.size > max_bytes and not min_one_batch else (
                    seg, start, start + header.size)
            try:
                end = seg.size if limit >= seg.next_offset else seg.position_of(limit)
                if end - start > max_bytes:
                    end = seg.batch_boundary_within(start, start + max(max_bytes, 0))
                    if not min_one_batch and end - start > max_bytes:
                        return None
            except TornBatch as exc:  # serve the batches before it; a read from it fails
                if exc.position <= start:
                    raise self._corrupt(seg, BadBatch(exc.position, offset, exc.reason)) from None
                end = exc.position
            return seg, start, end
        return None

    @staticmethod
    def _indexed_batch(seg: LogSegment, offset: int) -> int | None:
        """The position of the batch holding `offset` when the index says where it starts: a
        consumer reading on from its last fetch asks for the base offset of the next batch, and
        every batch of index.interval.bytes or more is indexed. Saves find_batch's scan."""
        entry, position = seg.index.lookup(offset)
        return position if entry == offset and position < seg.size else None

    def _read_checked(self, offset: int, seg: LogSegment, start: int, end: int) -> bytes:
        """The bytes [start, end) of `seg`, cut before the first bad batch of those not checked
        yet (CorruptRecordError when that is the first)."""
        data = seg.read(start, end - start)
        if seg.unchecked:
            try:
                data = data[: seg.unchecked.check(data, start, offset,
                                                  base_offset=seg.base_offset,
                                                  next_offset=seg.next_offset)]
            except BadBatch as bad:
                raise self._corrupt(seg, bad) from None
        return data

    def _corrupt(self, seg: LogSegment, bad: BadBatch) -> CorruptRecordError:
        """Log and count a bad batch a read starts at: the error its fetch answers."""
        self.corrupt_batches.found(seg.log_path, bad)
        return CorruptRecordError(f"{seg.log_path}: the batch at position {bad.position} "
                                  f"(offset {bad.offset}) is corrupt: {bad.reason}")

    # -- timestamps ------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= `timestamp`."""
        for seg in self._segments:
            if seg.is_empty or seg.max_timestamp < timestamp:
                continue
            start = seg.time_index.offset_before(timestamp)
            _, position = seg.index.lookup(start if start is not None else seg.base_offset)
            for pos, h in seg.headers_from(position):
                if h.base_offset >= self.high_watermark:
                    return None
                if h.max_timestamp >= timestamp:
                    batch = seg.read_batch(pos, h)
                    for rec in decode_records(batch):
                        ts = self._record_timestamp(batch, rec.timestamp)
                        if ts >= timestamp and rec.offset >= self.log_start_offset:
                            return rec.offset, ts
        return None

    @staticmethod
    def _record_timestamp(batch: RecordBatchHeader, timestamp: int) -> int:
        return batch.max_timestamp if batch.attributes & ATTR_TIMESTAMP_TYPE else timestamp

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp (ListOffsets -3)."""
        best: LogSegment | None = None
        for seg in self._segments:
            if not seg.is_empty and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        found = best.find_batch(best.offset_of_max_timestamp)
        if found is None:
            return None
        pos, h = found
        batch = best.read_batch(pos, h)
        for rec in decode_records(batch):
            ts = self._record_timestamp(batch, rec.timestamp)
            if ts == batch.max_timestamp:
                return rec.offset, ts
        return batch.last_offset, batch.max_timestamp

    # -- durability ------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the data appended so far. Safe to run in a worker thread."""
        target = self.log_end_offset
        if target <= self.flushed_offset:
            return
        seg = self._segments[-1]
        seg.sync()
        self.synced_to(target)

    def synced_to(self, end: int) -> None:
        """A sync of the active segment, begun when the log ended at `end`, has completed:
        everything below `end` is on disk (`flush`, or a sync the caller ran itself)."""
        self.flushed_offset = max(self.flushed_offset, end)

    def snapshot_producer_state(self) -> Callable[[], None] | None:
        """A producer-state snapshot at the log end, if the log grew since the newest one: the
        broker takes one with each recovery-point checkpoint, so that a start after a crash
        replays the batch headers after it, not the whole active segment (loader.py). The
        aborted-transaction entries below it are made durable first, as the loader recomputes
        only those at or after the snapshot it starts from.

        Returns the writing of the snapshot, to run in any thread (None: none needed)."""
        if self.log_end_offset <= self._snapshot_offset or not self._segments:
            return None
        self._segments[-1].txn_index.sync()
        offset, keep_from = self.log_end_offset, self.log_start_offset
        data = self.producer_state.encode_snapshot(offset)
        self._snapshot_offset = offset
        return lambda: self.producer_state.store_snapshot(offset, data, keep_from=keep_from)

    def recovery_point(self) -> int:
        """The offset to record in the recovery-point checkpoint (loader.py): the log is fsynced
        below it (`flushed_offset`), and so, once this returns, are the active segment's offset
        and time index entries that lead to it: they are written lazily, so they are written and
        fsynced here. Runs on the owner's thread (it writes what appends keep in memory)."""
        point = self.flushed_offset  # read first: every entry below it is already in memory
        if (self._segments and point > self._segments[-1].base_offset
                and point != self._synced_recovery_point):
            active = self._segments[-1]
            active.index.sync()
            active.time_index.sync()
            self._synced_recovery_point = point
        return point

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self._segments:
            seg.index_interval = config.index_interval_bytes

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole old segments past retention.ms / retention.bytes, or below the log start
        offset (DeleteRecords, whatever the cleanup policy); never the active one, nor while the
        cleaner copies segments (the next round will)."""
        cfg = self.config
        if self.cleaning:
            return 0
        if "delete" not in cfg.cleanup_policy.split(","):
            return self.delete_segments_below_start()
        candidates = self._segments[:-1]
        by_time = 0
        if cfg.retention_ms >= 0:
            for seg in candidates:
                if now_ms - seg.largest_timestamp() > cfg.retention_ms:
                    by_time += 1
                else:
                    break
        by_size = 0
        if cfg.retention_bytes >= 0:
            excess = self.size_bytes - cfg.retention_bytes
            for seg in candidates:
                if excess - seg.size >= 0:
                    excess -= seg.size
                    by_size += 1
                else:
                    break
        count = max(by_time, by_size, self._breached_by_start())
        self._delete_segments(count, "retention")
        return count

    def close(self) -> None:
        """Clean shutdown: data and indexes on disk, producer snapshot, clean-shutdown marker."""
        self.closed = True
        if not self._segments:
            return
        active = self._segments[-1]
        active.sync()
        self.flushed_offset = self.log_end_offset  # the recovery point LogManager.close writes
        active.index.sync()
        active.time_index.sync()
        active.txn_index.sync()
        self.producer_state.take_snapshot(self.log_end_offset, keep_from=self.log_start_offset)
        self._snapshot_offset = self.log_end_offset
        fd = os.open(self.directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.directory)
        for seg in self._segments:
            seg.close()
        self._segments = []
        self._bases = []

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """The cleaner swapped the files of `old` (consecutive segments) for `new`: swap the
        segments in memory too. The old ones are closed, not deleted (their files are gone or
        are the new one's now)."""
        start = next((i for i, seg in enumerate(self._segments) if seg is old[0]), None)
        if start is None or self._segments[start : start + len(old)] != old:
            raise ValueError(f"{self}: the cleaned segments are no longer in the log")
        self._segments[start : start + len(old)] = [new]
        self._bases = [seg.base_offset for seg in self._segments]
        if any(seg.unchecked for seg in old):  # the cleaner copies batches without their CRCs
            new.unchecked = UncheckedBytes(new.size)
        for seg in old:
            seg.close()

    def delete(self) -> None:
        """Close the files without a shutdown snapshot; the caller removes the directory."""
        self.closed = True
        for seg in self._segments:
            seg.close()
        self._segments = []
        self._bases = []

    def segment_file(self, base_offset: int, suffix: str = ".log") -> Path:
        return self.directory / segment_name(base_offset, suffix)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self._segments)})")
