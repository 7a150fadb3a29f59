"""Take docs/web-console.png: the web console's Transactions page over a small, real cluster
(an embedded broker, a topic with records, a consumer group, an ordinary open transaction and
two prepared 2PC ones whose coordinator has not decided yet), in headless chromium.

    .venv/bin/python scripts/console_screenshot.py                 # writes docs/web-console.png
    .venv/bin/python scripts/console_screenshot.py --page / --out /tmp/overview.png

Needs the console extra and the test extra's selenium, and Debian's chromium + chromium-driver
(`make test`'s set-up step installs them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.helpers.webconsole.support: the same browser and console

from tests.helpers.webconsole.support import browser, console

from exactly.client import (
    Admin,
    Consumer,
    NewTopic,
    Producer,
    TransactionSession,
)
from exactly.testing import EmbeddedBroker


def open_transaction(bootstrap: str, txn_id: str, partitions: list[int], records: int, *,
                     two_pc: bool) -> TransactionSession:
    extra = {"transaction.two.phase.commit.enable": True} if two_pc else {
        "transaction.timeout.ms": 600_000}
    session = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                  **extra})
    session.initialize()
    session.begin_transaction()
    with Producer({"bootstrap.servers": bootstrap}, session=session) as producer:
        for p in partitions:
            for i in range(records):
                producer.send("orders", f"{txn_id}-{i}", partition=p)
        if two_pc:
            session.prepare_transaction()
        else:
            producer.flush()
    return session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", default="/transactions", help="the console page to show")
    parser.add_argument("--out", default=str(REPO / "docs" / "web-console.png"))
    args = parser.parse_args()
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        bootstrap = broker.bootstrap
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic("orders", 4), NewTopic("payments", 2)])
        with Producer({"bootstrap.servers": bootstrap}) as producer:
            for i in range(400):
                producer.send("orders", f"order-{i}", partition=i % 4)
                producer.send("payments", f"payment-{i}", partition=i % 2)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["orders"])
        while not consumer.assignment():
            consumer.poll(100)
        consumer.commit({("orders", p): 60 + 10 * p for p in range(4)})
        sessions = [open_transaction(bootstrap, "checkout-service", [3], 2, two_pc=False)]
        for txn_id, parts in (("spark-orders-batch-41-task-0", [0, 1]),
                              ("dualwrite-ledger-7", [2])):
            open_transaction(bootstrap, txn_id, parts, 25, two_pc=True).close()  # left prepared
            time.sleep(1.5)  # different ages
        driver = browser()
        try:
            with console(bootstrap) as url:
                driver.get(url + args.page)
                time.sleep(1.5)  # one refresh, so the ages count
                driver.save_screenshot(args.out)
        finally:
            driver.quit()
            consumer.close()
            for s in sessions:
                s.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
