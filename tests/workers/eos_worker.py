"""A consume-transform-produce worker, exactly-once through Kafka transactions (confluent-kafka).

Run as a separate process by the tests, which kill it with SIGKILL at random moments. It is
crash-only: on any error it exits, and whoever restarts it relies on init_transactions() to fence
and abort what its previous incarnation left open, and on the group's committed offsets to resume.

    python eos_worker.py BOOTSTRAP GROUP TRANSACTIONAL_ID IN_TOPIC OUT_TOPIC [MAX_BATCH]

With EXACTLY_WORKER_DEBUG set (librdkafka debug contexts, e.g. `cgrp,fetch,eos`) both clients log
those contexts, and each transaction is printed before its commit (`txn` with the input offsets
it carries per partition and the positions it commits): what a duplicated output is traced with
(bench/eos_chaos.py --debug).
"""

from __future__ import annotations

import os
import sys
import traceback

from confluent_kafka import Consumer, Producer

try:
    from tests.workers.rdkafka_watchdog import bounded
except ImportError:  # run as a script: its directory is on sys.path
    from rdkafka_watchdog import bounded  # type: ignore[no-redef]

TIMEOUT_S = 30  # each transactional call's timeout


def transform(value: bytes) -> bytes:
    return b"out:" + value.upper()


def main() -> None:
    bootstrap, group, txn_id, in_topic, out_topic = sys.argv[1:6]
    max_batch = int(sys.argv[6]) if len(sys.argv) > 6 else 50
    debug = os.environ.get("EXACTLY_WORKER_DEBUG")
    unguarded = os.environ.get("EXACTLY_WORKER_UNGUARDED") == "1"
    extra = {"debug": debug} if debug else {}
    consumer = Consumer({**extra,
        "bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": 2000, "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": "range",
    })
    producer = Producer({**extra,
        "bootstrap.servers": bootstrap, "transactional.id": txn_id,
        "transaction.timeout.ms": 10000, "linger.ms": 1,
    })
    producer.init_transactions(60)
    consumer.subscribe([in_topic])
    print("ready", flush=True)
    while True:
        msgs = [m for m in consumer.consume(max_batch, 0.5) if m.error() is None]
        if not msgs:
            continue
        # The group's committed offsets, to leave out what was processed already: librdkafka
        # can hand out records of a partition fetched before it was revoked once the partition
        # is assigned again, from below the committed offset (see docs/reliability.md, "A
        # duplicated output"). Processing them again would write their output twice and move the
        # committed offset back. EXACTLY_WORKER_UNGUARDED=1 turns this off (bench/eos_chaos.py
        # --unguarded), to show the library's behaviour.
        assigned = consumer.assignment()
        committed = ({} if unguarded else
                     {(tp.topic, tp.partition): tp.offset
                      for tp in consumer.committed(assigned, timeout=TIMEOUT_S)})
        fresh = [m for m in msgs if m.offset() >= committed.get((m.topic(), m.partition()), 0)]
        if len(fresh) < len(msgs):
            stale = sorted({(m.partition(), m.offset()) for m in msgs} -
                           {(m.partition(), m.offset()) for m in fresh})
            print(f"left out {len(stale)} records below the committed offsets "
                  f"(first {stale[0]}, last {stale[-1]})", flush=True)
        if not fresh:
            continue
        msgs = fresh
        producer.begin_transaction()
        for m in msgs:
            producer.produce(out_topic, key=m.key(), value=transform(m.value()))
        positions = [tp for tp in consumer.position(assigned)
                     if tp.offset >= max(0, committed.get((tp.topic, tp.partition), 0))]
        if debug:
            read: dict[int, list[int]] = {}
            for m in msgs:
                read.setdefault(m.partition(), []).append(m.offset())
            print(f"txn read {sorted((p, o[0], o[-1]) for p, o in read.items())} commits "
                  f"{sorted((tp.partition, tp.offset) for tp in positions)}", flush=True)
        with bounded("send_offsets_to_transaction", TIMEOUT_S):
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                 TIMEOUT_S)
        with bounded("commit_transaction", TIMEOUT_S):
            producer.commit_transaction(TIMEOUT_S)


if __name__ == "__main__":
    # Crash-only: on any error, print it and go at once, without librdkafka's destroy, which can
    # hang when the client failed during a rebalance.
    try:
        main()
    except BaseException:  # noqa: BLE001 - whatever it is, the process goes
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
