"""The `__transaction_state` record layout: Kafka's TransactionLogKey v0 and
TransactionLogValue v0/v1, checked against hand-made bytes."""

from __future__ import annotations

import pytest

from exactly.protocol.structs import TopicPartition
from exactly.txn.codec import (
    TxnCodecError,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from exactly.txn.state import TxnMetadata, TxnState
from exactly.txn.store import from_value, to_value

# PrepareCommit, producer id 1000, epoch 5, timeout 60000, partitions t-0 and t-1,
# PrevProducerId 1000 and ClientTransactionVersion 2 as tagged fields, NextProducerId absent.
V1_FIXTURE = bytes.fromhex(
    "0001"                  # version 1
    "00000000000003e8"      # ProducerId 1000
    "0005"                  # ProducerEpoch 5
    "0000ea60"              # TransactionTimeoutMs 60000
    "02"                    # TransactionStatus PrepareCommit
    "02"                    # compact array: 1 entry
    "0274"                  #   Topic "t"
    "03" "00000000" "00000001"  # PartitionIds [0, 1]
    "00"                    #   entry: no tagged fields
    "0000018bcfe5687b"      # TransactionLastUpdateTimestampMs
    "0000018bcfe56800"      # TransactionStartTimestampMs
    "02"                    # 2 tagged fields
    "00" "08" "00000000000003e8"  # tag 0 PrevProducerId = 1000
    "02" "02" "0002"        # tag 2 ClientTransactionVersion = 2
)
V1_VALUE = TxnLogValue(1000, 5, 60000, 2, (("t", (0, 1)),), 1700000000123, 1700000000000,
                       prev_producer_id=1000, client_transaction_version=2)

# The same in version 0 (no tagged fields, int16/int32 lengths).
V0_FIXTURE = bytes.fromhex(
    "0000" "00000000000003e8" "0005" "0000ea60" "02"
    "00000001" "000174" "00000002" "00000000" "00000001"
    "0000018bcfe5687b" "0000018bcfe56800"
)


def test_key_layout() -> None:
    assert encode_key("ab") == bytes.fromhex("0000" "0002" "6162")
    assert decode_key(bytes.fromhex("0000" "0002" "6162")) == "ab"
    assert decode_key(encode_key("tx-é")) == "tx-é"


def test_key_unknown_version() -> None:
    with pytest.raises(TxnCodecError):
        decode_key(bytes.fromhex("0001" "0000"))


def test_v1_encodes_to_fixture() -> None:
    assert encode_value(V1_VALUE) == V1_FIXTURE


def test_v1_decodes_fixture() -> None:
    assert decode_value(V1_FIXTURE) == V1_VALUE


def test_v0_fixture_round_trip() -> None:
    v0 = TxnLogValue(1000, 5, 60000, 2, (("t", (0, 1)),), 1700000000123, 1700000000000)
    assert decode_value(V0_FIXTURE) == v0
    assert encode_value(v0, version=0) == V0_FIXTURE


def test_v1_without_tagged_fields() -> None:
    v = TxnLogValue(7, 0, 1000, 0, None, 10, -1)
    data = encode_value(v)
    # null compact array (0), then the two timestamps, then an empty tagged-field section
    assert data == bytes.fromhex("0001" "0000000000000007" "0000" "000003e8" "00" "00"
                                 "000000000000000a" "ffffffffffffffff" "00")
    assert decode_value(data) == v


def test_v1_with_partitions_and_no_tagged_fields() -> None:
    """What an older client's transactions write (every tagged field at its default): the
    encoder's short path gives Kafka's bytes, as the general one does."""
    v = TxnLogValue(1000, 5, 60000, 1, (("t", (0, 1)), ("uv", (7,))), 1700000000123,
                    1700000000000)
    assert encode_value(v) == bytes.fromhex(
        "0001" "00000000000003e8" "0005" "0000ea60" "01"
        "03"                                   # compact array: 2 entries
        "0274" "03" "00000000" "00000001" "00"  # "t" [0, 1], no tagged fields
        "037576" "02" "00000007" "00"           # "uv" [7]
        "0000018bcfe5687b" "0000018bcfe56800"
        "00")                                  # no tagged fields
    assert decode_value(encode_value(v)) == v
    for one_tag in ({"prev_producer_id": 3}, {"next_producer_id": 4},
                    {"client_transaction_version": 2}, {"next_producer_epoch": 0},
                    {"session_timeout_ms": 500}):
        tagged = v._replace(**one_tag)  # one field off its default: a tagged field is written
        assert encode_value(tagged) != encode_value(v)
        assert decode_value(encode_value(tagged)) == tagged


def test_v1_all_tagged_fields() -> None:
    v = TxnLogValue(9, 32767, 5, 3, (("a", (2,)), ("b", ())), 1, 2, prev_producer_id=9,
                    next_producer_id=12, client_transaction_version=2)
    data = encode_value(v)
    assert data.endswith(bytes.fromhex("03" "0008" "0000000000000009" "0108" "000000000000000c"
                                       "0202" "0002"))
    assert decode_value(data) == v


def test_v1_unknown_tagged_field_is_skipped() -> None:
    data = encode_value(TxnLogValue(1, 1, 1, 1, (), 1, 1))
    assert data.endswith(b"\x00")
    extended = data[:-1] + bytes.fromhex("01" "2a" "03" "aabbcc")  # tag 42, 3 bytes
    assert decode_value(extended) == TxnLogValue(1, 1, 1, 1, (), 1, 1)


def test_v0_null_partitions() -> None:
    v = TxnLogValue(1, 0, 100, 0, None, 5, -1)
    data = encode_value(v, version=0)
    assert data[17:21] == bytes.fromhex("ffffffff")
    assert decode_value(data) == v


@pytest.mark.parametrize("data", [
    b"", b"\x00", bytes.fromhex("0002") + bytes(40), V1_FIXTURE[:-3], V0_FIXTURE[:30],
])
def test_truncated_or_unknown_values_raise(data: bytes) -> None:
    with pytest.raises(TxnCodecError):
        decode_value(data)


def test_metadata_round_trip_through_value() -> None:
    meta = TxnMetadata("t1", 42, 3, 60_000, TxnState.ONGOING, 2000, 1000,
                       {("x", 1), ("x", 0), ("y", 5)}, client_transaction_version=2)
    value = to_value(meta)
    assert value.partitions == (("x", (0, 1)), ("y", (5,)))
    back = from_value("t1", decode_value(encode_value(value)))
    assert back == meta
    one = TxnMetadata("t1", 42, 3, 60_000, TxnState.PREPARE_COMMIT, 2000, 1000,
                      {TopicPartition("x", 7)})
    assert to_value(one).partitions == (("x", (7,)),)
    assert from_value("t1", decode_value(encode_value(to_value(one)))) == one


def test_empty_state_writes_null_partitions() -> None:
    meta = TxnMetadata("t1", 42, 0, 60_000, TxnState.EMPTY, 2000)
    assert to_value(meta).partitions is None


@pytest.mark.parametrize("state", [TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE])
def test_states_never_written(state: TxnState) -> None:
    with pytest.raises(ValueError):
        to_value(TxnMetadata("t1", 42, 0, 60_000, state, 2000))


def test_last_epoch_derived_for_version_2_end() -> None:
    # PrepareCommit written by a version-2 EndTxn at epoch 4: the client's epoch was 4.
    v = TxnLogValue(42, 5, 1000, 2, (("t", (0,)),), 1, 1, prev_producer_id=42,
                    client_transaction_version=2)
    assert from_value("t", v).last_producer_epoch == 4
    # CompleteCommit after the id rotated on overflow: the client had epoch 32766 on id 42.
    v = TxnLogValue(43, 0, 1000, 4, (), 1, 1, prev_producer_id=42, client_transaction_version=2)
    assert from_value("t", v).last_producer_epoch == 32766
    # Version 0 clients: no retry identity.
    v = TxnLogValue(42, 5, 1000, 4, (), 1, 1)
    assert from_value("t", v).last_producer_epoch == -1


# -- KIP-939: NextProducerEpoch ------------------------------------------------------------------


def test_next_producer_epoch_is_tag_3() -> None:
    # The seed gives NextProducerEpoch tag 2, which Kafka's schema (and this codec) already use
    # for ClientTransactionVersion: it goes on tag 3.
    v = TxnLogValue(42, 32766, -1, 1, (("t", (0,)),), 1, 1, next_producer_id=73,
                    client_transaction_version=2, next_producer_epoch=32767)
    data = encode_value(v)
    assert data.endswith(bytes.fromhex("03" "0108" "0000000000000049" "0202" "0002"
                                       "0302" "7fff"))
    assert decode_value(data) == v
    assert data[12:16] == bytes.fromhex("ffffffff")  # TransactionTimeoutMs -1: 2PC


def test_next_producer_id_without_epoch_reads_as_epoch_0() -> None:
    # Written before KIP-939: an overflow's NextProducerId always came with epoch 0.
    v = TxnLogValue(9, 32767, 5, 2, (("a", (2,)),), 1, 2, next_producer_id=12,
                    client_transaction_version=2)
    meta = from_value("t", decode_value(encode_value(v)))
    assert (meta.next_producer_id, meta.next_producer_epoch) == (12, 0)


@pytest.mark.parametrize(("value", "client"), [
    # PrepareCommit of a same-id version-2 EndTxn (no PrevProducerId): the client had epoch 4.
    (TxnLogValue(42, 5, 1000, 2, (("t", (0,)),), 1, 1, client_transaction_version=2), (42, 4)),
    # The vanilla overflow, Prepare and Complete (the seed's first example).
    (TxnLogValue(42, 32767, 1000, 2, (("t", (0,)),), 1, 1, next_producer_id=85,
                 client_transaction_version=2, next_producer_epoch=0), (42, 32766)),
    (TxnLogValue(85, 0, 1000, 4, (), 1, 1, prev_producer_id=42, client_transaction_version=2),
     (42, 32766)),
    # A kept transaction's commit by 73/7: Prepare (73 goes on with 8), then Complete.
    (TxnLogValue(42, 6, -1, 2, (("t", (0,)),), 1, 1, prev_producer_id=73, next_producer_id=73,
                 client_transaction_version=2, next_producer_epoch=8), (73, 7)),
    (TxnLogValue(73, 8, -1, 4, (), 1, 1, client_transaction_version=2), (73, 7)),
    # The coordinator's own abort (timeout, fence) is written with version 0: no retry.
    (TxnLogValue(42, 6, 1000, 5, (), 1, 1), (-1, -1)),
])
def test_retry_identity_derived_from_the_record(value: TxnLogValue,
                                                client: tuple[int, int]) -> None:
    meta = from_value("t", value)
    assert (meta.last_producer_id, meta.last_producer_epoch) == client
