"""The consumers of the group fault runs (tests/helpers/groups/fault_load.py), one process each,
killed with SIGKILL and restarted by the run while the broker is killed, paused and power-cut under
them.

Each appends what it saw and what it settled to an events file, one line per event, so that the
checker (tests/helpers/groups/fault_check.py) can tell a record acknowledged without ever having
been delivered from one delivered twice:

    <monotonic s> S <pid>                      an incarnation starts
    <monotonic s> D <partition> <offset> <n>   a record delivered (n: its delivery count; 0 if
                                               the protocol has none)
    <monotonic s> C <partition>:<offset> ...   offsets committed (OffsetCommit answered)
    <monotonic s> T <partition>:<offset> ...   a transaction committed (consume-transform-
                                               produce: its offsets; share: its acknowledged
                                               offsets, as <partition>:<offset> each)
    <monotonic s> A <partition>:<offset> ...   records ACCEPTed, the acknowledgement answered
                                               without error (share group, at least once)
    <monotonic s> R <why>                      a commit or acknowledgement refused or aborted

Modes:
    consume     at least once, confluent-kafka on the classic protocol or KIP-848's consumer
                protocol (--protocol): log the batch's deliveries, then commit synchronously.
    ctp         exactly once, the loop of tests/workers/eos_worker.py: consume, transform,
                produce and send_offsets_to_transaction in one transaction; crash-only.
    share-consume  at least once, Exactly's ShareConsumer (KIP-932), explicit acknowledgement:
                log, ACCEPT, commit_sync.
    share-txn   exactly once, Exactly's ShareConsumer acknowledging inside a TransactionSession's
                transaction (KIP-1289), the loop of tests/workers/share_eos_worker.py; a new
                transactional id per incarnation, so the coordinator's session timeout
                (KIP-1309) ends a dead one's transaction.

Poison records (value ending in `-poison`) are RELEASEd by the share workers at each delivery:
the group archives them at its delivery count limit (`share.delivery.count.limit`).

--inject makes the worker wrong on purpose, to show that the checker sees it:
    skip-processing  the at-least-once workers leave one record per batch out of their log
                     (never "processed") and commit or ACCEPT it all the same.
    no-txn-offsets   the exactly-once workers commit their input's offsets (or acknowledge their
                     share records) after the transaction, outside it, INJECTED_WINDOW_S later
                     (the moment a crash turns into output without its offsets).

Each worker is crash-only: any error ends it at once (exit status ERROR_EXIT), and the run
restarts it; a transactional call stuck in librdkafka ends it too (tests/workers/
rdkafka_watchdog.py). SIGUSR1 writes its threads' stacks to its log;
$GROUP_FAULT_RDKAFKA_DEBUG (e.g. "eos,cgrp") turns librdkafka's debug log on.

    python -m tests.workers.group_fault_worker MODE --bootstrap B --group G --input IN
        [--output OUT] --events FILE [--protocol classic|consumer] [--batch N]
        [--txn-id ID] [--session-timeout-ms MS] [--inject WHAT]
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from exactly.client import (
    AcknowledgeType,
    ShareConsumer,
    TransactionAbortableError,
    TransactionSession,
)
from exactly.client import Producer as ExactlyProducer
from tests.helpers.groups.consumer_protocol_worker import consumer_config
from tests.workers.eos_worker import transform
from tests.workers.rdkafka_watchdog import bounded

POISON = b"-poison"
API_TIMEOUT_S = 8  # each transactional call of the consume-transform-produce worker
ERROR_EXIT = 2  # crash-only: any error (rdkafka_watchdog.EXIT_STATUS, 3: a call that hung)
INJECTED_WINDOW_S = 0.3
# A commit refused because the group moved on (Kafka's rebalance races) or the broker was away:
# the next commit covers the same records.
_REFUSED = {KafkaError.ILLEGAL_GENERATION, KafkaError.STALE_MEMBER_EPOCH,
            KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID,
            KafkaError.FENCED_MEMBER_EPOCH, KafkaError._NO_OFFSET}


class Events:
    """The events file: each call one write(2) on an O_APPEND descriptor, so a SIGKILL leaves
    whole lines (the page cache keeps them; the file is not on the power-cut filesystem)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, *lines: Iterable[object]) -> None:
        now = f"{time.monotonic():.3f}"
        text = "".join(" ".join([now, *map(str, parts)]) + "\n" for parts in lines)
        if text:
            os.write(self.fd, text.encode())


