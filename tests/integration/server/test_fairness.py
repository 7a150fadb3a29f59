"""Fairness between connections (network.py, `Turns`): one client pipelining requests as fast as it
can must not starve the others. Eight connections flood the broker with pipelined Metadata, Fetch
or Produce requests, never waiting for answers, while a canary producer (confluent-kafka,
acks=all) writes 200 records one at a time. The broker runs with `log.flush.policy=os`: an
fsync's time depends on whatever else the machine's disk does; bench/fairness.py measures the
same under fsync.

What is asserted is the order in which the broker served them, which the log shows without a
clock: each flooder follows each of its flood requests with a one-record Produce (a tracer naming
the flooder) to the partition the canary writes to. That partition holds, in the order the broker
handled them, the canary's records among marks of each flooder's progress.

- The canary is served in the middle of the flood and ahead of its backlog: tracers come before
  its first record and after its last, and of the tracers each flooder had written to its socket
  before the canary's first record was produced, some were appended after that record.
- Under the Produce and Metadata floods, every flooder always has requests waiting for a turn
  (its answers are small, it is never paused by its own unread answers), so the turns show:
  every flooder has tracers between the canary's first and last records (none starved), and none
  has more than FRAMES_PER_TURN of them in a row (turns taken in order: a turn takes at most
  FRAMES_PER_TURN requests, half of them tracers, and the others' turns come before its next).
  Under the Fetch flood a flooder is served as fast as it reads its 1 MiB answers (reading pauses
  while a file answer is being sent), so where its tracers fall says how fast it read, not how
  the turns went: only the first point is asserted there.

Without the turns (a connection handling all it has read at once) the Produce and Metadata floods
keep the canary's first record waiting more than a minute. The canary's latencies, idle and under
the flood, are printed: they are informative, not asserted, as the machine's speed never is here
(DESIGN.md).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import multiprocessing
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kio.static.primitive import i16, i32

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.framing import RequestHeader, encode_request
from exactly.protocol.records import Record, build_batch
from exactly.server.network import FRAMES_PER_TURN
from tests.helpers.server.flood import FLOODERS, canary_latencies, flood_frame, flooder, p99
from tests.support import create_topic, produce_confluent

pytestmark = pytest.mark.serial  # floods the broker: run alone (see tests/conftest.py)

ORDER = "turns"  # the canary's records and the flooders' tracers, in the order they were handled
CANARY = "canary"  # the canary's records on an idle broker
WAIT_SECONDS = 120.0  # for the flood to reach a stage; never reached unless something is broken


def tracer_frame(flooder_index: int) -> bytes:
    """A Produce of one record naming the flooder to ORDER (acks=all, as the canary's)."""
    module = __import__(request_class(ApiKey.PRODUCE, 9).__module__, fromlist=["_"])
    records = build_batch([Record(None, f"flooder {flooder_index}".encode())],
                          timestamp=1_700_000_000_000)
    data = build(module.TopicProduceData, name=ORDER, partition_data=(
        build(module.PartitionProduceData, index=i32(0), records=records),))
    request = build(request_class(ApiKey.PRODUCE, 9), transactional_id=None, acks=i16(-1),
                    timeout=datetime.timedelta(seconds=30), topic_data=(data,))
    return encode_request(RequestHeader(ApiKey.PRODUCE, 9, 1, "tracer"), request)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_SECONDS:g} s"
        time.sleep(0.02)


def end_offset(consumer: Consumer) -> int:
    return int(consumer.get_watermark_offsets(TopicPartition(ORDER, 0), timeout=10)[1])


def handled_order(consumer: Consumer) -> list[int | None]:
    """Who wrote each record of ORDER, in offset order: a flooder's index, None for the canary."""
    end = end_offset(consumer)
    consumer.assign([TopicPartition(ORDER, 0, OFFSET_BEGINNING)])
    writers: list[int | None] = []
    deadline = time.monotonic() + WAIT_SECONDS
    while len(writers) < end:
        assert time.monotonic() < deadline, f"read {len(writers)} of {end} records of {ORDER}"
        for message in consumer.consume(10_000, 0.5):
            assert message.error() is None, message.error()
            name = message.value()
            writers.append(int(name.split()[1]) if name.startswith(b"flooder ") else None)
    return writers


