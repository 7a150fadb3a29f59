"""The order-writing application of the crash tests, run as a process the tests kill (through
EXACTLY_FAILPOINTS). Each order is one dual write: its event to the log, its row to the
database.

    python -m tests.helpers.dualwrite.worker (--sqlite PATH | --postgres DSN) --bootstrap HOST:PORT
        --transactional-id ID --topic TOPIC --orders FIRST:COUNT [--isolation MODE]

Prints `recovered <outcome>` after the recovery run on start, then `done` at the end.
"""

from __future__ import annotations

import argparse
import logging

from exactly.dualwrite import DualWriter
from tests.helpers.dualwrite.helpers import ORDERS_DDL, Database


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sqlite")
    parser.add_argument("--postgres")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--orders", required=True)
    parser.add_argument("--isolation")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    db = Database.from_args(args.sqlite, args.postgres)
    conn = db.connect()
    conn.cursor().execute(ORDERS_DDL)
    first, count = (int(x) for x in args.orders.split(":"))
    writer = DualWriter(conn, {"bootstrap.servers": args.bootstrap,
                               "transactional.id": args.transactional_id},
                        isolation=args.isolation)
    result = writer.recover()
    print("recovered", result.outcome, flush=True)
    for order_id in range(first, first + count):
        with writer.transaction() as tx:
            tx.send(args.topic, f"order-{order_id}", key=str(order_id))
            tx.db.execute(db.sql("INSERT INTO orders (id, item) VALUES (?, ?)"),
                          (order_id, f"item {order_id}"))
    writer.close()
    conn.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
