"""One broker per data directory: the `.lock` file, held with `flock` while the broker runs, as
Kafka locks each log directory.

Two brokers on one directory would each append at the offsets they believe free and acknowledge
writes the other overwrites or hides. The lock is taken before anything in the directory is read
or written, and the kernel releases it when the process ends, however it ends (`kill -9`
included), so a stale lock never blocks a restart. The holder's pid is written into the file for
the second broker's error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirInUseError(RuntimeError):
    """Another process holds the data directory's lock."""


class DataDirLock:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise DataDirInUseError naming the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirInUseError(
                f"data directory {self.path.parent} is in use by another broker (pid {holder})"
            ) from None
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
