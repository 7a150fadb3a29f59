"""Partition logs on disk: segments, indexes, idempotent producer state, recovery, topics."""

from exactly.log.config import LogConfig
from exactly.log.manager import LogManager, TopicInfo
from exactly.log.partition import AppendResult, PartitionLog
from exactly.log.topic_config import ConfigEntry

__all__ = ["AppendResult", "ConfigEntry", "LogConfig", "LogManager", "PartitionLog", "TopicInfo"]
