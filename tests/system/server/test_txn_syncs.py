"""How many syncs a transaction makes under log.flush.policy=fsync (issue 19, item 3), counted by
the power-cut filesystem (tests.rigs.powercut), which sees every fsync of the broker
process per file.

A transaction version 2 client adds partitions with its Produce requests (KIP-890): the broker
makes the coordinator's record of the added partitions durable before it appends their data
(server/transactions.py). A request that adds four partitions syncs `__transaction_state` once,
not once per partition; the transaction's other sync of it is PrepareCommit's. The data and the
markers are one sync per partition each, whose rounds sync the files in parallel
(server/appends.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.client import Producer
from exactly.testing import EmbeddedBroker
from tests.rigs.powercut import PowerCutFS
from tests.support import create_topic

TXN_LOG = "__transaction_state-"


@pytest.fixture
def power_cut_fs(tmp_path: Path) -> Iterator[PowerCutFS]:
    with PowerCutFS(tmp_path / "mnt") as fs:
        yield fs


def _syncs(fs: PowerCutFS) -> tuple[int, int]:
    """(syncs of the transaction log, of the topic `wide`) so far."""
    by_dir = fs.file_fsyncs_by_dir()
    return (sum(n for d, n in by_dir.items() if d.startswith(TXN_LOG)),
            sum(n for d, n in by_dir.items() if d.startswith("wide-")))


def test_a_produce_that_adds_four_partitions_syncs_the_transaction_log_once(
        power_cut_fs: PowerCutFS) -> None:
    # No periodic flush of every log during the test: only the transaction's own syncs count.
    broker = EmbeddedBroker(data_dir=power_cut_fs.make_durable_dir("data"),
                            settings={"log.flush.policy": "fsync",
                                      "log.flush.offset.checkpoint.interval.ms": 600_000})
    with broker:
        create_topic(broker.bootstrap, "wide", partitions=4)
        with Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "wide",
                       "linger.ms": 100}) as producer:
            producer.init_transactions()
            txn_before, data_before = _syncs(power_cut_fs)
            producer.begin_transaction()
            for partition in range(4):
                producer.send("wide", b"x", partition=partition)
            producer.commit_transaction()
            # The markers are written after the commit's answer: four more syncs of `wide`.
            deadline = time.monotonic() + 10
            while _syncs(power_cut_fs)[1] - data_before < 8 and time.monotonic() < deadline:
                time.sleep(0.05)
            txn_syncs, data_syncs = (n - b for n, b in zip(_syncs(power_cut_fs),
                                                           (txn_before, data_before),
                                                           strict=True))
    # One Produce request with the four partitions (linger.ms): their data, one sync each.
    assert data_syncs == 8  # the data, then the markers
    assert txn_syncs == 2  # the four partitions added, then PrepareCommit
