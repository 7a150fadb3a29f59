"""Batch builders and a fake clock for the log tests."""
from __future__ import annotations

from exactly.protocol.records import Record, build_batch, decode_records, iter_batches


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    @property
    def ms(self) -> int:
        return int(self.now * 1000)

    def advance_ms(self, ms: int) -> None:
        self.now += ms / 1000


def batch(n: int = 1, *, ts: int = 1000, pid: int = -1, epoch: int = -1, seq: int = -1,
          compression: int = 0, value_size: int = 10, prefix: bytes = b"v",
          timestamps: list[int] | None = None, transactional: bool = False) -> bytes:
    records = [
        Record(f"k{i}".encode(), prefix + str(i).encode().rjust(value_size, b"x"),
               timestamp=timestamps[i] if timestamps else -1)
        for i in range(n)
    ]
    return build_batch(records, timestamp=ts, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, compression=compression, transactional=transactional)


def offsets_of(data: bytes) -> list[int]:
    out = []
    for h in iter_batches(data, validate=True):
        out.extend(r.offset for r in decode_records(h))
    return out


def values_of(data: bytes) -> list[bytes | None]:
    return [r.value for h in iter_batches(data, validate=True) for r in decode_records(h)]
