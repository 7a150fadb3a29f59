"""OrderService: place_order() inserts the order and emits an `order-placed` event in one dual
write (DualWriter): after a crash at any moment, recovery leaves every order with its event
and no event without its order."""

from __future__ import annotations

import json
import uuid
from typing import Any

from exactly.dualwrite import DualWriter, Transaction

TOPIC = "order-service-events"  # its own: other programs' records in a shared topic are noise

ORDERS_DDL = """CREATE TABLE IF NOT EXISTS orders (
    id VARCHAR(32) PRIMARY KEY,
    customer VARCHAR(100) NOT NULL,
    item VARCHAR(100) NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0)
)"""


class OrderService:
    """connection: sqlite3 or psycopg; config: Kafka client config with bootstrap.servers and
    transactional.id (one per service instance)."""

    def __init__(self, connection: Any, config: dict[str, Any], topic: str = TOPIC
                 ) -> None:
        connection.cursor().execute(ORDERS_DDL)
        if getattr(connection, "in_transaction", False):  # sqlite3 began one for the DDL
            connection.commit()
        self.topic = topic
        self.writer = DualWriter(connection, config)
        self.recovery = self.writer.recover()  # finish what a crashed predecessor left

    def place_order(self, customer: str, item: str, quantity: int) -> str:
        order_id = uuid.uuid4().hex
        param = self.writer.dialect.param

        def work(tx: Transaction) -> str:
            tx.db.execute(f"INSERT INTO orders (id, customer, item, quantity) VALUES "
                          f"({param}, {param}, {param}, {param})",
                          (order_id, customer, item, quantity))
            event = {"type": "order-placed", "order_id": order_id, "customer": customer,
                     "item": item, "quantity": quantity}
            tx.send(self.topic, json.dumps(event), key=order_id)
            return order_id

        return self.writer.run(work)  # a database conflict is retried, both sides afresh

    def close(self) -> None:
        self.writer.close()
