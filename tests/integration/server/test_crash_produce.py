"""kill -9 of the broker during a sustained idempotent produce with retries: after the restart
every acknowledged record is in the log exactly once, in order per partition (DESIGN invariants
1 and 2), and a consumer reads to the end."""

import time

import pytest
from confluent_kafka import KafkaError, Producer

from exactly.testing import EmbeddedBroker
from tests.support import consume_confluent, create_topic, end_offsets

TOTAL = 20_000


@pytest.mark.parametrize("policy", ["fsync", "os"])
def test_kill9_during_idempotent_produce(policy):
    with EmbeddedBroker(settings={"log.flush.policy": policy}) as broker:
        create_topic(broker.bootstrap, "crash", partitions=3)
        acked: list[tuple[int, int, int]] = []  # (sequence number, partition, offset)
        failed: list[KafkaError] = []

        def on_delivery(err, msg):
            if err is not None:
                failed.append(err)
            else:
                acked.append((int(msg.value()), msg.partition(), msg.offset()))

        producer = Producer({
            "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "message.timeout.ms": 120_000, "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
        })
        killed = False
        for i in range(TOTAL):
            while True:
                try:
                    producer.produce("crash", key=str(i % 7).encode(), value=str(i).encode(),
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            if not killed and i == TOTAL // 2:
                # Mid-stream, with requests in flight: no warning, no flush.
                while len(acked) < TOTAL // 4:
                    producer.poll(0.05)
                broker.kill()
                killed = True
                time.sleep(0.3)
                broker.start()
        assert producer.flush(120) == 0
        assert not failed, failed[:5]
        assert len(acked) == TOTAL

        records = consume_confluent(broker.bootstrap, "crash", TOTAL, timeout=90)
        ends = end_offsets(broker.bootstrap, "crash", 3)
        assert sum(ends) == TOTAL, f"the log holds {sum(ends)} records for {TOTAL} sent"
        values = [int(m.value()) for m in records]
        assert len(set(values)) == TOTAL, "a record is in the log more than once"
        where = {int(m.value()): (m.partition(), m.offset()) for m in records}
        for seq, partition, offset in acked:
            assert where[seq] == (partition, offset), f"record {seq} moved or vanished"
        # Within a partition the offsets follow the order the producer sent the records in.
        for partition in range(3):
            seqs = [int(m.value()) for m in sorted(
                (m for m in records if m.partition() == partition), key=lambda m: m.offset())]
            for key in range(7):
                per_key = [s for s in seqs if s % 7 == key]
                assert per_key == sorted(per_key)
