"""The dual writer on a three-node Apache Kafka 4.4 cluster: refused, before anything is written,
with the reason. Its recovery needs a log transaction prepared before a crash to survive the
restart (KIP-939's KeepPreparedTxn, InitProducerId v6), which Kafka 4.4 does not offer; without
it a crash between the database commit and the log commit could not be repaired."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from exactly.client import Admin, OffsetSpec, UnsupportedVersionError
from exactly.dualwrite.writer import DualWriter
from tests.helpers.cluster.support import create_replicated
from tests.rigs.kafka import ApacheKafka

pytestmark = pytest.mark.xdist_group("kafka-cluster")


def test_the_dual_writer_is_refused_with_the_reason_and_writes_nothing(
        whole_cluster: ApacheKafka, admin: Admin, tmp_path: Path) -> None:
    create_replicated(admin, "dual-orders", 1)
    db = sqlite3.connect(tmp_path / "orders.db")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    db.commit()
    writer = DualWriter(db, {"bootstrap.servers": whole_cluster.bootstrap,
                             "transactional.id": "orders-1"})
    with pytest.raises(UnsupportedVersionError) as refused, writer.transaction() as tx:
        tx.db.execute("INSERT INTO orders (id, item) VALUES (1, 'book')")
        tx.send("dual-orders", b"order 1 placed")
    message = str(refused.value)
    for named in ("exactly.dualwrite needs KIP-939", "KeepPreparedTxn",
                  "InitProducerId v6", "Apache Kafka up to 4.4"):
        assert named in message, (named, message)
    writer.close()
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    ends = admin.list_offsets({("dual-orders", 0): OffsetSpec.latest()})
    assert [info.offset for info in ends.values()] == [0]
    assert "orders-1" not in {t.transactional_id for t in admin.list_transactions()}
