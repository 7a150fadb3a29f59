"""A request whose handling fails anywhere — in its handler, in encoding its answer, in the
metrics' timing around it — closes the connection (the client cannot match a lost answer) and
is logged with the API, once. Before, a failure outside the handler itself (a bug in the metrics
wrapper did it) closed connections without a word. The fault point `network.before_encode`
fails a request after its handler, before its answer is encoded."""

from __future__ import annotations

import pytest

from exactly.protocol.apis import ApiKey
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection


@pytest.mark.parametrize("metrics", [False, True], ids=["plain", "metrics-on"])
def test_a_failure_after_the_handler_is_logged_and_closes(metrics: bool) -> None:
    settings = {"metrics.listen": "127.0.0.1:0"} if metrics else {}
    # @2: the first request (ApiVersions) is answered, the second fails.
    with EmbeddedBroker(settings=settings,
                        env={"EXACTLY_FAILPOINTS": "network.before_encode=raise@2"}) as broker:
        conn = RawConnection(broker.host, broker.port)
        versions = conn.request(ApiKey.API_VERSIONS, 3, client_software_name="raw",
                                client_software_version="1")
        assert versions.error_code == 0
        conn.send_bytes(conn.frame(ApiKey.METADATA, 12, _metadata_request()))
        assert conn.is_closed_by_peer()
        conn.close()
        log = broker.log_text()
    lines = [line for line in log.splitlines() if "closing connection" in line]
    assert len(lines) == 1 and "handling metadata v12 failed" in lines[0], lines
    assert "FailpointError" in log


def _metadata_request():
    from exactly.protocol.apis import request_class

    return request_class(ApiKey.METADATA, 12)(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
