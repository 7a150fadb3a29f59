"""The Prometheus endpoint (metrics.listen) of a real broker process, scraped over HTTP: while a
confluent-kafka transaction is open; after producing, consuming in classic, consumer-protocol
and share groups, and requests that fail; and the Grafana dashboard in docs/ checked against
what the broker exports."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.produce.v11 import response as produce_v11
from prometheus_client.parser import text_string_to_metric_families

from exactly.client.admin import Admin, NewTopic
from exactly.protocol import fast_responses
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server import metrics
from exactly.testing import EmbeddedBroker
from tests.helpers.server.acl.wire import create_topic
from tests.helpers.share.helpers import poll_until, produce, set_group_configs, share_consumer
from tests.paths import DOCS
from tests.rawclient import RawConnection

TOPIC = "metrics-txn"
LAG_TOPIC = "metrics-lag"
DASHBOARD = DOCS / "grafana-dashboard.json"
INTERNAL = ("__consumer_offsets", "__transaction_state", "__share_group_state")
# Short group timers: consumers join, and share groups deliver, within a test.
SETTINGS = {
    "metrics.listen": "127.0.0.1:0",
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "300",
    "group.share.min.heartbeat.interval.ms": "200",
}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
_METRICS_LINE = re.compile(r"Exactly metrics on (?P<url>http://\S+)")


def _metrics_url(broker: EmbeddedBroker) -> str:
    for line in broker.stdout_lines:
        if m := _METRICS_LINE.search(line):
            return m["url"]
    raise AssertionError(f"the broker printed no metrics address: {broker.stdout_lines}")


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def metrics_broker():
    with EmbeddedBroker(settings=SETTINGS) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 2)])
        yield broker


def _open_transaction(broker: EmbeddedBroker, transactional_id: str) -> Producer:
    """A confluent-kafka producer with a transaction open over TOPIC's partition 0."""
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": transactional_id})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(TOPIC, b"open", partition=0)
    assert producer.flush(10) == 0
    return producer


def test_open_transaction_shows_in_the_metrics(metrics_broker):
    url = _metrics_url(metrics_broker)
    producer = _open_transaction(metrics_broker, "metrics-open")
    time.sleep(0.05)

    samples = _scrape(url)
    assert samples[("exactly_transaction_active_open_time_max_ms", ())] > 0
    assert samples[("exactly_transactions", (("state", "Ongoing"),))] >= 1
    assert samples[("exactly_partition_lso_lag", (("partition", "0"), ("topic", TOPIC)))] >= 1
    assert samples[("exactly_partition_lso_lag", (("partition", "1"), ("topic", TOPIC)))] == 0

    producer.commit_transaction(10)
    samples = _scrape(url)
    assert samples[("exactly_partition_lso_lag", (("partition", "0"), ("topic", TOPIC)))] == 0
    assert samples[("exactly_transactions", (("state", "CompleteCommit"),))] >= 1
    assert samples[("exactly_transactions", (("state", "Ongoing"),))] == 0
    assert samples[("exactly_transaction_active_open_time_max_ms", ())] == 0


def test_only_metrics_path_is_served(metrics_broker):
    base = _metrics_url(metrics_broker).rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(base + "/nothing", timeout=10)
    assert caught.value.code == 404


def test_request_counters_after_traffic(metrics_broker):
    url = _metrics_url(metrics_broker)
    producer = Producer({"bootstrap.servers": metrics_broker.bootstrap})
    producer.produce(TOPIC, b"x", partition=1)
    assert producer.flush(10) == 0
    samples = _scrape(url)
    assert samples[("exactly_requests_total", (("api", "produce"),))] >= 1
    assert samples[("exactly_requests_total", (("api", "api_versions"),))] >= 1
    assert samples[("exactly_request_duration_seconds_count", (("api", "produce"),))] >= 1
    assert samples[("exactly_bytes_in_total", ())] > 0
    assert samples[("exactly_bytes_out_total", ())] > 0


def test_observe_request_feeds_the_registry():
    def value(name: str, labels: dict[str, str] | None = None) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    before = value("exactly_requests_total", {"api": "describe_acls"})
    bytes_in = value("exactly_bytes_in_total")
    metrics.observe_request(29, 0.002, 100, 250)
    assert value("exactly_requests_total", {"api": "describe_acls"}) == before + 1
    assert value("exactly_request_duration_seconds_count", {"api": "describe_acls"}) >= 1
    assert value("exactly_bytes_in_total") == bytes_in + 100


def test_timed_records_a_handled_request():
    async def handling() -> bytes:
        return b"x" * 42

    out_before = metrics.REGISTRY.get_sample_value("exactly_bytes_out_total") or 0.0
    assert asyncio.run(metrics.timed(61, 10, handling())) == b"x" * 42
    assert metrics.REGISTRY.get_sample_value("exactly_requests_total",
                                             {"api": "describe_producers"}) >= 1
    assert metrics.REGISTRY.get_sample_value("exactly_bytes_out_total") == out_before + 42


