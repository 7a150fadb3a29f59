"""A static group member (KIP-345, `group.instance.id`) run as a separate process by
tests/system/interop/test_static_members.py, which kills it with SIGKILL and starts it again.

    python static_worker.py consume BOOTSTRAP GROUP INSTANCE_ID TOPIC
        Consume, print `assigned P,P,...` / `revoked ...` from the rebalance callbacks and one
        `record VALUE` per record after committing its offset (synchronously); idle, every
        record printed is committed, so a restart resumes after it.
    python static_worker.py ctp BOOTSTRAP GROUP INSTANCE_ID TRANSACTIONAL_ID IN OUT [MAX_BATCH]
        eos_worker.py's consume-transform-produce loop (exactly once through
        send_offsets_to_transaction), as a static member.

Run as a script: its directory is on sys.path.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer

SESSION_MS = 10_000  # long enough to come back from a kill -9 within it


def static_consumer(bootstrap: str, group: str, instance_id: str, **extra: object) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance_id,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": "range", **extra,
    })


def consume(bootstrap: str, group: str, instance_id: str, topic: str) -> None:
    consumer = static_consumer(bootstrap, group, instance_id)

    def show(kind: str):  # type: ignore[no-untyped-def]
        def callback(_consumer: Consumer, partitions: list) -> None:  # type: ignore[type-arg]
            print(kind, ",".join(str(tp.partition) for tp in partitions), flush=True)
        return callback

    consumer.subscribe([topic], on_assign=show("assigned"), on_revoke=show("revoked"))
    while True:
        msg = consumer.poll(0.2)
        if msg is None or msg.error() is not None:
            continue
        consumer.commit(msg, asynchronous=False)
        print("record", msg.value().decode(), flush=True)


def ctp(bootstrap: str, group: str, instance_id: str, txn_id: str, in_topic: str,
        out_topic: str, max_batch: int) -> None:
    """eos_worker.py's loop, its consumer made a static member."""
    import eos_worker

    def consumer(config: dict) -> Consumer:  # type: ignore[type-arg]
        return static_consumer(bootstrap, group, instance_id,
                               **{"isolation.level": config["isolation.level"]})

    eos_worker.Consumer = consumer  # type: ignore[assignment]
    sys.argv = [sys.argv[0], bootstrap, group, txn_id, in_topic, out_topic, str(max_batch)]
    eos_worker.main()


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "consume":
        consume(*args)
    else:
        ctp(*args[:6], int(args[6]) if len(args) > 6 else 20)
