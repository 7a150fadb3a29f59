"""Producer id allocation that never hands out the same id twice, across restarts.

Like Kafka's controller, ids are reserved in blocks: the end of the current block is made durable
before any id from it is used, so a crash skips at most the rest of one block.
"""

from __future__ import annotations

from pathlib import Path

from exactly.log.files import write_atomically

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._next = int(path.read_text().strip()) if path.exists() else 0
        self._block_end = self._next

    def generate(self) -> int:
        if self._next >= self._block_end:
            self._reserve(self._next + BLOCK_SIZE)
        pid = self._next
        self._next += 1
        return pid

    def _reserve(self, block_end: int) -> None:
        write_atomically(self.path, f"{block_end}\n")
        self._block_end = block_end
