"""How Kafka places a coordinator key (group id, transactional id) on an internal topic."""

from functools import lru_cache


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=65536)  # coordinators ask for the same few keys on every request
def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(key.hashCode) % partitionCount` (Utils.abs maps MIN_VALUE to 0)."""
    h = java_string_hashcode(key)
    return (0 if h == -(2**31) else abs(h)) % num_partitions
