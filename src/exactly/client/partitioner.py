"""The default partitioner, placing keys where Kafka's Java client (and librdkafka's
`murmur2_random`) puts them: `toPositive(murmur2(key)) % numPartitions`.

Records without a key are sticky (KIP-480): they go to one partition until the batch they fill
there is full or sent, then to another partition picked at random, so keyless records make few,
large batches and still spread over all partitions.
"""

from __future__ import annotations

import random
import struct

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`, as an unsigned 32-bit value (Java's int bits)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for k in struct.unpack_from(f"<{n4}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest:
        tail = n4 << 2
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def to_positive(h: int) -> int:
    """Kafka's `Utils.toPositive`: the sign bit cleared."""
    return h & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class DefaultPartitioner:
    """murmur2 for keyed records; a sticky partition per topic for keyless ones."""

    _CACHE_LIMIT = 100_000

    def __init__(self) -> None:
        self._sticky: dict[str, int] = {}
        self._hashes: dict[bytes, int] = {}  # keys repeat: hash each once

    def partition(self, key: bytes, num_partitions: int) -> int:
        h = self._hashes.get(key)
        if h is None:
            if len(self._hashes) >= self._CACHE_LIMIT:
                self._hashes.clear()
            h = self._hashes[key] = to_positive(murmur2(key))
        return h % num_partitions

    def sticky(self, topic: str, num_partitions: int) -> int:
        """The partition keyless records of `topic` go to now."""
        p = self._sticky.get(topic)
        if p is None or p >= num_partitions:
            p = self._sticky[topic] = random.randrange(num_partitions)
        return p

    def next_sticky(self, topic: str, num_partitions: int, previous: int) -> int:
        """Move on after `previous` got a batch's worth: another partition, at random."""
        if num_partitions <= 1:
            p = 0
        else:
            p = random.randrange(num_partitions - 1)
            if p >= previous:
                p += 1
        self._sticky[topic] = p
        return p
