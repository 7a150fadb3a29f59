"""Zero-copy fetch (network.py): on PLAINTEXT, a Fetch answer's records go from the segment files
to the socket with sendfile; on TLS they are read and copied. Kafka's clients must not see a
difference, so these tests ask the same thing over both listeners of one broker and compare the
answers byte for byte: read_committed with aborted transactions and control batches at the edges
of a fetch, every fetch limit, batches in every codec, pipelined requests, answers too large for
the socket, and segments rolled and deleted (DeleteRecords) while such an answer is being sent.
Real clients (confluent-kafka, kafka-python) then read everything back over both.

A range under the copy threshold (network.COPY_BELOW) is copied on PLAINTEXT too, so the data
here is made of batches above it, each alone (the transaction markers are below): every range
that holds a record goes out with sendfile. Both paths giving the same bytes, the broker's count
of the bytes it sent with sendfile (`exactly_fetch_sendfile_bytes_total` on /metrics) is what
shows the PLAINTEXT answers took that path: the tests check it grew by at least the bytes of the
ranges above the threshold they were answered, and not at all over SSL. After a restart
(test_after_a_restart_both_paths_keep_their_order) the answers go as bytes on purpose: the first
read of the unchecked segments checks them.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import random
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from kio.static.primitive import i8, i16, i32, i64

from exactly.protocol.apis import SUPPORTED, ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import RequestHeader, decode_response, encode_request
from exactly.protocol.records import Record, build_batch, decode_records, iter_batches
from exactly.server.network import COPY_BELOW
from exactly.testing import EmbeddedBroker, TestCertificates, make_test_certificates
from tests.integration.server.test_metrics import _metrics_url, _scrape
from tests.rawclient import RawConnection
from tests.support import create_topic

TXN = "zc-txn"  # p0: transactions (committed, aborted, open), p1: batches in each codec, p2: empty
BIG = "zc-big"  # 6 partitions of 200 kB batches, 10 to a segment
SEGMENT_BYTES = 2 * 1024 * 1024
BIG_BATCH = 200_000
LATEST = SUPPORTED[ApiKey.FETCH][1]
VERSIONS = sorted({SUPPORTED[ApiKey.FETCH][0], 7, 11, 12, 13, LATEST})
UNLIMITED = 1 << 20
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # in the order of their ids in a batch


def big_value(label: str) -> bytes:
    """A record value that makes a batch of its own above the copy threshold in every codec:
    `label`, bytes that do not compress (seeded by the label, the same every run), then the label
    repeated, which does."""
    return (label.encode() + b"/" + random.Random(label).randbytes(COPY_BELOW)
            + label.encode() * 400)


CODEC_VALUES = [big_value(f"{codec}-{i}") for codec in CODECS for i in range(2)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return make_test_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(certs: TestCertificates) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.location": str(certs.server), "ssl.truststore.location": str(certs.ca),
            "log.flush.policy": "os", "log.segment.bytes": str(SEGMENT_BYTES),
            "metrics.listen": "127.0.0.1:0"}) as b:  # the bytes sent with sendfile are counted
        yield b


def sendfile_bytes(broker: EmbeddedBroker) -> float:
    """The broker's count of the bytes it sent from segment files with sendfile."""
    return _scrape(_metrics_url(broker))[("exactly_fetch_sendfile_bytes_total", ())]


def ranges_from_files(answer: Any) -> int:
    """The bytes of a decoded Fetch answer's ranges that go out with sendfile: each
    partition's records, when they reach the copy threshold."""
    return sum(len(p.records or b"") for t in answer.responses for p in t.partitions
               if len(p.records or b"") >= COPY_BELOW)


def connect(broker: EmbeddedBroker, listener: str, certs: TestCertificates,
            receive_buffer: int | None = None) -> RawConnection:
    """A raw connection to a listener; with `receive_buffer`, a small window that makes the
    broker's socket fill up while the test does not read."""
    host, port = broker.listener_addresses[listener]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(20)
    sock.connect((host, port))
    if listener == "SSL":
        sock = ssl.create_default_context(cafile=str(certs.ca)).wrap_socket(
            sock, server_hostname="localhost")
    conn = RawConnection.__new__(RawConnection)
    conn.sock, conn.correlation_id = sock, 0
    return conn


