"""The aborted-transaction index of one segment: `<base offset>.txnindex`, Kafka's layout.

Entries of 34 bytes: int16 version (0), int64 producer id, int64 first offset, int64 last offset
(the ABORT marker's offset), int64 last stable offset when the marker was written. An entry lives
in the file of the segment holding its marker, so entries are ordered by last offset.

Like the other indexes it is derived from the log: the loader rebuilds it when it is missing,
malformed, or disagrees with the segment. Appends write through (aborts are rare) and are fsynced
when the segment is sealed or the log is closed; after a crash the loader recomputes every entry
at or after the producer snapshot it starts from, so entries written since then need no fsync.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


class TransactionIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self.dirty = False  # the file lags the entries in memory: rewrite() before trusting it
        self._fd: int | None = None
        self._unsynced = False

    def __len__(self) -> int:
        return len(self.entries)

    def create(self) -> None:
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))

    def load(self) -> bool:
        """Read the file; False if it is missing or malformed (the caller then rebuilds it)."""
        self.close()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % ENTRY_SIZE:
            return False
        entries: list[AbortedTxn] = []
        previous = self.base_offset - 1
        for version, pid, first, last, lso in _ENTRY.iter_unpack(data):
            if version != _VERSION or pid < 0 or first < 0 or not first <= last or last <= previous:
                return False
            entries.append(AbortedTxn(pid, first, last, lso))
            previous = last
        self.entries = entries
        self.dirty = False
        return True

    def reset(self) -> None:
        self.entries = []
        self.dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after `offset`."""
        keep = bisect_left([e.last_offset for e in self.entries], offset)
        if keep < len(self.entries):
            del self.entries[keep:]
            self.dirty = True

    def add(self, txn: AbortedTxn) -> None:
        """Add in memory only (during a rebuild; rewrite() follows)."""
        self.entries.append(txn)
        self.dirty = True

    def append(self, txn: AbortedTxn) -> None:
        """Add and write through."""
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"aborted transaction at {txn.last_offset} is not after the last entry")
        self.entries.append(txn)
        if self.dirty:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            data = txn.pack()
            if os.write(self._fd, data) != len(data):
                raise OSError("short write")
            self._unsynced = True
        except OSError as exc:
            # The marker is in the log already. A file missing an entry would look valid, so
            # remove it: the next start rebuilds it from the log.
            self.dirty = True
            self._drop_file(exc)

    def rewrite(self) -> None:
        """Replace the file with the entries in memory, atomically."""
        self.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(b"".join(e.pack() for e in self.entries))
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self.dirty = False

    def sync(self) -> None:
        if self.dirty:
            try:
                self.rewrite()
            except OSError as exc:
                self._drop_file(exc)
        elif self._fd is not None and self._unsynced:
            os.fsync(self._fd)
            self._unsynced = False

    def _drop_file(self, exc: OSError) -> None:
        log.error("event=txn_index_write_failed path=%s error=%s", self.path, exc)
        self.close()
        try:  # without the file, the next start rebuilds the index from the log
            self.path.unlink(missing_ok=True)
        except OSError:
            pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._unsynced = False

    def delete(self) -> None:
        self.close()
        self.entries = []
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)

    def collect(self, start: int, end: int, out: list[AbortedTxn]) -> bool:
        """Add to `out` the entries with last offset >= `start` and first offset < `end`.

        True when no later segment can hold one (Kafka's stop rule): an entry whose last stable
        offset is >= `end` was written when every transaction starting before `end` had ended.
        """
        for e in self.entries:
            if e.last_offset >= start and e.first_offset < end:
                out.append(e)
            if e.last_stable_offset >= end:
                return True
        return False
