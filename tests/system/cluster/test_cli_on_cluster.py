"""`exactly transactions` on a three-node Apache Kafka 4.4 cluster, as an operator would use it
in place of kafka-transactions.sh: list and describe go to each transactional id's coordinator,
find-hanging and abort to each partition's leader, wherever those are.

A transaction left open longer than the brokers' maximum transaction timeout is what
find-hanging reports even when its coordinator knows it (`--max-transaction-timeout 0` makes
any open transaction that old); abort writes its abort marker on the partition, after which
read_committed reads past it.
"""

from __future__ import annotations

import pytest

from exactly.client import Admin, OffsetSpec, Producer
from tests.helpers.cli.support import exactly, table
from tests.helpers.cluster.support import create_replicated, leaders, wait_for
from tests.rigs.kafka import ApacheKafka

pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("kafka-cluster")]


def test_list_describe_find_hanging_and_abort_on_the_cluster(
        whole_cluster: ApacheKafka, admin: Admin) -> None:
    bs = ("--bootstrap-server", whole_cluster.bootstrap)
    create_replicated(admin, "held", 3)
    leader = leaders(admin, "held")[2]
    producer = Producer({"bootstrap.servers": whole_cluster.bootstrap,
                         "transactional.id": "cli-held"})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send("held", value=b"held-%d" % i, partition=2)
    producer.flush()
    try:
        listed = {row["TransactionalId"]: row for row in table(exactly("transactions", "list",
                                                                       *bs).stdout)}
        assert listed["cli-held"]["TransactionState"] == "Ongoing"
        (described,) = table(exactly("transactions", "describe", *bs, "--transactional-id",
                                     "cli-held").stdout)
        assert described["TransactionState"] == "Ongoing"
        assert described["TopicPartitions"] == "held-2"
        # The coordinator's id, as kafka-transactions.sh prints it: one of the three nodes.
        assert int(described["CoordinatorId"]) in whole_cluster.node_ids

        (row,) = table(exactly("transactions", "find-hanging", *bs, "--topic", "held",
                               "--max-transaction-timeout", "0").stdout)
        assert (row["Topic"], row["Partition"], row["StartOffset"]) == ("held", "2", "0")
        out = exactly("transactions", "abort", *bs, "--topic", "held", "--partition", "2",
                      "--start-offset", "0").stdout
        assert f"producer {row['ProducerId']}" in out

        # The marker is on the partition's leader: read_committed reads past the transaction.
        def stable() -> bool:
            spec = {("held", 2): OffsetSpec.latest()}
            committed = admin.list_offsets(spec, isolation_level="read_committed")
            latest = admin.list_offsets(spec)
            return [i.offset for i in committed.values()] == [i.offset for i in latest.values()]

        wait_for("the last stable offset past the aborted transaction", stable)
        assert leaders(admin, "held")[2] == leader
    finally:
        producer.close()