@contextlib.contextmanager
def both(broker: EmbeddedBroker, certs: TestCertificates) -> Iterator[tuple[RawConnection, RawConnection]]:
    """(PLAINTEXT, SSL) connections: zero copy and the copying path."""
    plain, tls = connect(broker, "PLAINTEXT", certs), connect(broker, "SSL", certs)
    try:
        yield plain, tls
    finally:
        plain.close()
        tls.close()


def fetch_request(version: int, wanted: list[tuple[str, uuid.UUID | None, list[tuple[int, int]]]],
                  *, max_bytes: int, partition_max_bytes: int, read_committed: bool) -> Any:
    m = import_module(request_class(ApiKey.FETCH, version).__module__)
    return build(
        request_class(ApiKey.FETCH, version), replica_id=i32(-1),
        max_wait=datetime.timedelta(0), min_bytes=i32(0), max_bytes=i32(max_bytes),
        isolation_level=i8(1 if read_committed else 0), session_id=i32(0), session_epoch=i32(-1),
        forgotten_topics_data=(), rack_id="",
        topics=tuple(build(m.FetchTopic, topic=name, topic_id=topic_id, partitions=tuple(
            build(m.FetchPartition, partition=i32(p), fetch_offset=i64(offset),
                  log_start_offset=i64(-1), partition_max_bytes=i32(partition_max_bytes))
            for p, offset in parts)) for name, topic_id, parts in wanted))


def topic_id(conn: RawConnection, topic: str) -> uuid.UUID:
    m = import_module("kio.schema.metadata.v12.request")
    answer = conn.request(ApiKey.METADATA, 12, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False,
                          topics=(m.MetadataRequestTopic(topic_id=None, name=topic),))
    return answer.topics[0].topic_id  # type: ignore[no-any-return]


def produce(conn: RawConnection, topic: str, partition: int, batch: bytes) -> None:
    m = import_module("kio.schema.produce.v9.request")
    answer = conn.request(ApiKey.PRODUCE, 9, transactional_id=None, acks=i16(-1),
                          timeout=datetime.timedelta(seconds=10), topic_data=(m.TopicProduceData(
                              name=topic, partition_data=(m.PartitionProduceData(
                                  index=i32(partition), records=batch),)),))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


def exchange(conn: RawConnection, version: int, requests: list[Any]) -> list[bytes]:
    """Send the Fetch requests pipelined, in one write; their answers' frames, in order."""
    conn.send_bytes(b"".join(conn.frame(ApiKey.FETCH, version, r) for r in requests))
    return [conn.read_frame() for _ in requests]


def pipelined(conn: RawConnection, frames: list[bytes]) -> list[bytes]:
    """Send request frames in one write; their answers' frames, in order."""
    conn.send_bytes(b"".join(frames))
    return [conn.read_frame() for _ in frames]


