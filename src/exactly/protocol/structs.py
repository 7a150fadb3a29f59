"""Plain data types that every layer passes around, defined once (as aiokafka's `structs.py`)."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic. A tuple, so `("orders", 0)` and `TopicPartition("orders", 0)` are
    equal and hash alike: either finds the same dictionary entry."""

    topic: str
    partition: int
