"""Replacing segments of a log with a cleaned one, crash-safely (Kafka's `.cleaned` / `.swap`).

The cleaner writes a group's cleaned segment beside the log as `<base>.log.cleaned` (and
`.index.cleaned`, `.timeindex.cleaned`, `.txnindex.cleaned`), where `<base>` is the base offset of
the group's first segment, and fsyncs it. Then `swap_in`:

1. renames the `.cleaned` files to `.swap`: the indexes, a directory fsync, then the log and a
   directory fsync. The log's `.swap` name is the commit point;
2. deletes the group's other segments;
3. renames the `.swap` files over the first segment's files (indexes first, then the log).

On start, `finish_swaps` runs before a partition's segments are loaded: `.cleaned` files are
deleted (a clean that never committed: the old segments are all there), and each `.swap` log
finishes its swap: the old segments with a base offset inside the range it covers are deleted,
its indexes renamed (or, if one is missing, the old one deleted so that loading rebuilds it), and
the log renamed. So the log holds either a group's old segments or its cleaned segment, never a
mixture, never neither. Old segments past the last batch the cleaned segment kept may survive a
crash in step 2: they hold only records the clean found removable, and the next clean removes
them again.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from exactly import failpoints
from exactly.log.files import fsync_dir
from exactly.log.segment import LogSegment, scan_batches, segment_name

log = logging.getLogger(__name__)

CLEANED = ".cleaned"
SWAP = ".swap"
_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


def swap_in(cleaned: LogSegment, group: list[LogSegment]) -> None:
    """Put `cleaned` (sealed, named `.cleaned`, based at group[0]'s base offset) in the place of
    the files of `group`. The segment objects of `group` keep their open descriptors."""
    cleaned.rename_files(SWAP)  # the commit point
    failpoints.hit("log.cleaner.after_swap")
    for seg in group[1:]:
        for path in seg.paths:
            path.unlink(missing_ok=True)
    failpoints.hit("log.cleaner.after_delete")
    cleaned.rename_files("")


def remove_cleaned(directory: Path, base_offset: int) -> None:
    """Drop the `.cleaned` files of a clean that stopped before its commit point."""
    for suffix in _SUFFIXES:
        path = directory / segment_name(base_offset, suffix + CLEANED)
        path.unlink(missing_ok=True)
        path.with_name(path.name + ".tmp").unlink(missing_ok=True)


def finish_swaps(directory: Path) -> None:
    """Before a partition's segments are loaded: drop `.cleaned` files and complete the swaps
    whose `.swap` log exists."""
    changed = False
    for path in list(directory.iterdir()):
        if path.name.endswith((CLEANED, CLEANED + ".tmp")):
            path.unlink(missing_ok=True)
            changed = True
    for swap in sorted(directory.glob(f"*.log{SWAP}")):
        base = int(swap.name[: -len(".log" + SWAP)])
        end = _next_offset(swap, base)
        for log_path in directory.glob("*.log"):
            other = int(log_path.stem) if log_path.stem.isdigit() else -1
            if base < other < end:  # an old segment of the group
                for suffix in _SUFFIXES:
                    (directory / segment_name(other, suffix)).unlink(missing_ok=True)
        for suffix in _SUFFIXES[1:]:
            target = directory / segment_name(base, suffix)
            index_swap = target.with_name(target.name + SWAP)
            if index_swap.exists():
                os.replace(index_swap, target)
            else:  # renamed already, or lost: loading rebuilds it from the log
                target.unlink(missing_ok=True)
        fsync_dir(directory)
        os.replace(swap, directory / segment_name(base, ".log"))
        log.warning("event=cleaner_swap_completed dir=%s base=%d end=%d", directory, base, end)
        changed = True
    for path in directory.glob(f"*{SWAP}"):  # index swaps of a clean that did not commit
        path.unlink(missing_ok=True)
        changed = True
    if changed:
        fsync_dir(directory)


def _next_offset(path: Path, base: int) -> int:
    """The offset after the last batch of a cleaned segment (fsynced before its rename, so whole)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = base
        for _pos, header in scan_batches(fd, 0, os.fstat(fd).st_size, whole=False):
            end = header.next_offset
        return end
    finally:
        os.close(fd)
