"""One three-node Apache Kafka 4.4 cluster for the tests of this directory.

Every module here marks its tests `xdist_group("kafka-cluster")`, so under pytest-xdist they
all run on one worker and share one cluster (three JVMs start once, not once per module). Tests
kill nodes; each test starts from a whole cluster (`whole_cluster`), so the order of tests does
not matter. Topic and transactional-id names are unique across the modules.

The brokers' session with the controller times out in 3 s (Kafka's default is 9 s), so that a
killed node's partitions get new leaders, and its coordinators move, within a test's patience
on a loaded machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exactly.client import Admin
from tests.rigs.kafka import ApacheKafka, track

FAILOVER = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


@pytest.fixture(scope="package")
def cluster() -> Iterator[ApacheKafka]:
    with ApacheKafka(nodes=3, settings=FAILOVER, heap="384m") as kafka:
        yield kafka


@pytest.fixture
def whole_cluster(cluster: ApacheKafka, request: pytest.FixtureRequest) -> ApacheKafka:
    """The module's cluster with every node running (a node an earlier test killed is started
    again), its logs on this test's report if it fails."""
    for node in cluster.node_ids:
        if not cluster.running(node):
            cluster.start(node)
    track(request.node, cluster)
    return cluster


@pytest.fixture
def admin(whole_cluster: ApacheKafka) -> Iterator[Admin]:
    client = Admin({"bootstrap.servers": whole_cluster.bootstrap})
    yield client
    client.close()
