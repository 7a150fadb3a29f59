"""A read-process-write worker on a share group, exactly once through transactional
acknowledgements (KIP-1289, seed 004 use case 4.2) with Exactly's client.

Run as a script (its directory on sys.path) by tests/system/test_share_eos_pipeline.py, which kills
it with SIGKILL at random moments. Each poll's records are transformed and written to the output
topic (key: the input offset) and acknowledged in the same TransactionSession transaction, then
committed. It is crash-only: on any error it exits, but for an acknowledgement the broker refused
(TransactionAbortableError), whose transaction it aborts, its records released. Its
transactional id is new in every incarnation, so nothing but the coordinator's session timeout
(KIP-1309, `transaction.session.timeout.ms`) ends a dead incarnation's open transaction: the
abort hides its output and releases its input records to the group, which delivers them again
(to this worker's next incarnation or to another worker).

    python share_eos_worker.py BOOTSTRAP GROUP TRANSACTIONAL_ID IN_TOPIC OUT_TOPIC MAX_BATCH
                               SESSION_TIMEOUT_MS
"""

from __future__ import annotations

import sys

from eos_worker import transform  # the classic pipeline's: its test's output checks apply

from exactly.client import (
    AcknowledgeType,
    Producer,
    ShareConsumer,
    TransactionAbortableError,
    TransactionSession,
)


def main() -> None:
    bootstrap, group, txn_id, in_topic, out_topic = sys.argv[1:6]
    max_batch, session_timeout_ms = int(sys.argv[6]), int(sys.argv[7])
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit",
                              "max.poll.records": max_batch, "fetch.max.wait.ms": 200})
    consumer.subscribe([in_topic])
    session = TransactionSession({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                  "transaction.session.timeout.ms": session_timeout_ms,
                                  "transaction.heartbeat.interval.ms": session_timeout_ms // 3})
    session.initialize()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}, session=session)
    print("ready", flush=True)
    while True:
        records = consumer.poll(500)
        if not records:
            continue
        session.begin_transaction()
        for r in records:
            producer.send(out_topic, value=transform(r.value or b""), key=b"%d" % r.offset,
                          partition=0)
        offsets: dict[tuple[str, int], list[int]] = {}
        for r in records:
            offsets.setdefault((r.topic, r.partition), []).append(r.offset)
        try:
            consumer.acknowledge_transactionally(session, offsets)
        except TransactionAbortableError as exc:
            # E.g. STALE_MEMBER_EPOCH: a heartbeat moved the member's epoch while the
            # acknowledgement was on its way. The transaction cannot commit these records: abort
            # it (its output goes) and release them, so that they are delivered again.
            session.abort_transaction()
            for r in records:
                consumer.acknowledge(r, AcknowledgeType.RELEASE)
            print(f"aborted {len(records)} from offset {records[0].offset}: {exc}", flush=True)
            continue
        session.commit_transaction()
        print(f"committed {len(records)} from offset {records[0].offset} "
              f"(delivery count {max(r.delivery_count for r in records)})", flush=True)


if __name__ == "__main__":
    main()
