"""Exactly's Kafka client: TransactionSession, Producer, Consumer, Admin.

These are the blocking classes; `exactly.client.aio` has the asyncio ones under the same names.
The client depends on `exactly.protocol` only, so it works against any Kafka-protocol broker.
"""