@pytest.fixture(scope="module")
def txn_topic(broker: EmbeddedBroker, certs: TestCertificates) -> Iterator[list[bytes]]:
    """TXN p0: batches of plain, aborted, committed and (last) open transactions, each ended by
    its marker; p1: two batches in each codec. A record a batch, each batch above the copy
    threshold but the markers. Yields the values read_committed returns from p0."""
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, TXN, partitions=3)
    base = {"bootstrap.servers": broker.bootstrap, "linger.ms": 0}
    values = iter(CODEC_VALUES)
    for codec in CODECS:
        producer = Producer({**base, "compression.type": codec})
        for _ in range(2):
            producer.produce(TXN, value=next(values), partition=1)
            assert producer.flush(10) == 0
    plain = Producer(base)
    # t2's last transaction stays open until the module ends, however long it takes.
    t1, t2 = (Producer({**base, "transactional.id": f"zc-{name}", "compression.type": codec,
                        "transaction.timeout.ms": 900_000})
              for name, codec in (("t1", "lz4"), ("t2", "zstd")))
    for p in (t1, t2):
        p.init_transactions(10)
    committed: list[bytes] = []

    def write(producer: Any, *labels: str, commit: bool | None = None) -> None:
        for label in labels:  # a batch each; the label's first letter tells its kind (_kinds)
            producer.produce(TXN, value=big_value(label), partition=0)
            assert producer.flush(10) == 0
        if commit is not False and producer is not t1:
            committed.extend(big_value(label) for label in labels)

    write(plain, "n0")
    for round_ in range(3):
        t1.begin_transaction()
        write(t1, f"a{round_}-1", f"a{round_}-2", commit=False)
        t1.abort_transaction(10)
        t2.begin_transaction()
        write(t2, f"c{round_}")
        t2.commit_transaction(10)
        write(plain, f"n{round_ + 1}")
    t2.begin_transaction()
    t2.produce(TXN, value=big_value("open"), partition=0)  # left open: read_committed stops before it
    assert t2.flush(10) == 0
    with contextlib.closing(connect(broker, "SSL", certs)) as conn:  # not the path under test
        deadline = time.monotonic() + 10
        while True:  # the last markers are written after the answers to EndTxn
            request = fetch_request(12, [(TXN, None, [(0, 0)])], max_bytes=UNLIMITED,
                                    partition_max_bytes=UNLIMITED, read_committed=True)
            _, answer = decode_response(ApiKey.FETCH, 12, exchange(conn, 12, [request])[0])
            p0 = answer.responses[0].partitions[0]
            if p0.high_watermark - 1 == p0.last_stable_offset:
                break
            assert time.monotonic() < deadline, "the transaction markers were not written"
            time.sleep(0.02)
    yield committed
    t2.abort_transaction(10)


def _kinds(records: bytes) -> dict[int, str]:
    """The kind of each batch of TXN p0, by offset: plain, aborted, committed or open (told by
    the value's first letter), or a marker, abort or commit (its key's type)."""
    kinds = {}
    for batch in iter_batches(records):
        record = decode_records(batch)[0]
        if batch.is_control:
            assert record.key is not None
            kinds[batch.base_offset] = "commit" if struct.unpack(">hh", record.key)[1] else "abort"
        else:
            assert record.value is not None
            kinds[batch.base_offset] = {"n": "plain", "a": "aborted", "c": "committed",
                                        "o": "open"}[chr(record.value[0])]
    return kinds


