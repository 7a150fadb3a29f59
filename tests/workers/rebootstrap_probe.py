"""librdkafka's send_offsets_to_transaction after a re-bootstrap, bounded as eos_worker.py bounds it.

Run as a script by tests/system/interop/test_rdkafka_watchdog.py, which drives the broker:

1. a transaction with offsets is committed (the producer caches the group's coordinator);
   "committed" is printed;
2. the test kills the broker; once librdkafka logs that it decommissioned the coordinator (every
   broker unreachable: it re-bootstraps), "decommissioned" is printed;
3. the test restarts the broker and writes a line to stdin;
4. a second transaction calls send_offsets_to_transaction with a timeout of TIMEOUT_S, inside
   `bounded`; "returned" or "raised ERROR" is printed if the call comes back.

librdkafka's debug log (eos,broker) goes to stderr.

    python rebootstrap_probe.py BOOTSTRAP IN_TOPIC OUT_TOPIC
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from rdkafka_watchdog import bounded

TIMEOUT_S = 3.0
GRACE_S = 2.0


class _Log(logging.Handler):
    """librdkafka's log lines to stderr; notes the decommissioning of the coordinator."""

    def __init__(self) -> None:
        super().__init__()
        self.decommissioned = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Transaction coordinator decommissioned" in message:
            self.decommissioned.set()
        print(f"{record.created:.3f} {message}", file=sys.stderr, flush=True)


def main() -> None:
    bootstrap, in_topic, out_topic = sys.argv[1:4]
    handler = _Log()
    logger = logging.Logger("rdkafka", logging.DEBUG)  # noqa: LOG001 - this process's only logger
    logger.addHandler(handler)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([in_topic])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "probe",
                         "debug": "eos,broker", "logger": logger})
    producer.init_transactions(30)
    while not [m for m in consumer.consume(10, 1.0) if m.error() is None]:
        pass
    meta = consumer.consumer_group_metadata()
    producer.begin_transaction()
    producer.produce(out_topic, b"first")
    producer.send_offsets_to_transaction([TopicPartition(in_topic, 0, 1)], meta, 30)
    producer.commit_transaction(30)
    print("committed", flush=True)

    deadline = time.monotonic() + 60
    while not handler.decommissioned.is_set() and time.monotonic() < deadline:
        producer.poll(0.1)  # the logger is called from poll
    print("decommissioned" if handler.decommissioned.is_set() else "not decommissioned",
          flush=True)
    sys.stdin.readline()  # the broker is back

    producer.begin_transaction()
    producer.produce(out_topic, b"second")
    try:
        with bounded("send_offsets_to_transaction", TIMEOUT_S, grace_s=GRACE_S):
            producer.send_offsets_to_transaction([TopicPartition(in_topic, 0, 2)], meta,
                                                 TIMEOUT_S)
        print("returned", flush=True)
    except KafkaException as exc:
        print(f"raised {exc.args[0].name()}", flush=True)


if __name__ == "__main__":
    main()
