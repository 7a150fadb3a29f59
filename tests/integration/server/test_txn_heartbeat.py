"""KIP-1309 on the wire, with a raw client over TCP: ApiVersions advertises TxnHeartbeat (a draft
API, exactly.protocol.drafts) and InitProducerId v7; a session timeout announced in v7 aborts a
silent producer's transaction (TxnHeartbeat then answers PRODUCER_FENCED) while heartbeats keep
another open; the identity is checked as EndTxn checks it; and the KIP's ACL, WRITE on the
TRANSACTIONAL_ID, guards it."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest

from exactly.protocol.apis import ApiKey
from exactly.protocol.drafts import txn_heartbeat
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.server.acl import wire
from tests.integration.server.test_metrics import _metrics_url, _scrape
from tests.rawclient import RawConnection

SESSION_MS = 600
TIMEOUT = datetime.timedelta(minutes=1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    settings = {"log.flush.policy": "os", "metrics.listen": "127.0.0.1:0",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("txn-heartbeat"),
                        settings=settings) as b:
        yield b


@pytest.fixture
def conn(broker: EmbeddedBroker) -> Iterator[RawConnection]:
    with contextlib.closing(RawConnection(broker.host, broker.port)) as raw:
        yield raw


def init(conn: RawConnection, txn_id: str, session_ms: int = SESSION_MS) -> Any:
    r = conn.request(ApiKey.INIT_PRODUCER_ID, 7, transactional_id=txn_id,
                     transaction_timeout=TIMEOUT, transaction_session_timeout_ms=session_ms)
    assert r.error_code == ErrorCode.none, r
    return r


def heartbeat(conn: RawConnection, txn_id: str, pid: int, epoch: int) -> ErrorCode:
    return conn.request(ApiKey.TXN_HEARTBEAT, 0, transactional_id=txn_id, producer_id=pid,
                        producer_epoch=epoch).error_code


def state(conn: RawConnection, txn_id: str) -> str:
    r = conn.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(txn_id,))
    return str(r.transaction_states[0].transaction_state)


def test_api_versions_advertise_txn_heartbeat_and_init_producer_id_v7(conn: RawConnection,
                                                                     ) -> None:
    r = conn.request(ApiKey.API_VERSIONS, 3, client_software_name="raw",
                     client_software_version="0")
    versions = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert ApiKey.TXN_HEARTBEAT == txn_heartbeat.API_KEY
    assert versions[ApiKey.TXN_HEARTBEAT] == (0, 0)
    assert versions[ApiKey.INIT_PRODUCER_ID] == (0, 7)


def test_silent_producer_is_aborted_and_fenced_while_a_heartbeating_one_is_kept(
        broker: EmbeddedBroker, conn: RawConnection) -> None:
    create = wire.create_topic(conn, "hb-raw", validate_only=False)
    assert create in (ErrorCode.none, ErrorCode.topic_already_exists)
    ids = {}
    for txn_id in ("hb-silent", "hb-beating"):
        r = init(conn, txn_id)
        ids[txn_id] = (r.producer_id, r.producer_epoch)
        assert heartbeat(conn, txn_id, *ids[txn_id]) == ErrorCode.none  # idle: fine
        assert wire.add_partitions(conn, txn_id, *ids[txn_id], "hb-raw") == ErrorCode.none
    deadline = time.monotonic() + 20  # transaction.timeout.ms is a minute
    while state(conn, "hb-silent") == "Ongoing":
        assert time.monotonic() < deadline, "the silent producer's transaction is still open"
        assert heartbeat(conn, "hb-beating", *ids["hb-beating"]) == ErrorCode.none
        time.sleep(SESSION_MS / 3 / 1000)
    assert state(conn, "hb-silent") in ("PrepareAbort", "CompleteAbort")
    assert state(conn, "hb-beating") == "Ongoing"
    assert heartbeat(conn, "hb-silent", *ids["hb-silent"]) == ErrorCode.producer_fenced
    assert wire.end_txn(conn, "hb-beating", *ids["hb-beating"], commit=True) == ErrorCode.none
    # Told as the transaction timeouts are: a log line and a metric, by reason.
    assert "event=txn_session_timeout transactional_id='hb-silent'" in \
        broker.log_path.read_text()
    samples = _scrape(_metrics_url(broker))
    assert samples[("exactly_transaction_expired_aborts_total", (("reason", "session"),))] == 1


def test_heartbeat_checks_the_identity(conn: RawConnection) -> None:
    r = init(conn, "hb-identity", session_ms=-1)
    pid, epoch = r.producer_id, r.producer_epoch
    assert heartbeat(conn, "hb-identity", pid, epoch) == ErrorCode.none
    assert heartbeat(conn, "hb-identity", pid + 1000, epoch) == \
        ErrorCode.invalid_producer_id_mapping
    assert heartbeat(conn, "hb-unknown", pid, epoch) == ErrorCode.invalid_producer_id_mapping
    assert heartbeat(conn, "", pid, epoch) == ErrorCode.invalid_request
    init(conn, "hb-identity")  # a newer session fences the older one
    assert heartbeat(conn, "hb-identity", pid, epoch) == ErrorCode.producer_fenced


def test_bad_session_timeout_is_invalid_transaction_timeout(conn: RawConnection) -> None:
    r = conn.request(ApiKey.INIT_PRODUCER_ID, 7, transactional_id="hb-bad",
                     transaction_timeout=TIMEOUT, transaction_session_timeout_ms=0)
    assert r.error_code == ErrorCode.invalid_transaction_timeout


def test_txn_heartbeat_needs_write_on_the_transactional_id(tmp_path) -> None:
    """With an authorizer: ANONYMOUS may write hb-open (no ACL covers it, and
    allow.everyone.if.no.acl.found is on) but not hb-alice (an ACL for alice covers it)."""
    settings = {"log.flush.policy": "os", "allow.everyone.if.no.acl.found": "true",
                "authorizer.class.name":
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with EmbeddedBroker(data_dir=tmp_path, settings=settings) as b:
        conn = RawConnection(b.host, b.port)
        try:
            open_id = init(conn, "hb-open")
            alice = init(conn, "hb-alice")
            assert wire.create_acls(conn, (wire.TXN, "hb-alice", wire.LITERAL, "User:alice",
                                           "*", 4, wire.ALLOW)) == [ErrorCode.none]  # 4: WRITE
            assert heartbeat(conn, "hb-alice", alice.producer_id, alice.producer_epoch) == \
                ErrorCode.transactional_id_authorization_failed
            assert heartbeat(conn, "hb-open", open_id.producer_id, open_id.producer_epoch) == \
                ErrorCode.none
        finally:
            conn.close()
