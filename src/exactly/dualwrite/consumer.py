"""AtomicConsumer: the seed's recipe for atomic consumption from the log into a database.

    1 consume records   2 begin the database transaction   3 write what was consumed
    4 write the consumed offsets (kafka_consumer_offsets)   5 commit the database transaction

On start the consumer resumes from the offsets in the database, not from the broker's group
offsets: what is in the database and where reading goes on can never disagree, whatever
crashed when.

    consumer = AtomicConsumer(sqlite3.connect("billing.db"),
                              {"bootstrap.servers": "localhost:9092", "group.id": "billing"},
                              topics=["order-events"])
    while running:
        consumer.poll(lambda cur, records: cur.executemany("INSERT ...", rows(records)))
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

from exactly import failpoints
from exactly.client import Admin, Consumer, ConsumerRecord
from exactly.dualwrite import store
from exactly.dualwrite.errors import DatabaseConflictError
from exactly.dualwrite.store import Dialect

log = logging.getLogger("exactly.dualwrite")

Handler = Callable[[Any, list[ConsumerRecord]], object]


class AtomicConsumer:
    """Reads `topics` (all their partitions) or `partitions` with read_committed and applies each
    poll's records with `handler(cursor, records)` in one database transaction that also stores
    the next offsets. config: Kafka client config; its group.id names the offsets in the
    database (the consumer does not join a broker-side group). isolation: as for DualWriter."""

    def __init__(self, connection: Any, config: Mapping[str, Any], *,
                 topics: Iterable[str] = (), partitions: Iterable[tuple[str, int]] = (),
                 isolation: str | None = None, dialect: Dialect | None = None,
                 retries: int = 5) -> None:
        self.connection = connection
        self.dialect = dialect if dialect is not None else store.detect(connection)
        self.isolation = self.dialect.check_isolation(isolation)
        cfg = dict(config)
        group_id = cfg.pop("group.id", None)
        if not group_id:
            raise ValueError("AtomicConsumer needs group.id in its config: it names this "
                             "consumer's offsets in the database")
        self.group_id = str(group_id)
        cfg.setdefault("isolation.level", "read_committed")
        cfg.setdefault("auto.offset.reset", "earliest")
        cfg["enable.auto.commit"] = False
        self.retries = retries
        self.dialect.prepare_connection(connection)
        store.ensure_tables(connection, self.dialect, offsets=True)
        wanted = {(str(t), int(p)) for t, p in partitions}
        topics = [topics] if isinstance(topics, str) else list(topics)
        if topics:
            admin_config = {k: v for k, v in cfg.items()
                            if not k.startswith(("isolation.", "auto.", "enable.auto"))}
            with Admin(admin_config) as admin:
                for name, description in admin.describe_topics(topics).items():
                    wanted |= {(name, p.partition) for p in description.partitions}
        if not wanted:
            raise ValueError("AtomicConsumer needs topics or partitions to read")
        self.partitions = sorted(wanted)
        self._consumer = Consumer(cfg)
        self._consumer.assign(self.partitions)
        self.resume()

    def resume(self) -> dict[tuple[str, int], int]:
        """Seek every partition to the next offset stored in the database (partitions without
        one start at auto.offset.reset). Returns the stored offsets."""
        stored = store.read_offsets(self.connection, self.dialect, self.group_id)
        for tp in self.partitions:
            if tp in stored:
                self._consumer.seek(tp, stored[tp])
            elif self._consumer.aio.config["auto.offset.reset"] == "earliest":
                self._consumer.seek_to_beginning([tp])
            else:
                self._consumer.seek_to_end([tp])
        log.info("event=atomic_consumer_resumed group_id=%r offsets=%r", self.group_id, stored)
        return stored

    def poll(self, handler: Handler, timeout_ms: float = 1000,
             max_records: int | None = None) -> int:
        """Consume one batch and apply it atomically with its offsets; returns how many records.
        A database conflict is retried with the same records; any other failure rewinds the
        consumer to the offsets in the database and is raised."""
        records = self._consumer.poll(timeout_ms, max_records)
        if not records:
            return 0
        failpoints.hit("dualwrite.consume-1-poll")
        offsets: dict[tuple[str, int], int] = {}
        for r in records:
            offsets[(r.topic, r.partition)] = max(offsets.get((r.topic, r.partition), 0),
                                                  r.offset + 1)
        for attempt in range(self.retries + 1):
            try:
                self._apply(handler, records, offsets)
                return len(records)
            except Exception as exc:
                if self.dialect.is_conflict(exc) and attempt < self.retries:
                    log.info("event=atomic_consumer_retry group_id=%r attempt=%d error=%s",
                             self.group_id, attempt + 1, exc)
                    time.sleep(0.02 * 2 ** attempt)
                    continue
                with contextlib.suppress(Exception):
                    self.resume()
                if self.dialect.is_conflict(exc):
                    raise DatabaseConflictError(
                        f"database conflict applying {len(records)} record(s) ({exc}), "
                        f"{self.retries} retries; nothing was applied and the consumer was "
                        "rewound to the offsets in the database") from exc
                raise
        raise AssertionError("unreachable")

    def _apply(self, handler: Handler, records: list[ConsumerRecord],
               offsets: dict[tuple[str, int], int]) -> None:
        conn, dialect = self.connection, self.dialect
        cursor = conn.cursor()
        try:
            cursor.execute(dialect.begin_sql(self.isolation))
            failpoints.hit("dualwrite.consume-2-begin-database-transaction")
            try:
                handler(cursor, records)
                failpoints.hit("dualwrite.consume-3-write-data")
                store.write_offsets(cursor, dialect, self.group_id, offsets)
                failpoints.hit("dualwrite.consume-4-write-offsets")
                dialect.commit(cursor)
            except BaseException:
                with contextlib.suppress(Exception):
                    dialect.rollback(conn, cursor)
                raise
            failpoints.hit("dualwrite.consume-5-commit-database-transaction")
        finally:
            with contextlib.suppress(Exception):
                cursor.close()

    def close(self) -> None:
        """Close the log consumer; the database connection is the caller's."""
        self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
