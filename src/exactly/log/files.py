"""Small durable files (topic metadata, meta.properties, producer id blocks, ACLs, credentials):
replaced whole, so that a crash leaves the old content or the new, never a mix; and the
directory fsyncs that make new entries durable."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mkdir_durably(directory: Path) -> None:
    """`mkdir -p` whose result survives a power cut: the parent of each directory it creates is
    fsynced, as Kafka's LogManager does for a log directory it creates (a new directory's entry
    is in its parent, which nothing else the broker writes fsyncs)."""
    missing: list[Path] = []
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing.append(path)
    directory.mkdir(parents=True, exist_ok=True)
    for path in reversed(missing):
        fsync_dir(path.parent)


def write_atomically(path: Path, data: bytes | str) -> None:
    """Write to a temporary file, fsync it, rename it over `path`, fsync the directory."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
