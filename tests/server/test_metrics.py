"""The Prometheus endpoint (metrics.listen) of a real broker process, scraped over HTTP while a
confluent-kafka transaction is open."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from exactly.client.admin import Admin, NewTopic
from exactly.server import metrics
from exactly.testing import EmbeddedBroker

TOPIC = "metrics-txn"
_METRICS_LINE = re.compile(r"Exactly metrics on (?P<url>http://\S+)")


def _metrics_url(broker: EmbeddedBroker) -> str:
    for line in broker.stdout_lines:
        if m := _METRICS_LINE.search(line):
            return m["url"]
    raise AssertionError(f"the broker printed no metrics address: {broker.stdout_lines}")


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def metrics_broker():
    with EmbeddedBroker(settings={"metrics.listen": "127.0.0.1:0"}) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 2)])
        yield broker


def test_open_transaction_shows_in_the_metrics(metrics_broker):
    url = _metrics_url(metrics_broker)
    producer = Producer({"bootstrap.servers": metrics_broker.bootstrap,
                         "transactional.id": "metrics-open"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(TOPIC, b"open", partition=0)
    assert producer.flush(10) == 0
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
