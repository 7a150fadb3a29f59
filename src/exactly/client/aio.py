"""The asyncio client, under the same names as the blocking one in `exactly.client`."""

from exactly.client.admin import AsyncAdmin as Admin
from exactly.client.consumer import AsyncConsumer as Consumer
from exactly.client.producer import AsyncProducer as Producer
from exactly.client.session import AsyncTransactionSession as TransactionSession
from exactly.client.share_consumer import AsyncShareConsumer as ShareConsumer

__all__ = ["Admin", "Consumer", "Producer", "ShareConsumer", "TransactionSession"]