def test_answers_are_byte_identical_to_the_copying_path(broker, certs, txn_topic):
    """Fetches of TXN starting at each batch of p0 (and at its end), with limits that cut after
    its first, second and third batch, inside its first, and none, each as max_bytes and as
    partition_max_bytes, read_committed and not; p1 from a batch of each codec in turn. The
    PLAINTEXT answers equal the SSL ones, byte for byte; the ranges above the copy threshold
    among them cover control and aborted batches at both edges, every codec and both limits;
    and the broker sent at least their bytes with sendfile."""
    with both(broker, certs) as (plain, tls):
        tid = topic_id(tls, TXN)
        probe = fetch_request(12, [(TXN, None, [(0, 0), (1, 0)])], max_bytes=UNLIMITED,
                              partition_max_bytes=UNLIMITED, read_committed=False)
        _, answer = decode_response(ApiKey.FETCH, 12, exchange(tls, 12, [probe])[0])
        p0, p1 = answer.responses[0].partitions
        kinds = _kinds(p0.records)
        batches = list(iter_batches(p0.records))
        starts = [b.base_offset for b in batches] + [p0.high_watermark]
        codec_starts = [b.base_offset for b in iter_batches(p1.records)]
        assert [b.compression for b in iter_batches(p1.records)] == [c for c in range(5) for _ in "ab"]

        def limits(i: int) -> list[int]:
            sizes = [b.size for b in batches[i:i + 3]]
            return sorted({sizes[0] - 1, *itertools.accumulate(sizes), UNLIMITED} if sizes
                          else {1, UNLIMITED})

        matrix = []  # (version, read_committed, partitions wanted, max_bytes, partition_max_bytes)
        for version in VERSIONS:
            for i, offset in enumerate(starts):
                p1_offset = codec_starts[i % len(codec_starts)]
                # Which partition comes first changes what max_bytes leaves to the others.
                wanted = ([(0, offset), (1, p1_offset), (2, 0)] if i % 2
                          else [(1, p1_offset), (0, offset), (2, 0)])
                for committed in (False, True):
                    for limit in limits(i):
                        matrix.append((version, committed, wanted, limit, UNLIMITED))
                        if limit != UNLIMITED:
                            matrix.append((version, committed, wanted, UNLIMITED, limit))
        correlation_ids = itertools.count(1)
        frames = [encode_request(RequestHeader(ApiKey.FETCH, version, next(correlation_ids), "zc"),
                                 fetch_request(version, [(TXN, tid if version >= 13 else None,
                                                          wanted)],
                                               max_bytes=max_bytes, partition_max_bytes=pmax,
                                               read_committed=committed))
                  for version, committed, wanted, max_bytes, pmax in matrix]

        seen: set[tuple[str, str]] = set()
        from_files = records_seen = aborted_seen = 0
        sent_before = sendfile_bytes(broker)
        for start in range(0, len(matrix), 24):
            chunk = range(start, min(start + 24, len(matrix)))
            copied = dict(zip(chunk, pipelined(tls, [frames[k] for k in chunk]), strict=True))
            answers = {k: decode_response(ApiKey.FETCH, matrix[k][0], copied[k])[1] for k in chunk}
            # Answers with a range above the threshold and answers of bytes only are asked apart:
            # a file answer behind bytes still unsent is copied (network.py), and each answer
            # here is to take its own path.
            for files in (True, False):
                group = [k for k in chunk if bool(ranges_from_files(answers[k])) is files]
                got = pipelined(plain, [frames[k] for k in group])
                for k, frame in zip(group, got, strict=True):
                    assert frame == copied[k], f"Fetch v{matrix[k][0]} answers differ: {matrix[k]}"
            for k in chunk:
                version, committed, wanted, max_bytes, pmax = matrix[k]
                from_files += ranges_from_files(answers[k])
                for part in answers[k].responses[0].partitions:
                    assert part.error_code == ErrorCode.none
                    records = part.records or b""
                    records_seen += bool(records)
                    aborted_seen += bool(part.aborted_transactions)
                    if len(records) < COPY_BELOW:
                        continue
                    got_batches = list(iter_batches(records))
                    first, last = got_batches[0], got_batches[-1]
                    if part.partition_index == 1:
                        seen.add(("codec", CODECS[first.compression]))
                        continue
                    if part.partition_index != 0:
                        continue
                    if committed:
                        seen.add(("read_committed starts with", kinds[first.base_offset]))
                        seen.add(("read_committed ends with", kinds[last.base_offset]))
                    end = part.last_stable_offset if committed else part.high_watermark
                    for name, limit in (("max_bytes", max_bytes), ("partition_max_bytes", pmax)):
                        if limit != UNLIMITED and last.next_offset < end:
                            seen.add(("cut by", name))
                        if len(records) > limit:
                            seen.add(("first batch whole, over", name))
        sent = sendfile_bytes(broker) - sent_before
    # The comparisons covered records and aborted transactions, not only empty answers.
    print(f"\n{len(matrix)} fetches, {from_files:,} bytes of ranges from files, "
          f"{sent:,.0f} sent with sendfile")
    assert len(matrix) > 2000 and records_seen > len(matrix) and aborted_seen > 50
    wanted_cases = {("codec", c) for c in CODECS} | {
        (f"read_committed {edge} with", kind) for edge in ("starts", "ends")
        for kind in ("aborted", "abort", "commit", "committed", "plain")} | {
        (case, name) for case in ("cut by", "first batch whole, over")
        for name in ("max_bytes", "partition_max_bytes")}
    assert wanted_cases - seen == set(), "cases no range above the copy threshold covered"
    assert sent >= from_files > 10_000_000, (
        f"{from_files:,} bytes of ranges above the copy threshold were answered on PLAINTEXT, "
        f"the broker sent {sent:,.0f} with sendfile")


