"""bench/measure.py produce_in_processes (bench/run.py --producers N): several producer processes
share the records, and what they report placed is what the broker holds."""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.testing import EmbeddedBroker
from tests.paths import BENCH

sys.path.insert(0, str(BENCH))
import measure  # bench/ is not a package: found through the path above


def test_two_producer_processes_place_every_record_once():
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        conf = {"bootstrap.servers": broker.bootstrap}
        topics = ["pp-a", "pp-b"]
        admin = AdminClient(conf)
        for future in admin.create_topics([NewTopic(t, 2, 1) for t in topics]).values():
            future.result(timeout=30)
        done = measure.produce_in_processes(
            conf, topics, 100, 3001, processes=2, broker_pid=broker.process.pid)
        placed = done.placed
        # 3,001 records and one warm-up record per topic from each process.
        assert sum(placed.values()) == 3001 + 2 * len(topics)
        assert done.seconds > 0 and done.cpu_per_gb is not None and done.cpu_per_gb >= 0
        assert done.client_cpu_per_gb > 0  # the producers spent CPU sending
        consumer = Consumer({**conf, "group.id": "pp-check"})
        try:
            for (topic, partition), count in placed.items():
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                            timeout=10)
                assert high == count, (topic, partition)
        finally:
            consumer.close()
