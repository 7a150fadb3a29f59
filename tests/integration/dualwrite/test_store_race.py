"""Writers that start together on a fresh PostgreSQL database create the state and offsets
tables at once: CREATE TABLE IF NOT EXISTS then loses a race on the catalog in one of them
(unique_violation, duplicate_object or duplicate_table, by timing), which must not fail it."""

from __future__ import annotations

import threading
import uuid

from exactly.dualwrite.store import Postgres, ensure_tables
from tests.helpers.dualwrite.helpers import Database
from tests.rigs.postgres import PrivatePostgres

SESSIONS = 6
ROUNDS = 8


def test_concurrent_table_creation_on_postgres(postgres: PrivatePostgres) -> None:
    for _ in range(ROUNDS):
        db = Database("postgres", postgres.create_database(f"race_{uuid.uuid4().hex[:12]}"))
        connections = [db.connect() for _ in range(SESSIONS)]
        start = threading.Barrier(SESSIONS)
        errors: list[BaseException] = []

        threads = [threading.Thread(target=_create, args=(c, start, errors)) for c in connections]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for conn in connections:
            conn.close()
        assert not errors, errors
        tables = {row[0] for row in db.query(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"kafka_transaction_state", "kafka_consumer_offsets"} <= tables, tables


def _create(conn: object, start: threading.Barrier, errors: list[BaseException]) -> None:
    start.wait()
    try:
        ensure_tables(conn, Postgres(), offsets=True)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)