def test_other_answers_keep_their_order_around_file_answers(broker, certs, txn_topic):
    """Fetch answers sent from files and ApiVersions answers sent as bytes, pipelined on one
    connection: each comes back whole and in order. The first Fetch answer, with nothing before
    it, goes out with sendfile; later ones may be copied behind the bytes still unsent."""
    with both(broker, certs) as (plain, tls):
        frames = {}
        sent_before = sendfile_bytes(broker)
        for conn in (plain, tls):
            out = []
            for _ in range(10):
                out.append(conn.frame(ApiKey.FETCH, 12, fetch_request(
                    12, [(TXN, None, [(0, 0), (1, 0)])], max_bytes=UNLIMITED,
                    partition_max_bytes=UNLIMITED, read_committed=True)))
                out.append(conn.frame(ApiKey.API_VERSIONS, 3, request_class(ApiKey.API_VERSIONS, 3)(
                    client_software_name="zc", client_software_version="1")))
            conn.send_bytes(b"".join(out))
            frames[conn] = [conn.read_frame() for _ in out]
        sent = sendfile_bytes(broker) - sent_before
        assert frames[plain] == frames[tls]
        assert [struct.unpack_from(">i", f)[0] for f in frames[plain]] == list(range(1, 21))
    _, first = decode_response(ApiKey.FETCH, 12, frames[plain][0])
    assert sent >= ranges_from_files(first) > 0


def _deleted_segments_held(pid: int) -> int:
    """How many deleted segment files the broker process still has open."""
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            held += target.endswith(".log (deleted)")
    return held


def test_segments_rolled_and_deleted_while_an_answer_is_sent(broker, certs):
    """An answer larger than the socket can hold is being sent from segment files while the
    client does not read; meanwhile two of its partitions roll their segment and four lose theirs
    to DeleteRecords. The client then reads exactly what the copying path answered before."""
    create_topic(broker.bootstrap, BIG, partitions=6)
    batch = build_batch([Record(None, os.urandom(BIG_BATCH))], timestamp=1_700_000_000_000)
    per_segment = SEGMENT_BYTES // len(batch)
    with contextlib.closing(RawConnection(broker.host, broker.port)) as admin:
        for p in range(6):
            for _ in range(per_segment + 2):  # a full segment, then 2 batches in the next
                produce(admin, BIG, p, batch)
        # p4 and p5 from their active segment, then p0-p3 from their first (8 MB in all).
        request = fetch_request(12, [(BIG, None, [(4, per_segment), (5, per_segment)]
                                      + [(p, 0) for p in range(4)])],
                                max_bytes=64 << 20, partition_max_bytes=16 << 20,
                                read_committed=False)
        tls = connect(broker, "SSL", certs)
        plain = connect(broker, "PLAINTEXT", certs, receive_buffer=4096)
        sent_before = sendfile_bytes(broker)
        try:
            expected = exchange(tls, 12, [request])[0]
            plain.send_bytes(plain.frame(ApiKey.FETCH, 12, request))
            time.sleep(0.2)  # the broker fills the socket and waits for the client
            for p in (4, 5):  # roll the active segments being sent
                for _ in range(per_segment):
                    produce(admin, BIG, p, batch)
            m = import_module("kio.schema.delete_records.v2.request")
            answer = admin.request(ApiKey.DELETE_RECORDS, 2, timeout=datetime.timedelta(seconds=5),
                                   topics=(m.DeleteRecordsTopic(name=BIG, partitions=tuple(
                                       m.DeleteRecordsPartition(partition_index=p, offset=per_segment)
                                       for p in range(4))),))
            assert all(p.error_code == ErrorCode.none for p in answer.topics[0].partitions)
            # The answer still being sent holds the deleted segments' files open.
            assert _deleted_segments_held(broker.process.pid) > 0  # type: ignore[union-attr]
            got = plain.read_frame()
        finally:
            plain.close()
            tls.close()
    assert len(expected) > 8_000_000 and got == expected
    # From the files, rolled and deleted ones included: every range, each above the threshold.
    _, answer = decode_response(ApiKey.FETCH, 12, got)
    assert sendfile_bytes(broker) - sent_before >= ranges_from_files(answer) > 8_000_000
    # Sent in full, the files are let go.
    deadline = time.monotonic() + 5
    while _deleted_segments_held(broker.process.pid):  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the broker keeps deleted segments open"
        time.sleep(0.05)


