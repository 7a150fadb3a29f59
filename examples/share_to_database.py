"""A sink from a share group into a database, exactly once (seed 004, use case 4.6; KIP-1289
with the dual-write recipe of exactly.dualwrite).

Each poll's records are written to an SQLite table and acknowledged in one transaction: the
DualWriter's database transaction and its log transaction (a TransactionSession with two-phase
commit) commit together, and the share acknowledgements ride in the log transaction
(`acknowledge_transactionally(writer.session, ...)`). A crash before the database commit loses
both (the records come again); after it, recovery commits the log transaction and with it the
acknowledgements, so no record is written twice or lost. The sink also writes a change event
per row to the log, to show output and acknowledgements committing together; a block that only
acknowledges (no tx.send) commits the same way: the DualWriter takes a block as database-only
only when it neither sent a record nor holds acknowledgements.

    python -m examples.share_to_database                      # starts a broker of its own
    python -m examples.share_to_database --bootstrap localhost:9092 --db sink.db --records 100

It needs a broker with transactional acknowledgements (TxnShareAcknowledge, KIP-1289), as
Exactly's broker is. Against one without (Apache Kafka 4.x today) it stops at the first
acknowledgement with UnsupportedVersionError naming KIP-1289 (exit status 2), both transactions
rolled back and the table empty.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import tempfile
from pathlib import Path

from exactly.client import UnsupportedVersionError
from exactly.dualwrite import DualWriter
from examples import _share_setup as setup


def main(argv: list[str] | None = None) -> int:
    parser = setup.arguments("python -m examples.share_to_database", __doc__)
    parser.add_argument("--db", help="SQLite file (default: a temporary one)")
    parser.add_argument("--transactional-id", default="share-sink-1")
    parser.add_argument("--events", default="share-sink-events",
                        help="topic of the sink's change events")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        bootstrap = setup.broker(stack, args.bootstrap)
        db_path = args.db or str(Path(stack.enter_context(tempfile.TemporaryDirectory()))
                                 / "sink.db")
        conn = sqlite3.connect(db_path)
        stack.callback(conn.close)
        conn.execute("CREATE TABLE IF NOT EXISTS items (topic TEXT, partition INTEGER, "
                     "offset INTEGER, value TEXT, PRIMARY KEY (topic, partition, offset))")
        conn.commit()
        writer = DualWriter(conn, {"bootstrap.servers": bootstrap,
                                   "transactional.id": args.transactional_id})
        stack.callback(writer.close)
        print(f"database {db_path}; recovery on start: {writer.recover().outcome}")
        consumer = setup.consumer_with_input(stack, bootstrap, args.input, args.group,
                                             args.records)
        done = 0
        for records in setup.batches(consumer, args.records):
            try:
                with writer.transaction() as tx:  # database and log commit together
                    tx.db.executemany(
                        "INSERT INTO items (topic, partition, offset, value) VALUES (?, ?, ?, ?)",
                        [(r.topic, r.partition, r.offset, (r.value or b"").decode())
                         for r in records])
                    for r in records:  # a change event per row (and the writer's 2PC recipe)
                        tx.send(args.events, f"stored {r.topic}-{r.partition}@{r.offset}")
                    consumer.acknowledge_transactionally(writer.session,
                                                         setup.offsets_of(records))
            except UnsupportedVersionError as exc:
                rows = conn.execute("SELECT COUNT(*) FROM items").fetchone()[0]
                print(f"stopped: {exc} (rows in the table: {rows})", file=sys.stderr)
                return 2
            done += len(records)
            print(f"stored and acknowledged {len(records)} records")
        rows = conn.execute("SELECT COUNT(*) FROM items").fetchone()[0]
        return setup.verdict(consumer, done, rows, "rows in the table")


if __name__ == "__main__":
    sys.exit(main())