def _offsets(pairs: Iterable[tuple[int, int]]) -> list[str]:
    return [f"{p}:{o}" for p, o in pairs]


def is_poison(value: bytes | None) -> bool:
    return (value or b"").endswith(POISON)


def _debug() -> dict[str, str]:
    """librdkafka's debug contexts from $GROUP_FAULT_RDKAFKA_DEBUG (e.g. "eos,cgrp"), if set."""
    debug = os.environ.get("GROUP_FAULT_RDKAFKA_DEBUG")
    return {"debug": debug} if debug else {}


def _consumer(args: argparse.Namespace, **extra: object) -> Consumer:
    config = consumer_config(args.bootstrap, args.group, **extra, **_debug())
    if args.protocol == "classic":
        config.update({"group.protocol": "classic", "session.timeout.ms": 2000,
                       "heartbeat.interval.ms": 300,
                       "partition.assignment.strategy": "range"})
    return Consumer(config)


def consume(args: argparse.Namespace, events: Events) -> None:
    consumer = _consumer(args)
    consumer.subscribe([args.input])
    while True:
        msgs = [m for m in consumer.consume(args.batch, 0.5) if m.error() is None]
        if not msgs:
            continue
        shown = msgs[:-1] if args.inject == "skip-processing" else msgs
        events.write(*(("D", m.partition(), m.offset(), 0) for m in shown))
        try:
            committed = consumer.commit(asynchronous=False) or []
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in _REFUSED or error.retriable():
                events.write(("R", error.name()))
                continue
            raise
        events.write(("C", *_offsets((tp.partition, tp.offset) for tp in committed
                                     if tp.error is None and tp.offset >= 0)))


def consume_transform_produce(args: argparse.Namespace, events: Events) -> None:
    consumer = _consumer(args, **{"isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.txn_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 1, **_debug()})
    producer.init_transactions(60)
    consumer.subscribe([args.input])
    while True:
        msgs = [m for m in consumer.consume(args.batch, 0.5) if m.error() is None]
        if not msgs:
            continue
        events.write(*(("D", m.partition(), m.offset(), 0) for m in msgs))
        producer.begin_transaction()
        for m in msgs:
            producer.produce(args.output, key=b"%d:%d" % (m.partition(), m.offset()),
                             value=transform(m.value()), partition=m.partition())
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        if args.inject == "no-txn-offsets":
            producer.commit_transaction(API_TIMEOUT_S)
            time.sleep(INJECTED_WINDOW_S)
            consumer.commit(offsets=positions, asynchronous=False)
        else:
            # librdkafka's send_offsets_to_transaction can block far past its timeout once the
            # broker restarted (tests/workers/rdkafka_watchdog.py): the worker exits then.
            with bounded("send_offsets_to_transaction", API_TIMEOUT_S, grace_s=2):
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), API_TIMEOUT_S)
            with bounded("commit_transaction", API_TIMEOUT_S, grace_s=2):
                producer.commit_transaction(API_TIMEOUT_S)
        events.write(("T", *_offsets((tp.partition, tp.offset) for tp in positions)))


def _share_consumer(args: argparse.Namespace) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                              "share.acknowledgement.mode": "explicit",
                              "max.poll.records": args.batch, "fetch.max.wait.ms": 200})
    consumer.subscribe([args.input])
    return consumer


