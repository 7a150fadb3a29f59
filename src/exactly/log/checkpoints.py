"""Offset checkpoint files in the log directory, in Kafka's text format
(`cleaner-offset-checkpoint`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`):

    0                       version
    2                       number of entries
    orders 0 1200           topic partition offset
    __consumer_offsets 7 88

They are replaced whole (write_atomically), so a crash leaves the old file or the new one. An
unreadable file is treated as empty: every user of a checkpoint falls back to the safe answer
(clean from the start, recover the whole segment).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from exactly.log.files import write_atomically

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"  # DeleteRecords' low watermarks (KIP-107)
_VERSION = 0


def write_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    lines = [str(_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomically(path, "\n".join(lines) + "\n")


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """The entries of the file; empty when it is missing or malformed (logged)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("event=checkpoint_unreadable path=%s error=%s", path, exc)
        return {}
    lines = text.splitlines()
    try:
        if int(lines[0]) != _VERSION:
            raise ValueError(f"version {lines[0]!r}")
        count = int(lines[1])
        entries = lines[2:]
        if count != len(entries):
            raise ValueError(f"{count} entries announced, {len(entries)} present")
        offsets: dict[tuple[str, int], int] = {}
        for line in entries:
            topic, partition, offset = line.split(" ")
            offsets[(topic, int(partition))] = int(offset)
    except (ValueError, IndexError) as exc:
        log.warning("event=checkpoint_malformed path=%s error=%s", path, exc)
        return {}
    return offsets