def _files_held(pid: int, topic: str) -> int:
    """How many descriptors the broker process has open on the topic's segment files."""
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            held += f"/{topic}-" in target and target.endswith(".log")
    return held


def test_a_client_that_goes_away_mid_answer_costs_nothing(broker, certs):
    """A client resetting its connection in the middle of a file answer: the broker lets the
    answer's files go and keeps serving."""
    topic = "zc-gone"
    create_topic(broker.bootstrap, topic, partitions=4)
    batch = build_batch([Record(None, os.urandom(BIG_BATCH))], timestamp=1_700_000_000_000)
    pid = broker.process.pid  # type: ignore[union-attr]
    with contextlib.closing(RawConnection(broker.host, broker.port)) as admin:
        for p in range(4):
            for _ in range(SEGMENT_BYTES // len(batch) + 2):
                produce(admin, topic, p, batch)
        idle = _files_held(pid, topic)
        request = fetch_request(12, [(topic, None, [(p, 0) for p in range(4)])],
                                max_bytes=64 << 20, partition_max_bytes=16 << 20,
                                read_committed=False)
        plain = connect(broker, "PLAINTEXT", certs, receive_buffer=4096)
        sent_before = sendfile_bytes(broker)
        plain.send_bytes(plain.frame(ApiKey.FETCH, 12, request))
        deadline = time.monotonic() + 5
        while _files_held(pid, topic) == idle:  # the answer's own descriptors
            assert time.monotonic() < deadline, "no answer is being sent from the files"
            time.sleep(0.02)
        plain.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        plain.close()  # a reset, with most of the answer unsent
        while _files_held(pid, topic) != idle:
            assert time.monotonic() < deadline, "the broker keeps the answer's files open"
            time.sleep(0.02)
        assert sendfile_bytes(broker) > sent_before  # the answer was under way, from the files
        answer = admin.request(ApiKey.API_VERSIONS, 3, client_software_name="zc",
                               client_software_version="1")
        assert answer.error_code == ErrorCode.none


def _socket_descriptors(pid: int, client_port: int, broker_port: int) -> int:
    """How many descriptors the broker process holds on its end of a client's connection."""
    names = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(a.rsplit(":", 1)[1], 16) for a in fields[1:3])
        if (local, remote) == (broker_port, client_port):
            names.add(f"socket:[{fields[9]}]")
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # a descriptor closed meanwhile
            held += os.readlink(fd) in names
    return held


def test_a_connection_duplicates_its_socket_once(broker):
    """File answers go out on a duplicate of the connection's socket, made for the first of them
    and kept for the next ones (not a dup and a close per answer); it is closed with the
    connection."""
    topic = "zc-dup"
    create_topic(broker.bootstrap, topic, partitions=1)
    batch = build_batch([Record(None, os.urandom(BIG_BATCH))], timestamp=1_700_000_000_000)
    pid = broker.process.pid  # type: ignore[union-attr]
    conn = RawConnection(broker.host, broker.port)
    ports = conn.sock.getsockname()[1], broker.port
    produce(conn, topic, 0, batch)
    assert _socket_descriptors(pid, *ports) == 1
    request = fetch_request(12, [(topic, None, [(0, 0)])], max_bytes=UNLIMITED,
                            partition_max_bytes=UNLIMITED, read_committed=False)
    sent_before = sendfile_bytes(broker)
    for _ in range(3):
        _, answer = decode_response(ApiKey.FETCH, 12, exchange(conn, 12, [request])[0])
        assert len(answer.responses[0].partitions[0].records) == len(batch)
        assert _socket_descriptors(pid, *ports) == 2
    assert sendfile_bytes(broker) - sent_before >= 3 * len(batch)  # from the file, each time
    conn.close()
    deadline = time.monotonic() + 5
    while _socket_descriptors(pid, *ports):
        assert time.monotonic() < deadline, "the broker keeps the closed connection's socket"
        time.sleep(0.02)


