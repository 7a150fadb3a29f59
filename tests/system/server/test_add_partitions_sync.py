"""A transaction version 1 client under log.flush.policy=fsync: why its AddPartitionsToTxn
waits for its Ongoing record's sync (issue 19, item 3).

An attempt to answer it before that sync (commit 79a7b41, reverted) failed CI's randomized
power-cut test once: transaction version 1 keeps the producer id and epoch from one transaction to
the next, and the previous transaction's CompleteCommit is not waited for, so the next
transaction's data could reach the disk before it. A restart then rolled the durable
PrepareCommit forward and its COMMIT marker committed that data (2 of 5 records of a transaction
whose commit got no answer). These tests cut the power at those points, with exact requests over
TCP on the power-cut filesystem (tests.rigs.powercut; AddPartitionsToTxn v3, Produce v9,
EndTxn v3, as librdkafka sends them): the last two fail on 79a7b41's code. DESIGN invariants
1 (acknowledged means durable), 3 (read_committed sees exactly the committed records) and 7 (no
transaction left open after a restart) are checked after each cut.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.server.powercut_load import read_committed
from tests.integration.server.test_kip890 import (
    TOPIC,
    add_partition,
    end_txn,
    init,
    offsets,
    produce,
)
from tests.rawclient import RawConnection
from tests.rigs.powercut import PowerCutFS
from tests.support import create_topic

TXN_ID = "v1-client"


@pytest.fixture
def power_cut_fs(tmp_path: Path) -> Iterator[PowerCutFS]:
    with PowerCutFS(tmp_path / "mnt") as fs:
        yield fs


def _broker(fs: PowerCutFS, **settings: object) -> EmbeddedBroker:
    # No periodic flush of every log: only the requests' own syncs reach the disk.
    return EmbeddedBroker(data_dir=fs.make_durable_dir("data"),
                          settings={"log.flush.policy": "fsync",
                                    "log.flush.offset.checkpoint.interval.ms": 600_000,
                                    **settings})


@pytest.fixture
def broker(power_cut_fs: PowerCutFS) -> Iterator[EmbeddedBroker]:
    with _broker(power_cut_fs) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        yield b


@contextmanager
def _connection(broker: EmbeddedBroker) -> Iterator[RawConnection]:
    conn = RawConnection(broker.host, broker.port)
    try:
        yield conn
    finally:
        conn.close()


def _cut_and_restart(broker: EmbeddedBroker, fs: PowerCutFS) -> None:
    broker.kill()
    fs.cut()
    broker.start()


def test_a_cut_after_the_produce_answer_keeps_the_partition_in_the_transaction(
        broker: EmbeddedBroker, power_cut_fs: PowerCutFS) -> None:
    with _connection(broker) as conn:
        pid, epoch = init(conn, TXN_ID)
        assert add_partition(conn, TXN_ID, pid, epoch, 1) == ErrorCode.none
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 1, b"kept") == ErrorCode.none
    _cut_and_restart(broker, power_cut_fs)
    with _connection(broker) as conn:
        # The record is on disk and still in the open transaction, which the coordinator holds:
        # the client's commit goes through (invariant 1), and only then is the record visible.
        high, stable = offsets(conn, 1)
        assert (high, stable) == (1, 0)
        assert end_txn(conn, 3, TXN_ID, pid, epoch, True)[0] == ErrorCode.none
    found, problems = read_committed(broker.bootstrap, {TOPIC: 2})
    assert problems == []  # no transaction left open (invariant 7)
    assert found == {b"kept": [(TOPIC, 1, 0)]}  # invariant 3


def test_the_next_transactions_data_on_disk_before_the_last_ones_end_is_not_committed(
        broker: EmbeddedBroker, power_cut_fs: PowerCutFS) -> None:
    # Transaction version 1 keeps the producer id and epoch from one transaction to the next: a
    # restart that rolls a PrepareCommit forward (its CompleteCommit lost) writes a COMMIT marker
    # of that producer into the transaction's partitions, which commits any data of the next
    # transaction it finds open there. So none of that data may reach the disk before the
    # CompleteCommit is durable: the next AddPartitionsToTxn waits for it.
    with _connection(broker) as conn:
        pid, epoch = init(conn, TXN_ID)
        assert add_partition(conn, TXN_ID, pid, epoch, 0) == ErrorCode.none
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 0, b"first") == ErrorCode.none
        assert end_txn(conn, 3, TXN_ID, pid, epoch, True)[0] == ErrorCode.none
        assert add_partition(conn, TXN_ID, pid, epoch, 0) == ErrorCode.none  # after the markers
        # The next transaction's record, not acknowledged as durable (acks=1): the page cache may
        # write it back at any moment, here a plain record's sync of the partition does.
        assert produce(conn, 9, TXN_ID, pid, epoch, 1, 0, b"second", acks=1) == ErrorCode.none
        assert produce(conn, 9, None, -1, -1, -1, 0, b"plain") == ErrorCode.none
    _cut_and_restart(broker, power_cut_fs)
    with _connection(broker) as conn:
        init(conn, TXN_ID)  # the client starts over: what it left open is aborted
    found, problems = read_committed(broker.bootstrap, {TOPIC: 2})
    assert problems == []
    assert set(found) == {b"first", b"plain"}  # invariant 3: "second" was never committed


def test_a_duplicate_is_answered_once_its_partition_is_durable_in_the_coordinator(
        broker: EmbeddedBroker, power_cut_fs: PowerCutFS) -> None:
    # A retried batch whose first copy is on disk is answered as a duplicate, without the
    # verification that puts the Ongoing record into the first copy's round: its own round must
    # cover that record, or a cut could keep the partition's data and lose the partition from
    # the coordinator, and the commit then miss the acknowledged record.
    with _connection(broker) as conn:
        pid, epoch = init(conn, TXN_ID)
        assert add_partition(conn, TXN_ID, pid, epoch, 1) == ErrorCode.none
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 1, b"one") == ErrorCode.none
        assert add_partition(conn, TXN_ID, pid, epoch, 0) == ErrorCode.none
        # The first copy: on disk (a plain record's round syncs the partition), unanswered.
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 0, b"zero", acks=1) == ErrorCode.none
        assert produce(conn, 9, None, -1, -1, -1, 0, b"plain") == ErrorCode.none
        assert produce(conn, 9, TXN_ID, pid, epoch, 0, 0, b"zero") == ErrorCode.none  # the retry
    _cut_and_restart(broker, power_cut_fs)
    with _connection(broker) as conn:
        assert end_txn(conn, 3, TXN_ID, pid, epoch, True)[0] == ErrorCode.none
        init(conn, TXN_ID)  # once the commit's markers are written
    found, problems = read_committed(broker.bootstrap, {TOPIC: 2})
    assert problems == []
    assert set(found) == {b"one", b"zero", b"plain"}  # invariants 1 and 3
