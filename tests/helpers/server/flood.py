"""Floods for fairness tests and benchmarks (issue 14, item 4): connections that pipeline one
request as fast as the broker takes it, never waiting for answers, while a canary producer is
timed record by record. Used by tests/integration/server/test_fairness.py and bench/fairness.py.

A test tool, kept out of the installed package (issue 18: confluent-kafka is needed by tests and
benchmarks only). The canary is librdkafka on purpose: a C client whose own overhead hardly
moves when the flooders take the CPU, so its latency measures the broker, as the figures in the
README were measured."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import statistics
import threading
import time
from typing import Any

from confluent_kafka import Producer
from kio.static.primitive import i8, i16, i32, i64

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.framing import RequestHeader, encode_request
from exactly.protocol.records import Record, build_batch
from exactly.testing import EmbeddedBroker

FLOODERS = 8
PIPELINE = 256  # requests per write: the flood never waits for an answer before sending more
CANARY_RECORDS = 200


def _frame(api_key: int, version: int, **fields: Any) -> bytes:
    request = build(request_class(api_key, version), **fields)
    return encode_request(RequestHeader(api_key, version, 1, "flood"), request)


def metadata_frame() -> bytes:
    """Every topic: with the internal topics' hundred partitions, the largest Metadata answer."""
    return _frame(ApiKey.METADATA, 9, topics=None, allow_auto_topic_creation=False,
                  include_cluster_authorized_operations=False,
                  include_topic_authorized_operations=False)


def fetch_frame(topic: str) -> bytes:
    """Read 1 MiB from the start of `topic`, read_committed, without waiting."""
    module = __import__(request_class(ApiKey.FETCH, 11).__module__, fromlist=["_"])
    partition = build(module.FetchPartition, partition=i32(0), current_leader_epoch=i32(-1),
                      fetch_offset=i64(0), log_start_offset=i64(-1),
                      partition_max_bytes=i32(1 << 20))
    return _frame(ApiKey.FETCH, 11, replica_id=i32(-1), max_wait=datetime.timedelta(0),
                  min_bytes=i32(0), max_bytes=i32(1 << 20), isolation_level=i8(1),
                  session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(),
                  rack_id="", topics=(build(module.FetchTopic, topic=topic,
                                            partitions=(partition,)),))


def produce_frame(topic: str) -> bytes:
    """One 100-byte record, acks=all (so each waits for the fsync round)."""
    module = __import__(request_class(ApiKey.PRODUCE, 9).__module__, fromlist=["_"])
    records = build_batch([Record(None, b"f" * 100)], timestamp=1_700_000_000_000)
    data = build(module.TopicProduceData, name=topic, partition_data=(
        build(module.PartitionProduceData, index=i32(0), records=records),))
    return _frame(ApiKey.PRODUCE, 9, transactional_id=None, acks=i16(-1),
                  timeout=datetime.timedelta(seconds=30), topic_data=(data,))


def flooder(host: str, port: int, frame: bytes, stop: Any, answers: Any,
            sent: Any = None) -> None:
    """In a child process: send `frame` pipelined as fast as the broker takes it, reading the
    answers on another thread (counted in `answers`, bytes) so the broker never stalls on us.
    `sent`, if given, counts the copies of `frame` written to the socket."""
    os.nice(10)  # the canary's client shares these two cores
    sock = socket.create_connection((host, port))
    done = threading.Event()

    def drain() -> None:
        while not done.is_set():
            try:
                chunk = sock.recv(1 << 20)
            except OSError:
                break
            if not chunk:
                break
            with answers.get_lock():  # counted as they come: under_flood waits on the count
                answers.value += len(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    burst = frame * PIPELINE
    try:
        while not stop.is_set():
            sock.sendall(burst)
            if sent is not None:  # this process alone writes it
                sent.value += PIPELINE
    except OSError:
        pass
    finally:
        done.set()
        sock.shutdown(socket.SHUT_RDWR)
        reader.join(10)
        sock.close()


def canary_latencies(bootstrap: str, topic: str, count: int = CANARY_RECORDS) -> list[float]:
    """acks=all latency of `count` records sent one at a time."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": True})
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, b"warm-up", on_delivery=delivered)
    latencies = []
    for n in range(count + 1):
        start = time.perf_counter()
        if n:
            producer.produce(topic, f"c{n}".encode(), on_delivery=delivered)
        if producer.flush(60) != 0 or errors:
            raise RuntimeError(f"canary record {n} not delivered: {errors or 'timed out'}")
        if n:
            latencies.append(time.perf_counter() - start)
    return latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def under_flood(broker: EmbeddedBroker, frame: bytes, canary_topic: str = "canary",
                count: int = CANARY_RECORDS, served: int = 1_000_000,
                ) -> tuple[list[float], int]:
    """The canary's latencies while FLOODERS connections flood the broker with `frame`, and the
    bytes of answers the flooders got (they were served too, not just shut out)."""
    ctx = multiprocessing.get_context("spawn")
    stop, answers = ctx.Event(), ctx.Value("q", 0)
    procs = [ctx.Process(target=flooder, args=(broker.host, broker.port, frame, stop, answers))
             for _ in range(FLOODERS)]
    for p in procs:
        p.start()
    try:
        time.sleep(2)  # the flood is in full swing
        latencies = canary_latencies(broker.bootstrap, canary_topic, count)
        # The flood goes on until the flooders were served `served` bytes of answers (or a
        # minute passed): whether they are served at all, not how fast this machine serves
        # them in the canary's few seconds (a timing), is what the callers check.
        deadline = time.monotonic() + 60
        while answers.value < served and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for p in procs:
            p.join(20)
            if p.is_alive():
                p.kill()
    return latencies, answers.value


def flood_frame(kind: str, topic: str) -> bytes:
    """The request a flood of `kind` (metadata, fetch, produce) sends; fetch and produce use
    partition 0 of `topic`."""
    if kind == "metadata":
        return metadata_frame()
    if kind == "fetch":
        return fetch_frame(topic)
    if kind == "produce":
        return produce_frame(topic)
    raise ValueError(f"unknown flood {kind!r}: metadata, fetch or produce")