def test_after_a_restart_both_paths_keep_their_order(certs, tmp_path):
    """After a restart the segments' bytes are unchecked: the first fetch of them reads and checks
    them (bytes), the next sends them from the files. Pipelined, with the client not reading, the
    first answer is still in the transport's buffer when the second is ready, which then goes out
    as bytes behind it: both answers come back whole, in order, equal."""
    topic = "zc-restart"
    batch = build_batch([Record(None, os.urandom(BIG_BATCH))], timestamp=1_700_000_000_000)
    with EmbeddedBroker(data_dir=tmp_path / "data", settings={
            "log.flush.policy": "os", "log.segment.bytes": str(SEGMENT_BYTES)}) as b:
        create_topic(b.bootstrap, topic, partitions=3)
        with contextlib.closing(RawConnection(b.host, b.port)) as admin:
            for p in range(3):
                for _ in range(SEGMENT_BYTES // len(batch) + 2):
                    produce(admin, topic, p, batch)
        b.stop()
        b.start()
        # 6 MB: more than the socket takes, and what is left is less than what pauses the
        # connection (MAX_WRITE_BUFFER).
        request = fetch_request(12, [(topic, None, [(p, 0) for p in range(3)])],
                                max_bytes=64 << 20, partition_max_bytes=16 << 20,
                                read_committed=False)
        plain = connect(b, "PLAINTEXT", certs, receive_buffer=4096)
        try:
            plain.send_bytes(plain.frame(ApiKey.FETCH, 12, request)
                             + plain.frame(ApiKey.FETCH, 12, request))
            time.sleep(0.3)  # both answers are ready before the client reads
            first, second = plain.read_frame(), plain.read_frame()
        finally:
            plain.close()
    assert struct.unpack_from(">i", first)[0] == 1 and struct.unpack_from(">i", second)[0] == 2
    assert len(first) > 6_000_000 and first[4:] == second[4:]


def _confluent_read(bootstrap: str, extra: dict[str, str], partition: int, count: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"zc-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.max.bytes": 3000, "max.partition.fetch.bytes": 2000,
                         "message.max.bytes": 1000, **extra})
    consumer.assign([TopicPartition(TXN, partition, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            for m in consumer.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        consumer.close()
    return got


def _kafka_python_read(bootstrap: str, extra: dict[str, Any], partition: int,
                       count: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, fetch_max_bytes=3000,
                             max_partition_fetch_bytes=2000, **extra)
    tp = KTopicPartition(TXN, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                got.extend(r.value for r in records)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_real_clients_read_everything_back(broker, certs, txn_topic, client, listener):
    bootstrap = broker.address(listener)
    if client == "confluent-kafka":
        extra = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca)} if listener == "SSL" else {}
        read = _confluent_read
    else:
        extra = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)} if listener == "SSL" else {}
        read = _kafka_python_read  # type: ignore[assignment]
    # Fetch limits below a batch: many fetches, each of one batch or marker (KIP-74).
    sent_before = sendfile_bytes(broker)
    assert read(bootstrap, extra, 0, len(txn_topic)) == txn_topic
    assert read(bootstrap, extra, 1, len(CODEC_VALUES)) == CODEC_VALUES
    sent = sendfile_bytes(broker) - sent_before
    # Over PLAINTEXT the batches went out from the files (each of them at least once: a client
    # may fetch a batch again); over SSL none did.
    if listener == "PLAINTEXT":
        assert sent >= sum(map(len, txn_topic + CODEC_VALUES)), f"{sent:,.0f} B sent with sendfile"
    else:
        assert sent == 0, f"{sent:,.0f} B sent with sendfile over SSL"
