"""The consuming application of the atomic-consumption crash tests: copies every record it
reads into the table `consumed`, with AtomicConsumer (data and offsets in one database
transaction). Killed by the tests through EXACTLY_FAILPOINTS.

    python -m tests.helpers.dualwrite.consumer_worker (--sqlite PATH | --postgres DSN)
        --bootstrap HOST:PORT --topic TOPIC --group GROUP

Stops after three empty polls in a row and prints `done`.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from exactly.client import ConsumerRecord
from exactly.dualwrite import AtomicConsumer
from tests.helpers.dualwrite.helpers import Database

CONSUMED_DDL = ("CREATE TABLE IF NOT EXISTS consumed (topic VARCHAR(100) NOT NULL, "
                "partition_id INTEGER NOT NULL, record_offset BIGINT NOT NULL, "
                "value VARCHAR(100))")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sqlite")
    parser.add_argument("--postgres")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    db = Database.from_args(args.sqlite, args.postgres)
    conn = db.connect()
    conn.cursor().execute(CONSUMED_DDL)
    insert = db.sql("INSERT INTO consumed (topic, partition_id, record_offset, value) "
                    "VALUES (?, ?, ?, ?)")

    def handle(cursor: Any, records: list[ConsumerRecord]) -> None:
        cursor.executemany(insert, [(r.topic, r.partition, r.offset, r.value.decode())
                                    for r in records])

    with AtomicConsumer(conn, {"bootstrap.servers": args.bootstrap, "group.id": args.group},
                        topics=[args.topic]) as consumer:
        empty = 0
        while empty < 3:
            empty = 0 if consumer.poll(handle, timeout_ms=300, max_records=7) else empty + 1
    conn.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
