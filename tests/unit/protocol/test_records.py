"""Record batches (magic 2): the header view, validation, and round trips through every codec."""

import struct

import pytest

from exactly.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    Record,
    RecordBatchError,
    RecordBatchHeader,
    build_batch,
    build_own_batch,
    build_single_record_batch,
    decode_records,
    iter_batches,
    set_base_offset,
)


@pytest.mark.parametrize("codec", range(5))
def test_round_trip_every_codec(codec):
    records = [Record(b"k1", b"a" * 300, (("h", b"1"),)), Record(None, None), Record(b"", b"z")]
    batch = build_batch(records, timestamp=1000, compression=codec, producer_id=7, producer_epoch=2,
                        base_sequence=40)
    header = RecordBatchHeader(batch)
    header.validate()
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.last_sequence == 42 and header.records_count == 3 and header.compression == codec
    out = decode_records(header)
    assert [(r.key, r.value, tuple(r.headers)) for r in out] == [
        (b"k1", b"a" * 300, (("h", b"1"),)), (None, None, ()), (b"", b"z", ())]


def test_base_offset_is_outside_the_crc():
    batch = bytearray(build_batch([Record(b"k", b"v")], timestamp=5))
    set_base_offset(batch, 0, 123456)
    header = RecordBatchHeader(batch)
    header.validate()
    assert header.base_offset == 123456 and decode_records(header)[0].offset == 123456


def test_crc_mismatch_is_detected():
    batch = bytearray(build_batch([Record(b"k", b"value")], timestamp=5))
    batch[-2] ^= 0x40
    with pytest.raises(RecordBatchError, match="CRC") as info:
        RecordBatchHeader(batch).validate()
    assert info.value.corrupt


def test_truncation_and_lengths():
    batch = build_batch([Record(b"k", b"v")], timestamp=5)
    with pytest.raises(RecordBatchError):
        RecordBatchHeader(batch[: HEADER_SIZE - 1])
    with pytest.raises(RecordBatchError, match="truncated"):
        RecordBatchHeader(batch[:-1]).validate()
    with pytest.raises(RecordBatchError, match="truncated"):
        list(iter_batches(batch + batch[:20]))
    short = bytearray(batch)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(RecordBatchError, match="shorter than its header"):
        RecordBatchHeader(short).validate()


def test_other_magic_is_not_corrupt_but_invalid():
    batch = bytearray(build_batch([Record(b"k", b"v")], timestamp=5))
    batch[16] = 1
    with pytest.raises(RecordBatchError, match="magic") as info:
        RecordBatchHeader(batch).validate()
    assert not info.value.corrupt


def test_size_limit():
    batch = build_batch([Record(b"k", b"v" * 1000)], timestamp=5)
    with pytest.raises(RecordBatchError, match="exceeds"):
        RecordBatchHeader(batch).validate(max_size=500)


def test_iter_batches_walks_several():
    a = build_batch([Record(b"a", b"1"), Record(b"b", b"2")], timestamp=1)
    b = build_batch([Record(b"c", b"3")], timestamp=2, base_offset=2)
    headers = list(iter_batches(a + b, validate=True))
    assert [(h.base_offset, h.last_offset, h.position) for h in headers] == [(0, 1, 0), (2, 2, len(a))]


def test_record_with_bad_varint_inside_a_valid_crc_is_refused_on_decode():
    good = build_batch([Record(b"k", b"v")], timestamp=5)
    body = bytearray(good)
    body[HEADER_SIZE:] = b"\xff" * (len(good) - HEADER_SIZE)
    import crc32c
    struct.pack_into(">I", body, 17, crc32c.crc32c(bytes(body[21:])))
    header = RecordBatchHeader(body)
    header.validate()  # the CRC is right...
    with pytest.raises(RecordBatchError):  # ...but the records are garbage
        decode_records(header)


# Lengths on each side of the varint boundaries of a record's fields and of its own length.
_SIZES = (None, 0, 1, 60, 61, 62, 63, 64, 65, 100, 8000, 8191, 8192, 8193, 70_000)


@pytest.mark.parametrize("attributes", [0, ATTR_TRANSACTIONAL, ATTR_TRANSACTIONAL | ATTR_CONTROL])
def test_single_record_batch_is_build_batchs_bytes(attributes):
    """The one-pass builder of the coordinators' records and markers writes exactly the bytes of
    the general encoder, for every key and value length around the varint boundaries."""
    identities = [(-1, -1, -1), (0, 0, -1), (7, 3, 0), (2**62, 32767, 2**31 - 1)]
    for n, (key_size, value_size) in enumerate(
            (k, v) for k in _SIZES for v in _SIZES):
        key = None if key_size is None else bytes(range(256)) * (key_size // 256) + b"k" * (
            key_size % 256)
        value = None if value_size is None else b"v" * value_size
        pid, epoch, sequence = identities[n % len(identities)]
        ts = (-1, 0, 1_700_000_000_123, 2**62)[n % 4]
        expected = build_batch([Record(key, value)], timestamp=ts, producer_id=pid,
                               producer_epoch=epoch, base_sequence=sequence,
                               transactional=bool(attributes & ATTR_TRANSACTIONAL),
                               control=bool(attributes & ATTR_CONTROL))
        assert build_single_record_batch(key, value, timestamp=ts, producer_id=pid,
                                         producer_epoch=epoch, base_sequence=sequence,
                                         attributes=attributes) == expected, (key_size, value_size)


def test_own_batch_bytes_are_build_batchs():
    """build_own_batch takes the one-pass builder for a single record: same bytes as before."""
    cases = [[Record(b"key", b"value")], [Record(b"key", None)], [Record(None, b"v" * 200)],
             [Record(b"key", b"v", timestamp=99)], [Record(b"k", b"v", (("h", b"1"),))],
             [Record(b"a", b"1"), Record(b"b", b"2")]]
    for records in cases:
        for transactional in (False, True):
            own = build_own_batch(records, timestamp=1234, producer_id=5, producer_epoch=1,
                                  base_sequence=9, transactional=transactional)
            assert own.data == build_batch(records, timestamp=1234, producer_id=5,
                                           producer_epoch=1, base_sequence=9,
                                           transactional=transactional)
            assert own.header.size == len(own.data)
