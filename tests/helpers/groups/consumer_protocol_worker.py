"""Workers on the KIP-848 consumer protocol (confluent-kafka, `group.protocol=consumer`), run as
separate processes by tests/system/interop/test_consumer_protocol.py, which kills them with SIGKILL.

    python -m tests.helpers.groups.consumer_protocol_worker consume BOOTSTRAP GROUP TOPIC OUT_FILE
        at-least-once: append each record's value to OUT_FILE (flushed), then commit.
    python -m tests.helpers.groups.consumer_protocol_worker ctp BOOTSTRAP GROUP TXN_ID IN OUT [BATCH]
        exactly-once consume-transform-produce with send_offsets_to_transaction: the loop of
        tests/workers/eos_worker.py, its consumer on the consumer protocol.

No session or heartbeat settings: librdkafka rejects them with the consumer protocol; the broker's
group.consumer.* configs decide.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer

from tests.workers import eos_worker


def consumer_config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", **extra}


def consume(bootstrap: str, group: str, topic: str, out_file: str) -> None:
    consumer = Consumer(consumer_config(bootstrap, group))
    consumer.subscribe([topic])
    with open(out_file, "a", encoding="utf-8") as out:
        while True:
            msgs = [m for m in consumer.consume(50, 0.2) if m.error() is None]
            if not msgs:
                continue
            out.writelines(m.value().decode() + "\n" for m in msgs)
            out.flush()
            consumer.commit(asynchronous=False)


def consume_transform_produce(argv: list[str]) -> None:
    """tests/workers/eos_worker.py's loop, its consumer on the consumer protocol: the classic
    settings it passes (session, heartbeat, client-side assignor) are replaced."""
    classic_only = {"session.timeout.ms", "heartbeat.interval.ms",
                    "partition.assignment.strategy"}

    def consumer(config: dict[str, object]) -> Consumer:
        kept = {k: v for k, v in config.items() if k not in classic_only}
        return Consumer({**kept, "group.protocol": "consumer"})

    eos_worker.Consumer = consumer
    sys.argv = ["eos_worker", *argv]
    eos_worker.main()


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "consume":
        consume(*args[:4])
    elif mode == "ctp":
        consume_transform_produce(args)
    else:
        raise SystemExit(f"unknown mode {mode!r}: use consume or ctp")


if __name__ == "__main__":
    main()
