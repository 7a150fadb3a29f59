"""The producer's pieces without a network: batch encoding (byte-for-byte what the protocol
layer's reference encoder builds, and decodable by it for every codec), Kafka's murmur2, the
partitioner, the accumulator, and record futures."""

from __future__ import annotations

import asyncio
import os
import random
import threading

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from exactly.client.accumulator import RecordAccumulator
from exactly.client.batch import FutureRecordMetadata, ProducerBatch, RecordMetadata, varint
from exactly.client.partitioner import DefaultPartitioner, murmur2, partition_for_key, to_positive
from exactly.protocol.primitives import write_varint
from exactly.protocol.records import (
    COMPRESSION_NONE,
    Record,
    RecordBatchHeader,
    build_batch,
    decode_records,
)


def _records(n: int, seed: int = 1) -> list[tuple[int, bytes | None, bytes | None, list | None]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = 1_700_000_000_000 + rng.randrange(-5, 40_000)  # deltas < 0, small and large
        key = None if i % 5 == 0 else rng.randbytes(rng.randrange(0, 20))
        value = None if i % 11 == 0 else rng.randbytes(rng.choice([0, 1, 100, 300, 20_000]))
        headers = None if i % 3 else [("h", b"v"), ("empty", b""), ("null", None), ("ü", b"x")]
        out.append((ts, key, value, headers))
    return out


def _batch(records, codec=COMPRESSION_NONE, limit=1 << 30) -> ProducerBatch:
    batch = ProducerBatch("t", 0, limit, codec, 0.0, records[0][0])
    for ts, key, value, headers in records:
        assert batch.try_append(ts, key, value, headers) >= 0
    return batch


def _reference(records, codec, **kw) -> bytes:
    return build_batch([Record(k, v, tuple(h or ()), ts) for ts, k, v, h in records],
                       timestamp=records[0][0], compression=codec, partition_leader_epoch=-1,
                       **kw)


@pytest.mark.parametrize("codec", range(5), ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_batch_decodes_like_the_reference(codec):
    records = _records(300)
    data = _batch(records, codec).encode(1234, 5, 77)
    header = RecordBatchHeader(data)
    header.validate()
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 5, 77)
    assert header.records_count == 300 and header.compression == codec
    decoded = decode_records(header)
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in decoded] == [
        (ts, k, v, list(h or ())) for ts, k, v, h in records]
    assert [r.offset for r in decoded] == list(range(300))


@pytest.mark.parametrize("transactional", [False, True])
def test_uncompressed_batch_is_byte_identical_to_build_batch(transactional):
    records = _records(500, seed=7)
    batch = _batch(records)
    batch.transactional = transactional
    assert batch.encode(9, 1, 3) == _reference(records, COMPRESSION_NONE, producer_id=9,
                                               producer_epoch=1, base_sequence=3,
                                               transactional=transactional)


def test_compressed_payload_is_the_codec_over_the_reference_records():
    records = _records(200, seed=3)
    for codec in range(1, 5):
        ours = RecordBatchHeader(_batch(records, codec).encode(-1, -1, -1))
        ref = RecordBatchHeader(_reference(records, codec))
        assert [(r.key, r.value, r.headers, r.timestamp) for r in decode_records(ours)] == [
            (r.key, r.value, r.headers, r.timestamp) for r in decode_records(ref)]


def test_restamping_keeps_the_payload_and_fixes_the_crc():
    batch = _batch(_records(50))
    first = batch.encode(1, 0, 0)
    assert batch.encode(1, 0, 0) is first  # a resend is the same bytes
    second = batch.encode(2, 3, 40)
    assert first[61:] == second[61:]
    header = RecordBatchHeader(second)
    header.validate()
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (2, 3, 40)


def test_varints_match_the_reference_encoder():
    for value in [*range(-300, 70_000, 7), 2**31 - 1, -(2**31), 2**40, -(2**40)]:
        ref = bytearray()
        write_varint(ref, value)
        assert varint(value) == bytes(ref), value


def test_batch_limit_is_respected_but_a_first_record_always_fits():
    batch = ProducerBatch("t", 0, 1000, COMPRESSION_NONE, 0.0, 0)
    assert batch.try_append(0, None, os.urandom(5000), None) == 0  # alone, larger than the limit
    assert batch.full
    assert batch.try_append(0, None, b"x", None) == -1
    small = ProducerBatch("t", 0, 1000, COMPRESSION_NONE, 0.0, 0)
    count = 0
    while small.try_append(0, None, b"x" * 100, None) >= 0:
        count += 1
    assert count == 9 and small.size <= 1000


# -- murmur2 and the partitioner --------------------------------------------------------------


def test_murmur2_matches_kafkas_test_vectors():
    # From Kafka's UtilsTest.testMurmur2 (signed Java ints).
    vectors = {b"21": -973932308, b"foobar": -790332482,
               b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
               bytes([ord("a"), ord("b"), ord("c")]): 479470107}
    for data, expected in vectors.items():
        assert murmur2(data) == expected & 0xFFFFFFFF, data


def test_murmur2_matches_kafka_python_on_random_keys():
    rng = random.Random(5)
    for _ in range(3000):
        data = rng.randbytes(rng.randrange(0, 64))
        assert murmur2(data) == kafka_python_murmur2(data) & 0xFFFFFFFF


