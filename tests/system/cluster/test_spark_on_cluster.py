"""The Spark exactly-once streaming sink on a three-node Apache Kafka 4.4 cluster, where it runs
in the mode Kafka 4.4 allows: `transactionResume=producer-id` (ordinary transactions committed
by resuming each task's producer id and epoch, as Flink's KafkaSink did before FLIP-319), since
Kafka 4.4 has no InitProducerId v6 (KIP-939's KeepPreparedTxn).

One run goes through a driver SIGKILL after a batch's decision was recorded and before its
transactions were committed, the loss of the node that coordinates one of those open
transactions, and the loss of the leader of an output partition while the restarted query
writes. The output, read with read_committed, is exactly the input, and no transaction of the
query is left open.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from exactly.client import Admin
from exactly.spark.options import OptionError
from tests.helpers.cluster.support import leaders, transaction_coordinator, wait_for
from tests.rigs.kafka import ApacheKafka
from tests.system.spark.test_stream_faults import still_open
from tests.system.spark.test_stream_no_2pc import ResumePipeline, _writer

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("kafka-cluster")]


def test_the_default_mode_is_refused_with_the_way_out(whole_cluster: ApacheKafka) -> None:
    with pytest.raises(OptionError) as refused:
        _writer(whole_cluster.bootstrap)
    message = str(refused.value)
    assert "lacks InitProducerId v6" in message
    assert "transactionResume=producer-id" in message


@pytest.mark.serial  # alone, as test_demo_on_cluster.py says why
def test_stream_sink_exactly_once_through_driver_and_node_kills(
        whole_cluster: ApacheKafka, admin: Admin, tmp_path: Path) -> None:
    bootstrap = whole_cluster.bootstrap
    pipe = ResumePipeline(bootstrap, tmp_path, replication=3)

    # The driver dies after batch 1's decision is recorded: its transactions stay open.
    assert pipe.run("spark.driver.after_decision=crash@1") == -9
    open_ids = still_open(bootstrap, pipe.name)
    assert open_ids
    # The node that coordinates one of them dies too; the restart must commit them through
    # the coordinator that takes over.
    coordinator = transaction_coordinator(admin, open_ids[0])
    whole_cluster.kill(coordinator)

    # While the restarted query writes, the leader of an output partition dies as well, once
    # the first node is back (two nodes are needed for acks=all: min.insync.replicas=2).
    killed: list[int | BaseException] = []

    def second_kill() -> None:
        try:
            whole_cluster.start(coordinator)
            wait_for("the first node back in service", lambda: all(
                leader >= 0 for leader in leaders(admin, pipe.dst).values()))
            victim = leaders(admin, pipe.dst)[0]
            whole_cluster.kill(victim)
            killed.append(victim)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            killed.append(exc)

    killer = threading.Timer(5.0, second_kill)
    killer.start()
    try:
        assert pipe.run() == 0, pipe.output[-6000:]
    finally:
        killer.join()
    assert killed and isinstance(killed[0], int), killed
    assert "spark_batch_output_lost" not in pipe.output
    for node in whole_cluster.node_ids:
        if not whole_cluster.running(node):
            whole_cluster.start(node)
    assert pipe.check() == (0, 0)
    assert still_open(bootstrap, pipe.name) == []
