"""Fetch v4-v6 come from before fetch sessions (KIP-227): they carry no session id or epoch, and
the broker answers them like the later versions."""

from __future__ import annotations

import datetime

import pytest
from kio.static.primitive import i8, i32, i64

from exactly.protocol.apis import SUPPORTED, ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from tests.rawclient import RawConnection


@pytest.mark.parametrize("version", range(SUPPORTED[ApiKey.FETCH][0], 8))
def test_fetch_without_session_fields(broker, version):
    cls = request_class(ApiKey.FETCH, version)
    module = __import__(cls.__module__, fromlist=["_"])
    request = build(
        cls, replica_id=i32(-1), max_wait=datetime.timedelta(0), min_bytes=i32(0),
        max_bytes=i32(1 << 20), isolation_level=i8(1), session_id=i32(0), session_epoch=i32(-1),
        forgotten_topics_data=(), topics=(build(module.FetchTopic, topic="nowhere", partitions=(
            build(module.FetchPartition, partition=i32(0), fetch_offset=i64(0),
                  log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),))
    conn = RawConnection(broker.host, broker.port)
    conn.send_bytes(conn.frame(ApiKey.FETCH, version, request))
    answer = conn.read_response(ApiKey.FETCH, version)
    assert answer.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    conn.close()