@pytest.mark.parametrize("flood", ["metadata", "fetch", "produce"])
def test_a_flood_does_not_starve_a_producer(broker_factory, flood: str) -> None:
    broker = broker_factory(settings={"log.flush.policy": "os"})
    for topic in (CANARY, ORDER):
        create_topic(broker.bootstrap, topic)
    create_topic(broker.bootstrap, "flooded", config={"retention.bytes": str(8 << 20),
                                                      "segment.bytes": str(1 << 20)})
    if flood == "fetch":  # a few MiB to read over and over
        produce_confluent(broker.bootstrap, "flooded", [os.urandom(1000) for _ in range(3000)])
    idle = canary_latencies(broker.bootstrap, CANARY)

    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    answered = [ctx.Value("q", 0) for _ in range(FLOODERS)]  # bytes of answers, per flooder
    sent = [ctx.Value("q", 0) for _ in range(FLOODERS)]  # (flood request, tracer) pairs written
    procs = [ctx.Process(target=flooder, args=(
                 broker.host, broker.port, flood_frame(flood, "flooded") + tracer_frame(i), stop,
                 answered[i], sent[i]))
             for i in range(FLOODERS)]
    with contextlib.closing(Consumer({"bootstrap.servers": broker.bootstrap,
                                      "group.id": "fairness-order",
                                      "enable.auto.commit": False})) as reader:
        for p in procs:
            p.start()
        try:
            wait_for(lambda: all(a.value for a in answered), "every flooder answered")
            sent_before = [s.value for s in sent]
            loaded = canary_latencies(broker.bootstrap, ORDER)
            canary_end = end_offset(reader)
            wait_for(lambda: end_offset(reader) > canary_end, "a tracer after the canary's")
        finally:
            stop.set()
            for p in procs:
                p.join(20)
                if p.is_alive():
                    p.kill()
        writers = handled_order(reader)
    canary = [k for k, who in enumerate(writers) if who is None]
    first, last = canary[0], canary[-1]
    assert len(canary) == len(loaded) + 1  # and the warm-up record
    appended_before = Counter(who for who in writers[:first] if who is not None)
    jumped = [sent_before[i] - appended_before[i] for i in range(FLOODERS)]
    during = [who for who in writers[first:last] if who is not None]
    runs = [len(list(same)) for _, same in itertools.groupby(during)]
    per_flooder = Counter(during)
    print(f"\n{flood} flood: canary p50/p99 idle {statistics.median(idle) * 1e3:.1f}/"
          f"{p99(idle) * 1e3:.1f} ms, under the flood {statistics.median(loaded) * 1e3:.1f}/"
          f"{p99(loaded) * 1e3:.1f} ms; its first record went ahead of {min(jumped)} to "
          f"{max(jumped)} tracers per flooder; between its records, tracers per flooder "
          f"{sorted(per_flooder.values())}, at most {max(runs, default=0)} in a row; flooders "
          f"got {sum(a.value for a in answered) / 1e6:.0f} MB of answers")

    # In the middle of the flood, ahead of its backlog.
    assert any(who is not None for who in writers[:first]), "no tracer before the canary"
    assert any(who is not None for who in writers[last + 1:]), "no tracer after the canary"
    assert min(jumped) > 0, (
        f"the canary's first record came after everything some flooders had written before it "
        f"was produced: tracers written {sent_before}, appended before it {appended_before}")
    if flood == "fetch":
        return  # each flooder is served as fast as it reads its answers: not a matter of turns
    # No flooder starved while the canary was served; turns in order between the flooders.
    assert sorted(per_flooder) == list(range(FLOODERS)), (
        f"flooders with no tracer between the canary's records: "
        f"{sorted(set(range(FLOODERS)) - set(per_flooder))}")
    assert max(runs) <= FRAMES_PER_TURN, (
        f"a flooder had {max(runs)} tracers in a row, more than FRAMES_PER_TURN, while the "
        f"others flooded too")
