"""The sink of seed 004's use case 4.6 over TCP: rows written to SQLite and share records
acknowledged (KIP-1289) in one dual write, with no record produced. The acknowledgements must
commit with the rows, never be dropped as a "database-only" transaction (whose abort would
release the records for redelivery and store their rows twice)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly import failpoints
from exactly.client import ShareConsumer, ShareRecord
from exactly.dualwrite import DualWriter
from exactly.failpoints import FailpointError
from exactly.testing import EmbeddedBroker
from tests.helpers.dualwrite.helpers import Database
from tests.helpers.share.helpers import SETTINGS
from tests.helpers.share.raw import start_offset
from tests.integration.client.test_share_consumer import _consumer, _poll_until, _queue

ROWS = "CREATE TABLE items (offset INTEGER PRIMARY KEY, value TEXT)"


@pytest.fixture(scope="module")
def share_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={**SETTINGS, "log.flush.policy": "os"}) as b:
        yield b


def _store_and_acknowledge(writer: DualWriter, consumer: ShareConsumer,
                           records: list[ShareRecord]) -> None:
    """The sink's step: the rows and the acknowledgements in one dual write, no tx.send."""
    with writer.transaction() as tx:
        tx.db.executemany("INSERT INTO items (offset, value) VALUES (?, ?)",
                          [(r.offset, (r.value or b"").decode()) for r in records])
        assert writer.session is not None
        consumer.acknowledge_transactionally(
            writer.session, {(records[0].topic, 0): [r.offset for r in records]})


def _nothing_redelivered(consumer: ShareConsumer, seconds: float = 1.5) -> list[int]:
    """The offsets delivered again within `seconds` (none, when all were accepted)."""
    again: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        again += [r.offset for r in consumer.poll(200)]
    return again


def test_acknowledgements_without_records_commit_with_the_rows(share_broker: EmbeddedBroker,
                                                              tmp_path: Path) -> None:
    _queue(share_broker, "dw-sa-in", "dw-sa-g", 5)
    db = Database("sqlite", str(tmp_path / "sink.sqlite"))
    db.execute(ROWS)
    consumer = _consumer(share_broker, "dw-sa-g", "dw-sa-in")
    writer = DualWriter(db.connect(), {"bootstrap.servers": share_broker.bootstrap,
                                       "transactional.id": "dw-share-sink"})
    try:
        records = _poll_until(consumer, 5)
        _store_and_acknowledge(writer, consumer, records)
        assert writer.session is not None and writer.session.share_acknowledgements == {}
        assert db.query("SELECT offset FROM items ORDER BY offset") == [(o,) for o in range(5)]
        assert _nothing_redelivered(consumer) == []
        assert start_offset(share_broker, "dw-sa-g", "dw-sa-in", 0) == 5  # all accepted
        # and the writer goes on: the next dual write (a record this time) commits as well
        with writer.transaction() as tx:
            tx.db.execute("INSERT INTO items (offset, value) VALUES (99, 'x')")
            tx.send("dw-sa-events", b"stored 99", partition=0)
    finally:
        writer.close()
        consumer.close()


def test_acknowledgements_of_a_crash_after_the_database_commit_are_recovered(
        share_broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database committed, the log transaction (holding only acknowledgements) is left
    prepared: recovery of the next writer commits it, so the stored rows are not delivered
    again."""
    _queue(share_broker, "dw-sr-in", "dw-sr-g", 4)
    db = Database("sqlite", str(tmp_path / "sink.sqlite"))
    db.execute(ROWS)
    consumer = _consumer(share_broker, "dw-sr-g", "dw-sr-in")
    config = {"bootstrap.servers": share_broker.bootstrap, "transactional.id": "dw-share-rec"}
    writer = DualWriter(db.connect(), config)
    try:
        records = _poll_until(consumer, 4)
        monkeypatch.setenv(failpoints.ENV, "dualwrite.7-commit-database-transaction=raise")
        with pytest.raises(FailpointError):
            _store_and_acknowledge(writer, consumer, records)
        monkeypatch.delenv(failpoints.ENV)
    finally:
        writer.close()  # the prepared transaction stays prepared
    assert db.query("SELECT COUNT(*) FROM items") == [(4,)]
    successor = DualWriter(db.connect(), config)
    try:
        assert successor.recover().outcome == "commit"
    finally:
        successor.close()
    try:
        assert _nothing_redelivered(consumer) == []
        assert start_offset(share_broker, "dw-sr-g", "dw-sr-in", 0) == 4
    finally:
        consumer.close()
