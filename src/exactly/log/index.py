"""Sparse indexes of one segment: offset -> file position, and max timestamp so far -> offset.

Both are fixed-size big-endian entries appended to a file and mirrored in memory arrays. They are
only a cache of what the segment holds: recovery rebuilds them from the log whenever they are
missing or look wrong, so appends buffer their entries and write them lazily (flush, roll, close).
"""

from __future__ import annotations

import operator
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import ClassVar


class _Index:
    """Entries (key, value), keys strictly increasing, values non-decreasing."""

    _entry: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys = array("q")
        self.values = array("q")
        self._pending = bytearray()
        self._fd: int | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def size_bytes(self) -> int:
        return len(self.keys) * self._entry.size

    def _pack(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _unpack(self, a: int, b: int) -> tuple[int, int]:
        raise NotImplementedError

    def append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        self._pending += self._pack(key, value)

    def load(self) -> bool:
        """Read the file into memory; False if it is missing or malformed (then the caller rebuilds)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        size = self._entry.size
        if len(data) % size:
            return False
        keys, values = array("q"), array("q")
        try:
            for a, b in self._entry.iter_unpack(data):
                key, value = self._unpack(a, b)
                keys.append(key)
                values.append(value)
        except struct.error:
            return False
        if not all(map(operator.lt, keys, keys[1:])) or not all(map(operator.le, values, values[1:])):
            return False
        self.keys, self.values = keys, values
        self._pending.clear()
        return True

    def reset(self) -> None:
        self.keys = array("q")
        self.values = array("q")
        self._pending.clear()

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def write_pending(self) -> None:
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            fd = self._open()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]

    def rewrite(self) -> None:
        """Replace the file with the in-memory entries (after a rebuild)."""
        self.close()
        self._pending.clear()
        data = b"".join(self._pack(k, v) for k, v in zip(self.keys, self.values, strict=True))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def sync(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self._pending.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    """Batch base offset -> position of that batch in the segment file."""

    _entry = struct.Struct(">Ii")  # relative offset, position

    def _pack(self, key: int, value: int) -> bytes:
        return self._entry.pack(key - self.base_offset, value)

    def _unpack(self, a: int, b: int) -> tuple[int, int]:
        return a + self.base_offset, b

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before `offset`, or the segment start."""
        i = bisect_right(self.keys, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.keys[i], self.values[i]

    def floor_position(self, position: int) -> int:
        """The last indexed batch position at or before `position` (0 if none)."""
        i = bisect_right(self.values, position) - 1
        return self.values[i] if i >= 0 else 0


class TimeIndex(_Index):
    """Largest timestamp so far -> base offset of the batch that first reached it."""

    _entry = struct.Struct(">qI")  # timestamp, relative offset

    def _pack(self, key: int, value: int) -> bytes:
        return self._entry.pack(key, value - self.base_offset)

    def _unpack(self, a: int, b: int) -> tuple[int, int]:
        return a, b + self.base_offset

    def last(self) -> tuple[int, int] | None:
        if not self.keys:
            return None
        return self.keys[-1], self.values[-1]

    def offset_before(self, timestamp: int) -> int | None:
        """Base offset of a batch before which every batch has maxTimestamp < `timestamp`."""
        i = bisect_left(self.keys, timestamp) - 1
        return self.values[i] if i >= 0 else None
