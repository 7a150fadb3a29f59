# The C extension built from _decode.c (see exactly.client.decode).
from typing import Any

def decode_records(record_type: type[Any], data: bytes, start: int, end: int, count: int,
                   base_offset: int, base_timestamp: int, log_append_time: int, topic: str,
                   partition: int, min_offset: int) -> list[Any] | None: ...
