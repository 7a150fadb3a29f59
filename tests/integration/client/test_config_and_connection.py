"""The client's foundation: ClientConfig, BrokerConnection (ApiVersions negotiation, version
choice, timeouts, connection loss) and Cluster's coordinator lookup, over TCP against Exactly's
broker and librdkafka's mock cluster."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from exactly.client.admin import Admin, NewTopic
from exactly.client.cluster import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, Cluster, make_request
from exactly.client.config import ClientConfig, as_config
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    ConfigError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from exactly.protocol.apis import SUPPORTED, ApiKey, advertised, build, request_class
from exactly.testing import EmbeddedBroker

# -- ClientConfig ------------------------------------------------------------------------------


def test_config_defaults_and_types():
    config = ClientConfig({"bootstrap.servers": "localhost:9092"})
    assert config["acks"] == -1 and config["enable.idempotence"] is True
    assert config["isolation.level"] == "read_committed"
    assert config["transactional.id"] is None and config["compression.type"] == "none"
    assert config["request.timeout.ms"] == 30_000
    # Properties-file strings are parsed to their types; keyword overrides use underscores.
    config = ClientConfig({"bootstrap.servers": "h:1", "linger.ms": "20", "acks": "1",
                           "enable.idempotence": "false"}, batch_size=1000)
    assert (config["linger.ms"], config["acks"], config["enable.idempotence"],
            config["batch.size"]) == (20, 1, False, 1000)
    assert config.with_overrides(linger_ms=0)["linger.ms"] == 0 and config["linger.ms"] == 20
    assert as_config(config) is config
    assert as_config({"bootstrap.servers": "h:1"})["client.id"] == "exactly"


def test_config_unknown_key_is_named():
    with pytest.raises(ConfigError, match="'lingerr.ms'") as caught:
        ClientConfig({"bootstrap.servers": "h:1", "lingerr.ms": 5})
    assert "linger.ms" in str(caught.value)  # the known keys are listed
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("key", "value", "why"), [
    ("linger.ms", "soon", "linger.ms"),
    ("linger.ms", -1, "at least 0"),
    ("max.in.flight.requests.per.connection", 6, "at most 5"),
    ("acks", "2", "all, -1, 0 or 1"),
    ("compression.type", "brotli", "one of none, gzip"),
    ("isolation.level", "read_some", "read_committed"),
    ("enable.idempotence", "maybe", "true or false"),
    ("batch.size", True, "not a boolean"),
])
def test_config_bad_values(key, value, why):
    with pytest.raises(ConfigError, match=why) as caught:
        ClientConfig({"bootstrap.servers": "h:1", key: value})
    assert key in str(caught.value)


def test_config_required_and_dependent_keys():
    with pytest.raises(ConfigError, match="bootstrap.servers is required"):
        ClientConfig({})
    with pytest.raises(ConfigError, match="needs a transactional.id"):
        ClientConfig({"bootstrap.servers": "h:1", "transaction.two.phase.commit.enable": True})


def test_config_bootstrap_parsing():
    config = ClientConfig({"bootstrap.servers": " a:9092, PLAINTEXT://b.example:19092,[::1]:9093 "})
    assert config.bootstrap == [("a", 9092), ("b.example", 19092), ("::1", 9093)]
    for bad in ("nohost", "a:port", ":9092"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            _ = ClientConfig({"bootstrap.servers": bad}).bootstrap


# -- BrokerConnection --------------------------------------------------------------------------


def _split(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


async def _connect(bootstrap: str, **kwargs) -> BrokerConnection:
    host, port = _split(bootstrap)
    return await BrokerConnection.connect(host, port, **kwargs)


def test_negotiation_with_exactly(exactly_broker):
    async def main() -> None:
        conn = await _connect(exactly_broker.bootstrap)
        try:
            # Exactly answers ApiVersions v3 with its table and its finalized features.
            assert conn._broker_versions == advertised()
            assert "transaction.version" in conn.finalized_features
            # The highest version both sides speak.
            assert conn.version(ApiKey.PRODUCE) == 12  # client 3-12, broker 3-13
            assert conn.version(ApiKey.INIT_PRODUCER_ID) == min(6, SUPPORTED[ApiKey.INIT_PRODUCER_ID][1])
            assert conn.version(ApiKey.FETCH, max_version=7) == 7
            assert conn.supports(ApiKey.LIST_TRANSACTIONS)
            conn._broker_versions[ApiKey.PRODUCE] = (0, 2)  # as an old broker would say
            with pytest.raises(UnsupportedVersionError, match=r"v0-v2"):
                conn.version(ApiKey.PRODUCE)
            # A working request after negotiation.
            response = await conn.send(build(request_class(ApiKey.API_VERSIONS, 0)))
            assert response.error_code == 0
        finally:
            await conn.close()

    asyncio.run(main())


def test_negotiation_with_the_mock_falls_back_to_v0(mock_bootstrap):
    async def main() -> None:
        conn = await _connect(mock_bootstrap)
        try:
            # The mock refuses ApiVersions v3 with a body that is not v0's layout; the
            # connection asked again with v0 and got the table.
            assert conn._broker_versions[ApiKey.API_VERSIONS][1] < 3
            assert conn.version(ApiKey.PRODUCE) == min(12, conn.broker_max_version(ApiKey.PRODUCE))
            assert conn.version(ApiKey.FIND_COORDINATOR) == min(4, conn.broker_max_version(
                ApiKey.FIND_COORDINATOR))
            assert not conn.supports(ApiKey.CREATE_TOPICS)
            with pytest.raises(UnsupportedVersionError, match="does not offer create_topics"):
                conn.version(ApiKey.CREATE_TOPICS)
            response = await conn.send(make_request(
                conn, ApiKey.METADATA, topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False, include_cluster_authorized_operations=False))
            assert len(response.brokers) == 1
        finally:
            await conn.close()

    asyncio.run(main())


def test_connect_to_nothing_is_a_connection_error(exactly_broker):
    async def main() -> None:
        with pytest.raises(KafkaConnectionError, match="cannot connect to 127.0.0.1:1"):
            await BrokerConnection.connect("127.0.0.1", 1)

    asyncio.run(main())


def _long_fetch(conn: BrokerConnection, topic: str, wait_ms: int) -> object:
    """A Fetch the broker holds for `wait_ms`: nothing to read at the end of an empty partition."""
    m = __import__(request_class(ApiKey.FETCH, 12).__module__, fromlist=["_"])
    return make_request(
        conn, ApiKey.FETCH, max_version=12, replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1, max_bytes=1 << 20, isolation_level=1, session_id=0, session_epoch=-1,
        topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")


def test_request_timeout(exactly_broker):
    with Admin({"bootstrap.servers": exactly_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("conn-timeout", 1)])

    async def main() -> None:
        conn = await _connect(exactly_broker.bootstrap)
        conn.request_timeout = 0.3  # request.timeout.ms, set after a negotiation at any speed
        try:
            with pytest.raises(KafkaTimeoutError, match="fetch v12 .* got no answer in time"):
                await conn.send(_long_fetch(conn, "conn-timeout", 800))
            with pytest.raises(KafkaTimeoutError):
                await conn.send(_long_fetch(conn, "conn-timeout", 800), timeout=0.1)
            # The late answers (they come in order, after ~1.6 s) are dropped; the connection
            # goes on working.
            assert not conn.closed
            response = await conn.send(_long_fetch(conn, "conn-timeout", 0), timeout=30)
            assert response.responses[0].partitions[0].high_watermark == 0
        finally:
            await conn.close()

    asyncio.run(main())


def test_each_request_times_out_at_its_own_deadline(exactly_broker):
    """The connection's one timer watches every request's deadline: a request with a shorter
    timeout sent after a longer one times out first while the other gets its answer, and of
    two pending requests each times out at its own deadline."""
    with Admin({"bootstrap.servers": exactly_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("conn-deadlines", 1)])

    async def main() -> None:
        conn = await _connect(exactly_broker.bootstrap)
        try:
            waits = asyncio.ensure_future(conn.send(_long_fetch(conn, "conn-deadlines", 800),
                                                    timeout=30))
            with pytest.raises(KafkaTimeoutError):
                await conn.send(_long_fetch(conn, "conn-deadlines", 800), timeout=0.1)
            assert not waits.done()
            assert (await waits).responses[0].partitions[0].high_watermark == 0
            first = asyncio.ensure_future(conn.send(_long_fetch(conn, "conn-deadlines", 800),
                                                    timeout=0.1))
            second = asyncio.ensure_future(conn.send(_long_fetch(conn, "conn-deadlines", 800),
                                                     timeout=0.3))
            with pytest.raises(KafkaTimeoutError):
                await first
            assert not second.done()
            with pytest.raises(KafkaTimeoutError):
                await second
            assert not conn.closed
        finally:
            await conn.close()

    asyncio.run(main())


def test_connection_loss_fails_pending_requests():
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("conn-loss", 1)])

        async def main() -> None:
            conn = await _connect(broker.bootstrap)
            pending = asyncio.ensure_future(conn.send(_long_fetch(conn, "conn-loss", 20_000)))
            await asyncio.sleep(0.2)  # the request is on the wire
            await asyncio.to_thread(broker.kill)
            with pytest.raises(KafkaConnectionError, match="lost"):
                await pending
            assert conn.closed
            with pytest.raises(KafkaConnectionError, match="closed"):
                await conn.send(build(request_class(ApiKey.API_VERSIONS, 0)))
            await conn.close()

        asyncio.run(main())


# -- Cluster -----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["exactly", "mock"])
def test_cluster_coordinator_for_group_and_transaction_keys(which, request):
    bootstrap = (request.getfixturevalue("exactly_broker").bootstrap if which == "exactly"
                 else request.getfixturevalue("mock_bootstrap"))

    async def main() -> None:
        cluster = Cluster(ClientConfig({"bootstrap.servers": bootstrap}))
        try:
            md = await cluster.refresh([])
            (node,) = md.brokers
            group = await cluster.coordinator(COORDINATOR_GROUP, "some-group")
            txn = await cluster.coordinator(COORDINATOR_TRANSACTION, "some-txn")
            assert group.node_id == txn.node_id == node
            assert not group.closed and group is txn  # one connection per broker
            # Cached, and found again once forgotten.
            assert await cluster.coordinator(COORDINATOR_GROUP, "some-group") is group
            cluster.forget_coordinator(COORDINATOR_GROUP, "some-group")
            assert (await cluster.coordinator(COORDINATOR_GROUP, "some-group")).node_id == node
        finally:
            await cluster.close()

    asyncio.run(main())
