"""tests.rigs.kafka.ApacheKafka: a real Apache Kafka 4.4 (KRaft) from Maven Central, one node
and a three-node cluster, driven by unchanged clients over TCP.

The cluster test is the scale-out path's footing: three combined nodes, replication factor 3 and
min.insync.replicas=2 by default, so losing one node (SIGKILL) must not stop acks=all writes,
and every acknowledged record must be readable afterwards.
"""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from exactly.testing.ports import ephemeral_range
from tests.rigs.kafka import ApacheKafka, metadata_brokers, report_sections

pytestmark = pytest.mark.timeout(600)


def test_one_node_serves_clients_and_keeps_acknowledged_records_across_sigkill(
        apache_kafka: ApacheKafka) -> None:
    admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap})
    admin.create_topics([NewTopic("one", 2)])["one"].result(30)
    values = [f"v{i}".encode() for i in range(200)]
    assert len(produce_all(apache_kafka.bootstrap, "one", values)) == 200

    apache_kafka.kill(1)
    assert not apache_kafka.running(1)
    apache_kafka.start(1)

    assert sorted(read_all(apache_kafka.bootstrap, "one", 2)) == sorted(values)
    # The fixture's defaults are Kafka's single-node ones, and KIP-939's broker switch is on.
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["transaction.two.phase.commit.enable"].value == "true"
    assert configs["min.insync.replicas"].value == "1"


def test_three_nodes_keep_serving_acks_all_writes_when_a_node_is_killed(
        apache_kafka_factory) -> None:  # type: ignore[no-untyped-def]
    cluster: ApacheKafka = apache_kafka_factory(nodes=3, heap="384m")
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("replicated", 3)])["replicated"].result(30)
    leaders = wait_for_leaders(admin, "replicated", 3)
    # Replication factor 3 and min.insync.replicas=2 are the cluster's defaults.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "replicated")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "2"
    md = admin.list_topics("replicated", timeout=10).topics["replicated"]
    assert all(len(p.replicas) == 3 for p in md.partitions.values())

    # A producer writes steadily; the leader of partition 0 is killed while it does.
    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 120_000})

    def on_delivery(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(str(err))

    def write() -> None:
        i = 0
        while not stop.is_set():
            try:
                producer.produce("replicated", value=f"r{i}".encode(), on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0.01)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    wait_for(lambda: len(acked) >= 300, "300 records acknowledged before the kill")
    victim = leaders[0]
    cluster.kill(victim)
    at_kill = len(acked)
    # Writes go on, acknowledged with acks=all by the two nodes left (min.insync.replicas=2).
    wait_for(lambda: len(acked) >= at_kill + 1000, "1000 more records acknowledged without "
             f"node {victim}", timeout=120)
    alive = [n for n in cluster.node_ids if n != victim]
    assert metadata_brokers("127.0.0.1", cluster.ports[alive[0]]) == set(alive)
    stop.set()
    writer.join(30)
    assert producer.flush(120) == 0
    assert not errors, errors[:5]

    # Every acknowledged record is there, once (idempotence), with the node still down...
    survivors = ",".join(cluster.address(n) for n in alive)
    got = read_all(survivors, "replicated", 3)
    assert sorted(got) == sorted(acked)
    # ... and after it comes back and catches up.
    cluster.start(victim)
    wait_for(lambda: in_sync(admin, "replicated") == 3, "node back in every ISR", timeout=120)
    assert sorted(read_all(cluster.bootstrap, "replicated", 3)) == sorted(acked)


def test_a_port_taken_before_the_first_start_is_replaced(tmp_path) -> None:  # type: ignore[no-untyped-def]
    kafka = ApacheKafka(data_dir=tmp_path)
    low, _high = ephemeral_range()
    assert all(p < low for p in [*kafka.ports.values(), *kafka.controller_ports.values()])
    # Kafka's JVM binds 127.0.0.1 as the IPv4-mapped IPv6 address: squat on that.
    squatter = socket.socket(socket.AF_INET6)
    squatter.bind(("::ffff:127.0.0.1", kafka.ports[1]))
    squatter.listen()
    try:
        with kafka:
            assert kafka.ports[1] != squatter.getsockname()[1]
            assert metadata_brokers("127.0.0.1", kafka.ports[1]) == {1}
    finally:
        squatter.close()
    assert "starting over on other ports" in kafka.node_log(1).read_text()


def test_failed_tests_report_every_node_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    kafka = ApacheKafka(nodes=2, data_dir=tmp_path)
    for n in kafka.node_ids:
        kafka.node_log(n).write_text(f"line of node {n}\n")
    item = SimpleNamespace(stash={}, funcargs={"kafka": kafka})
    sections = report_sections(item)  # type: ignore[arg-type]
    assert [title.split(" (")[0] for title, _ in sections] == [
        "Apache Kafka node 1 log", "Apache Kafka node 2 log"]
    assert [text for _, text in sections] == ["line of node 1", "line of node 2"]


# -- helpers -----------------------------------------------------------------------------------


def wait_for(condition, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(0.1)


def wait_for_leaders(admin: AdminClient, topic: str, partitions: int) -> dict[int, int]:
    """{partition: leader node id} once every partition has a leader."""
    found: dict[int, int] = {}

    def ready() -> bool:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        found.clear()
        found.update({p: m.leader for p, m in md.partitions.items() if m.leader >= 0})
        return len(found) == partitions

    wait_for(ready, f"leaders of {topic}")
    return dict(found)


def in_sync(admin: AdminClient, topic: str) -> int:
    """The smallest ISR size over the topic's partitions."""
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return min(len(p.isrs) for p in md.partitions.values())


def produce_all(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    acked: list[bytes] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for v in values:
        producer.produce(topic, value=v,
                         on_delivery=lambda err, msg: acked.append(msg.value()) if err is None
                         else None)
    assert producer.flush(60) == 0
    return acked


def read_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every record of the topic, read with assign() from the start to the high watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        positions = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 120
        while any(positions[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise AssertionError(f"read {positions} of {ends}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
            positions[msg.partition()] = msg.offset() + 1
        return got
    finally:
        consumer.close()
