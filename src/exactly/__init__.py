"""Exactly: an exactly-once log system speaking the Kafka protocol."""

__version__ = "0.1.0"
