"""A compacted topic keeps the newest value per key, so a client's record without a key is
refused (issue 13, item 6), as Kafka's LogValidator refuses it: INVALID_RECORD naming each keyless
record by its index in its batch, and nothing of the request is written."""

from __future__ import annotations

import dataclasses

import pytest

from exactly.log.config import LogConfig
from exactly.log.errors import InvalidRecordError
from exactly.protocol.records import COMPRESSION_GZIP, Record, build_batch

COMPACTED = dataclasses.replace(LogConfig(), cleanup_policy="compact")


def _batch(*keys: bytes | None, compression: int = 0) -> bytes:
    return build_batch([Record(key, b"value") for key in keys], timestamp=1000,
                       compression=compression)


@pytest.mark.parametrize("compression", [0, COMPRESSION_GZIP])
def test_keyless_records_are_refused_with_their_indexes(open_log, compression) -> None:
    plog = open_log(COMPACTED)
    with pytest.raises(InvalidRecordError) as refused:
        plog.append(_batch(b"a", None, b"c", None, compression=compression), from_client=True)
    reason = "Compacted topic cannot accept message without key in topic partition t-0."
    assert refused.value.record_errors == ((1, reason), (3, reason))
    assert "2 record errors" in str(refused.value)
    assert plog.log_end_offset == 0  # nothing of the batch was written


def test_every_batch_of_the_request_is_checked_and_nothing_written(open_log) -> None:
    plog = open_log(COMPACTED)
    with pytest.raises(InvalidRecordError) as refused:
        plog.append(_batch(b"a") + _batch(None), from_client=True)
    assert [index for index, _ in refused.value.record_errors] == [0]
    assert plog.log_end_offset == 0


def test_keyed_records_and_other_policies_are_written(open_log, tmp_path) -> None:
    plog = open_log(COMPACTED)
    assert plog.append(_batch(b"a", b"b"), from_client=True).base_offset == 0
    assert plog.log_end_offset == 2
    both = open_log(dataclasses.replace(LogConfig(), cleanup_policy="compact,delete"), name="u-0")
    with pytest.raises(InvalidRecordError):
        both.append(_batch(None), from_client=True)
    plain = open_log(LogConfig(), name="v-0")  # cleanup.policy=delete: keys are optional
    assert plain.append(_batch(None), from_client=True).base_offset == 0


def test_the_brokers_own_writes_are_not_decoded_again(open_log) -> None:
    # The coordinators write keyed records; only a client's produce is checked.
    plog = open_log(COMPACTED)
    assert plog.append(_batch(None)).base_offset == 0
