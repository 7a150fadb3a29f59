"""Run the order service against SQLite: place a few orders, then read the order events back
with read_committed and check that the database and the log agree.

    python -m examples.order_service                      # starts a broker of its own
    python -m examples.order_service --bootstrap localhost:9092 --db orders.db --orders 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from exactly.client import Admin, Consumer, ConsumerRecord
from examples.order_service.service import TOPIC, OrderService


def read_events(bootstrap: str, topic: str, timeout: float = 30) -> list[dict]:
    """Every committed order event of the topic, from all its partitions. A record that is not
    one of this service's JSON events (another program wrote to the topic) is skipped."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        info = admin.describe_topics([topic])[topic]
    tps = [(topic, p.partition) for p in info.partitions]
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"}) as ends:
        ends.assign(tps)
        ends.seek_to_end(tps)
        end = {tp: ends.position(tp) for tp in tps}
    events: list[dict] = []
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign(tps)
        deadline = time.monotonic() + timeout
        while (any(consumer.position(tp) < end[tp] for tp in tps)
               and time.monotonic() < deadline):
            events += [e for e in map(_event, consumer.poll(200)) if e is not None]
    return events


def _event(record: ConsumerRecord) -> dict | None:
    try:
        event = json.loads(record.value or b"")
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.order_service",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="HOST:PORT of a broker (default: start one)")
    parser.add_argument("--db", help="SQLite file (default: a temporary one)")
    parser.add_argument("--orders", type=int, default=5, help="orders to place (default 5)")
    parser.add_argument("--topic", default=TOPIC)
    parser.add_argument("--transactional-id", default="order-service-1")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if not bootstrap:
            from exactly.testing import EmbeddedBroker

            broker = stack.enter_context(EmbeddedBroker(settings={"log.flush.policy": "os"}))
            bootstrap = broker.bootstrap
            print(f"started a broker on {bootstrap} (data in {broker.data_dir})")
        db_path = args.db or str(Path(stack.enter_context(tempfile.TemporaryDirectory()))
                                 / "orders.db")
        conn = sqlite3.connect(db_path)
        stack.callback(conn.close)
        service = OrderService(conn, {"bootstrap.servers": bootstrap,
                                      "transactional.id": args.transactional_id}, args.topic)
        stack.callback(service.close)
        print(f"database {db_path}; recovery on start: {service.recovery.outcome}")
        customers = ["ada", "grace", "edsger", "barbara"]
        for i in range(args.orders):
            order_id = service.place_order(customers[i % len(customers)], f"book-{i}", 1 + i % 3)
            print(f"placed order {order_id}")
        rows = {r[0]: r for r in conn.execute("SELECT id, customer, item, quantity FROM orders")}
        events = [e for e in read_events(bootstrap, args.topic) if e.get("type") == "order-placed"]
        print(f"orders in the database: {len(rows)}; order-placed events in the log "
              f"(read_committed): {len(events)}")
        ids = [e["order_id"] for e in events]
        if sorted(ids) != sorted(rows) or len(set(ids)) != len(ids):
            print("MISMATCH between the database and the log", file=sys.stderr)
            return 1
        print("every order has exactly one event, and every event its order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