def test_metrics_are_off_unless_set(broker):
    assert not any(_METRICS_LINE.search(line) for line in broker.stdout_lines)


def test_bad_metrics_listen_is_refused():
    from exactly.server.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="metrics.listen"):
        BrokerConfig.from_sources(None, {"metrics.listen": "nowhere"})
    assert BrokerConfig.from_sources(None, {})["metrics.listen"] == ""


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _wait_for(url: str, done: Callable[[Samples], bool], what: str,
              timeout: float = 15.0) -> Samples:
    """Scrape until `done(samples)`: what the broker counts after answering comes a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        samples = _scrape(url)
        if done(samples):
            return samples
        assert time.monotonic() < deadline, f"{what}: not seen in the metrics within {timeout}s"
        time.sleep(0.1)


def _produce(broker: EmbeddedBroker, topic: str, count: int, partition: int = 0) -> None:
    produce(broker, topic, [b"v%d" % i for i in range(count)], partition)


@pytest.fixture(scope="module")
def busy_broker(metrics_broker):
    """The broker after some of everything: records in LAG_TOPIC, a classic group that
    committed offset 2, a consumer-protocol group and a share group that read all 5 records,
    then 2 more records; and a failed request (CreateTopics of a topic that exists)."""
    b = metrics_broker
    with Admin({"bootstrap.servers": b.bootstrap}) as admin:
        admin.create_topics([NewTopic(LAG_TOPIC, 1)])
    _produce(b, LAG_TOPIC, 5)

    classic = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lag-classic",
                        "enable.auto.commit": False})
    classic.commit(offsets=[KafkaTopicPartition(LAG_TOPIC, 0, 2)], asynchronous=False)
    classic.close()

    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lag-consumer",
                         "group.protocol": "consumer", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([LAG_TOPIC])
    got = 0
    deadline = time.monotonic() + 20
    while got < 5:
        assert time.monotonic() < deadline, "the consumer-protocol group read nothing"
        got += sum(1 for m in consumer.consume(10, 0.2) if m.error() is None)
    consumer.commit(asynchronous=False)
    consumer.close()

    set_group_configs(b, "lag-share", share_auto_offset_reset="earliest")
    sharer = share_consumer(b, "lag-share", LAG_TOPIC)
    seen: list[int] = []
    poll_until([sharer], lambda: len(seen) >= 5,
               on_message=lambda _, m: seen.append(m.offset()))
    sharer.commit_sync(10)  # acknowledges what it delivered
    sharer.close()
    _produce(b, LAG_TOPIC, 2)
    conn = RawConnection(b.host, b.port)
    try:
        assert create_topic(conn, LAG_TOPIC, validate_only=False) == \
            ErrorCode.topic_already_exists
    finally:
        conn.close()
    return b


def test_partition_offsets_size_and_lso(busy_broker):
    topic = "metrics-offsets"
    with Admin({"bootstrap.servers": busy_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    _produce(busy_broker, topic, 3, partition=1)
    admin = AdminClient({"bootstrap.servers": busy_broker.bootstrap})
    (future,) = admin.delete_records([KafkaTopicPartition(topic, 1, 1)]).values()
    future.result(10)
    samples = _scrape(_metrics_url(busy_broker))

    def value(name: str, topic: str, partition: int) -> float:
        return samples[(name, _labels(topic=topic, partition=str(partition)))]

    assert value("exactly_partition_log_end_offset", LAG_TOPIC, 0) == 7
    assert value("exactly_partition_last_stable_offset", LAG_TOPIC, 0) == 7
    assert value("exactly_partition_log_start_offset", LAG_TOPIC, 0) == 0
    assert value("exactly_partition_size_bytes", LAG_TOPIC, 0) > 7 * len(b"v0")
    assert value("exactly_partition_log_start_offset", topic, 1) == 1
    assert value("exactly_partition_log_end_offset", topic, 1) == 3
    assert value("exactly_partition_size_bytes", topic, 1) > 0
    for name in ("log_start_offset", "log_end_offset", "last_stable_offset", "size_bytes"):
        assert value(f"exactly_partition_{name}", topic, 0) == 0


def test_internal_topics_are_summarized(busy_broker):
    samples = _scrape(_metrics_url(busy_broker))
    per_partition = [(name, labels) for name, labels in samples
                     if ("partition", "0") in labels and dict(labels).get("group") is None]
    assert per_partition, "no per-partition metric at all"
    assert not [key for key in per_partition if dict(key[1])["topic"].startswith("__")]
    for topic in ("__consumer_offsets", "__transaction_state"):
        assert samples[("exactly_internal_topic_partitions", _labels(topic=topic))] == 50
        assert samples[("exactly_internal_topic_lso_lag_max", _labels(topic=topic))] == 0
    # The groups wrote their offsets and members there.
    assert samples[("exactly_internal_topic_size_bytes", _labels(topic=INTERNAL[0]))] > 0
    assert samples[("exactly_internal_topic_log_end_offsets", _labels(topic=INTERNAL[0]))] > 0
    assert samples[("exactly_internal_topic_size_bytes", _labels(topic=INTERNAL[2]))] > 0


def test_consumer_group_lag(busy_broker):
    samples = _scrape(_metrics_url(busy_broker))
    where = {"topic": LAG_TOPIC, "partition": "0"}
    assert samples[("exactly_consumer_group_lag", _labels(group="lag-classic", **where))] == 5
    assert samples[("exactly_consumer_group_lag", _labels(group="lag-consumer", **where))] == 2
    assert samples[("exactly_share_group_lag", _labels(group="lag-share", **where))] == 2


def test_errors_by_api_and_error_code(busy_broker):
    url = _metrics_url(busy_broker)
    before = _scrape(url)
    conn = RawConnection(busy_broker.host, busy_broker.port)
    try:
        # A top-level code, in an answer encoded by hand (fast_responses)
        end = conn.request(ApiKey.END_TXN, 3, transactional_id="metrics-nosuch", producer_id=7,
                           producer_epoch=0, committed=True)
        # and a per-topic one, in a kio answer.
        assert create_topic(conn, LAG_TOPIC, validate_only=False) == \
            ErrorCode.topic_already_exists
    finally:
        conn.close()
    assert end.error_code != ErrorCode.none
    end_key = ("exactly_request_errors_total",
               _labels(api="end_txn", error=end.error_code.name.upper()))
    exists_key = ("exactly_request_errors_total",
                  _labels(api="create_topics", error="TOPIC_ALREADY_EXISTS"))
    after = _scrape(url)
    assert after[end_key] - before.get(end_key, 0) == 1
    assert after[exists_key] - before.get(exists_key, 0) == 1
    assert not [key for key in after
                if key[0] == "exactly_request_errors_total" and ("error", "NONE") in key[1]]


def test_connections_per_listener(busy_broker):
    url = _metrics_url(busy_broker)
    plaintext = _labels(listener="PLAINTEXT")
    accepted = ("exactly_connections_accepted_total", plaintext)
    closed = ("exactly_connections_closed_total", plaintext)
    before = _scrape(url)
    conn = RawConnection(busy_broker.host, busy_broker.port)
    conn.request(ApiKey.API_VERSIONS, 3, client_software_name="metrics-test",
                 client_software_version="1")
    opened = _scrape(url)  # the scrape itself is not a Kafka connection
    assert opened[accepted] >= before[accepted] + 1
    assert opened[("exactly_connections_open", plaintext)] >= 1
    assert opened[("exactly_connections_open", plaintext)] == opened[accepted] - opened[closed]
    conn.close()
    _wait_for(url, lambda s: s[closed] >= opened[closed] + 1, "the closed connection")


def test_count_errors_counts_each_code_but_none():
    def partition(index: int, code: ErrorCode) -> produce_v11.PartitionProduceResponse:
        return produce_v11.PartitionProduceResponse(index=index, error_code=code, base_offset=-1,
                                                    record_errors=())

    answer = produce_v11.ProduceResponse(responses=(produce_v11.TopicProduceResponse(
        name="t", partition_responses=(partition(0, ErrorCode.none),
                                       partition(1, ErrorCode.not_leader_or_follower),
                                       partition(2, ErrorCode.not_leader_or_follower))),))
    key = {"api": "produce", "error": "NOT_LEADER_OR_FOLLOWER"}
    before = metrics.REGISTRY.get_sample_value("exactly_request_errors_total", key) or 0.0
    metrics.count_errors(ApiKey.PRODUCE, 11, answer)
    assert metrics.REGISTRY.get_sample_value("exactly_request_errors_total", key) == before + 2
    # The same answer encoded by hand counts the same.
    body = fast_responses.produce(11, [("t", None, [(1, ErrorCode.not_leader_or_follower, -1, -1,
                                                     None, (), -1)])])
    metrics.count_errors(ApiKey.PRODUCE, 11, body)
    assert metrics.REGISTRY.get_sample_value("exactly_request_errors_total", key) == before + 3
    assert metrics.REGISTRY.get_sample_value("exactly_request_errors_total",
                                             {"api": "produce", "error": "NONE"}) is None


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids must be unique"
    queries = []
    for panel in panels:
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys()
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["type"] == "timeseries"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        queries += [t["expr"] for t in panel["targets"]]
    titles = " | ".join(p["title"].lower() for p in panels)
    for topic in ("throughput", "latency", "errors", "connections", "open transactions",
                  "transaction age", "lso lag", "consumer group lag"):
        assert topic in titles, f"no panel about {topic}: {titles}"
    return queries


def test_grafana_dashboard_queries_what_the_broker_exports(busy_broker):
    url = _metrics_url(busy_broker)
    producer = _open_transaction(busy_broker, "metrics-dashboard")
    try:
        exported = {name for name, _ in _scrape(url)}
    finally:
        producer.abort_transaction(10)
    queried = {name for expr in _dashboard_queries()
               for name in re.findall(r"\bexactly_[a-z0-9_]+", expr)}
    assert len(queried) >= 15
    assert queried - exported == set(), "the dashboard queries metrics the broker does not export"