def test_key_partition_is_to_positive_mod_n():
    assert to_positive(0xFFFFFFFF) == 0x7FFFFFFF
    partitioner = DefaultPartitioner()
    for key in (b"", b"a", b"user-42", os.urandom(33)):
        for n in (1, 3, 12):
            assert partitioner.partition(key, n) == partition_for_key(key, n) == (
                (murmur2(key) & 0x7FFFFFFF) % n)


def test_sticky_partition_moves_to_another_partition():
    partitioner = DefaultPartitioner()
    first = partitioner.sticky("t", 4)
    assert partitioner.sticky("t", 4) == first
    seen = {first}
    previous = first
    for _ in range(200):
        nxt = partitioner.next_sticky("t", 4, previous)
        assert nxt != previous and partitioner.sticky("t", 4) == nxt
        seen.add(nxt)
        previous = nxt
    assert seen == {0, 1, 2, 3}
    assert partitioner.next_sticky("one", 1, 0) == 0


# -- accumulator and futures ------------------------------------------------------------------


def _accumulator(batch_size=1000, linger_ms=5) -> tuple[RecordAccumulator, list[int]]:
    woken: list[int] = []
    now = [100.0]
    acc = RecordAccumulator(batch_size=batch_size, linger_ms=linger_ms, codec=0,
                            buffer_memory=1 << 20, wake=lambda: woken.append(1),
                            clock=lambda: now[0])
    return acc, woken


def test_accumulator_batches_by_size_and_linger():
    acc, woken = _accumulator()
    futures = [acc.append("t", 0, 0, None, b"x" * 100, None) for _ in range(25)]
    assert all(f is not None for f in futures)
    st = acc.state("t", 0)
    assert len(st.batches) == 3  # 9 + 9 + 7 records
    assert {f.batch for f in futures[:9]} == {st.batches[0]}
    assert [f.index for f in futures[:10]] == [*range(9), 0]
    ready, next_at = acc.ready(100.0)
    assert ready == [st]  # the full first batch goes at once
    drained = acc.drain(ready, 1 << 20, 100.0)
    assert drained == [futures[0].batch]
    assert acc.ready(100.0)[0] == [st]  # the second one is full too
    acc.drain([st], 1 << 20, 100.0)
    ready, next_at = acc.ready(100.0)
    assert ready == [] and next_at == pytest.approx(100.005)  # the open one lingers
    assert acc.ready(100.006)[0] == [st]
    assert acc.append("t", 0, 0, None, b"x", None, new_batch=True) is not None
    assert woken
    assert acc.buffered == 3 * 1000


def test_accumulator_new_batch_false_for_sticky_partitioning():
    acc, _ = _accumulator()
    assert acc.append("t", 1, 0, None, b"x", None, new_batch=False) is None
    assert acc.append("t", 1, 0, None, b"x", None) is not None
    assert acc.append("t", 1, 0, None, b"x", None, new_batch=False) is not None


def test_requeue_keeps_sequence_order_ahead_of_new_batches():
    acc, _ = _accumulator(batch_size=100)
    for _ in range(4):
        acc.append("t", 0, 0, None, b"x" * 100, None)
    st = acc.state("t", 0)
    a, b = acc.drain([st], 1 << 20, 100.0)[0], acc.drain([st], 1 << 20, 100.0)[0]
    a.base_sequence, a.attempts, b.base_sequence, b.attempts = 0, 1, 1, 1
    acc.requeue(st, b)
    acc.requeue(st, a)
    assert list(st.batches)[:2] == [a, b]
    assert all(x.attempts == 0 for x in list(st.batches)[2:])


def test_record_futures_resolve_in_bulk():
    batch = ProducerBatch("t", 3, 1 << 20, 0, 0.0, 1000)
    futures = [FutureRecordMetadata(batch, batch.try_append(1000 + i, None, b"v", None), 1000 + i)
               for i in range(3)]
    called: list[FutureRecordMetadata] = []
    futures[1].add_done_callback(called.append)
    assert not futures[0].done() and futures[0].running() and not futures[0].cancel()
    with pytest.raises(TimeoutError):
        futures[0].result(timeout=0.01)
    threading.Timer(0.05, batch.complete, args=(40,)).start()
    assert futures[2].result(timeout=5) == RecordMetadata("t", 3, 42, 1002)
    assert called == [futures[1]]
    assert futures[0].exception() is None
    late: list[FutureRecordMetadata] = []
    futures[0].add_done_callback(late.append)
    assert late == [futures[0]]


def test_record_futures_carry_the_batch_error_and_are_awaitable():
    async def scenario():
        batch = ProducerBatch("t", 0, 1 << 20, 0, 0.0, 5)
        ok = ProducerBatch("t", 0, 1 << 20, 0, 0.0, 5)
        failed = FutureRecordMetadata(batch, batch.try_append(5, None, b"v", None), 5)
        good = FutureRecordMetadata(ok, ok.try_append(5, None, b"v", None), 5)
        asyncio.get_running_loop().call_later(0.01, batch.complete, -1, -1, ValueError("boom"))
        asyncio.get_running_loop().call_later(0.01, ok.complete, 7, 99)
        with pytest.raises(ValueError, match="boom"):
            await failed
        assert isinstance(failed.exception(), ValueError)
        assert await good == RecordMetadata("t", 0, 7, 99)  # LogAppendTime wins
    asyncio.run(scenario())