def share_consume(args: argparse.Namespace, events: Events) -> None:
    consumer = _share_consumer(args)
    while True:
        records = consumer.poll(500)
        if not records:
            continue
        shown = records[:-1] if args.inject == "skip-processing" else records
        events.write(*(("D", r.partition, r.offset, r.delivery_count) for r in shown))
        for r in records:
            consumer.acknowledge(r, AcknowledgeType.RELEASE if is_poison(r.value)
                                 else AcknowledgeType.ACCEPT)
        results = consumer.commit_sync()
        accepted = [(r.partition, r.offset) for r in records if not is_poison(r.value)
                    and results.get((r.topic, r.partition), "missing") is None]
        failed = [("R", f"{tp.partition}:{e}".replace(" ", "_")) for tp, e in results.items()
                  if e is not None]
        events.write(("A", *_offsets(accepted)), *failed)


def share_transactional(args: argparse.Namespace, events: Events) -> None:
    consumer = _share_consumer(args)
    session = TransactionSession({"bootstrap.servers": args.bootstrap,
                                  "transactional.id": args.txn_id,
                                  "transaction.session.timeout.ms": args.session_timeout_ms,
                                  "transaction.heartbeat.interval.ms":
                                      args.session_timeout_ms // 3})
    session.initialize()
    producer = ExactlyProducer({"bootstrap.servers": args.bootstrap, "linger.ms": 0},
                               session=session)
    while True:
        records = consumer.poll(500)
        if not records:
            continue
        events.write(*(("D", r.partition, r.offset, r.delivery_count) for r in records))
        work = [r for r in records if not is_poison(r.value)]
        for r in records:
            if is_poison(r.value):
                consumer.acknowledge(r, AcknowledgeType.RELEASE)  # sent with the next poll
        if not work:
            continue
        session.begin_transaction()
        for r in work:
            producer.send(args.output, value=transform(r.value or b""),
                          key=b"%d:%d" % (r.partition, r.offset), partition=r.partition)
        offsets: dict[tuple[str, int], list[int]] = {}
        for r in work:
            offsets.setdefault((r.topic, r.partition), []).append(r.offset)
        if args.inject == "no-txn-offsets":
            session.commit_transaction()
            time.sleep(INJECTED_WINDOW_S)
            for r in work:
                consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            consumer.commit_sync()
            events.write(("T", *_offsets((r.partition, r.offset) for r in work)))
            continue
        try:
            consumer.acknowledge_transactionally(session, offsets)
        except TransactionAbortableError as exc:
            # The member's epoch moved (a heartbeat, a rejoin after a broker restart) or the
            # records' locks went: the transaction cannot take them. Abort (its output goes) and
            # release them, to be delivered again.
            session.abort_transaction()
            for r in work:
                consumer.acknowledge(r, AcknowledgeType.RELEASE)
            events.write(("R", f"aborted:{type(exc).__name__}"))
            continue
        session.commit_transaction()
        events.write(("T", *_offsets((r.partition, r.offset) for r in work)))


MODES = {"consume": consume, "ctp": consume_transform_produce, "share-consume": share_consume,
         "share-txn": share_transactional}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.workers.group_fault_worker")
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output")
    parser.add_argument("--events", required=True)
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--txn-id")
    parser.add_argument("--session-timeout-ms", type=int, default=1500)
    parser.add_argument("--inject", choices=["none", "skip-processing", "no-txn-offsets"],
                        default="none")
    args = parser.parse_args(argv)
    # The run sends SIGUSR1 before it kills a worker that did not catch up: where it was stuck
    # goes to its log.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    events = Events(args.events)
    events.write(("S", os.getpid()))
    print(f"{args.mode} {args.group} pid {os.getpid()} ready", flush=True)
    try:
        MODES[args.mode](args, events)
    except BaseException:  # noqa: BLE001 - crash-only: any error ends the process
        traceback.print_exc()
        sys.stderr.flush()
        # At once, as a kill would: the exit's destructors may hang in librdkafka's destroy
        # of a consumer in the middle of a rebalance (join-state wait-unassign-call), which
        # waits for a poll that never comes.
        os._exit(ERROR_EXIT)


if __name__ == "__main__":
    sys.exit(main())
