"""Transaction markers: the control record a coordinator writes to end a transaction in a partition.

Key: int16 version (0) + int16 type (0 = ABORT, 1 = COMMIT). Value: int16 version (0) + int32
coordinator epoch. The batch is transactional and control, holds one record, and carries the
producer id and epoch but no sequence.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from exactly.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    RecordBatchError,
    RecordBatchHeader,
    build_single_record_batch,
    decode_records,
)

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class Marker:
    commit: bool
    coordinator_epoch: int


_MARKER_KEYS = (_KEY.pack(0, ABORT), _KEY.pack(0, COMMIT))


def build_marker(producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int,
                 timestamp: int) -> bytes:
    return build_single_record_batch(
        _MARKER_KEYS[COMMIT if commit else ABORT], _VALUE.pack(0, coordinator_epoch), timestamp=timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL)


def parse_marker(batch: RecordBatchHeader) -> Marker | None:
    """The marker in a control batch whose buffer holds the whole batch; None if it is not one."""
    try:
        records = decode_records(batch)
    except (RecordBatchError, IndexError):  # a malformed body is not a marker either
        return None
    if not records:
        return None
    key, value = records[0].key, records[0].value
    if key is None or value is None or len(key) < _KEY.size or len(value) < _VALUE.size:
        return None
    version, kind = _KEY.unpack_from(key)
    if version != 0 or kind not in (ABORT, COMMIT):
        return None
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return Marker(kind == COMMIT, coordinator_epoch)
