"""Read-process-write from a share group, exactly once (seed 004, use case 4.2; KIP-1289).

A share consumer and a producer work under one TransactionSession: for each poll the producer
writes the transformed records to the output topic and the consumer acknowledges the input
records in the same transaction (`acknowledge_transactionally`). The commit makes both visible
together; an abort releases the input records for redelivery and hides the output.

    python -m examples.share_read_process_write                # starts a broker of its own
    python -m examples.share_read_process_write --bootstrap localhost:9092 --records 100

It needs a broker with transactional acknowledgements (TxnShareAcknowledge, KIP-1289), as
Exactly's broker is. Against one without (Apache Kafka 4.x today) it stops at the first
acknowledgement with UnsupportedVersionError naming KIP-1289 (exit status 2), its transaction
aborted and its input records delivered to the group again later.
"""

from __future__ import annotations

import contextlib
import sys

from exactly.client import Consumer, Producer, TransactionSession, UnsupportedVersionError
from examples import _share_setup as setup


def read_committed(bootstrap: str, topic: str) -> list[bytes | None]:
    """The values of the committed records of the topic's partition 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([(topic, 0)])
        values: list[bytes | None] = []
        while batch := consumer.poll(1000):  # until a poll finds nothing more
            values += [r.value for r in batch]
        return values
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = setup.arguments("python -m examples.share_read_process_write", __doc__)
    parser.add_argument("--output", default="share-output")
    parser.add_argument("--transactional-id", default="share-rpw-1")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        bootstrap = setup.broker(stack, args.bootstrap)
        consumer = setup.consumer_with_input(stack, bootstrap, args.input, args.group,
                                             args.records)
        session = TransactionSession({"bootstrap.servers": bootstrap,
                                      "transactional.id": args.transactional_id})
        stack.callback(session.close)
        session.initialize()
        producer = Producer({"bootstrap.servers": bootstrap}, session=session)
        stack.callback(producer.close)
        done = 0
        for records in setup.batches(consumer, args.records):
            session.begin_transaction()
            try:
                for r in records:
                    producer.send(args.output, value=r.value.upper() if r.value else None,
                                  key=r.key)
                consumer.acknowledge_transactionally(session, setup.offsets_of(records))
                session.commit_transaction()
            except UnsupportedVersionError as exc:
                session.abort_transaction()
                print(f"stopped: {exc}", file=sys.stderr)
                return 2
            except Exception:
                session.abort_transaction()  # the input is released and comes again
                raise
            done += len(records)
            print(f"committed {len(records)} output records with their input's acknowledgements")
        return setup.verdict(consumer, done, len(read_committed(bootstrap, args.output)),
                             "committed output records")


if __name__ == "__main__":
    sys.exit(main())
