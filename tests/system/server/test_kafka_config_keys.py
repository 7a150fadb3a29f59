"""Kafka 4.4's broker config keys in Exactly's config (server/kafka_keys.py): a server.properties
copied from Kafka loads; each Kafka key Exactly does not declare is ignored with a logged reason,
accepted at Kafka's default only, or refused with what to do instead."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exactly.server.config import KEYS, BrokerConfig, ConfigError
from exactly.server.kafka_keys import DEFAULT_ONLY, REFUSED, ignored_reason
from exactly.testing import EmbeddedBroker

# Kafka 4.4's config/server.properties (KRaft, combined mode), comments left out.
KAFKA_SAMPLE = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafka_sample_server_properties_loads(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "server.properties"
    path.write_text(KAFKA_SAMPLE.format(log_dirs=tmp_path / "data"))
    with caplog.at_level(logging.WARNING, logger="exactly.config"):
        config = BrokerConfig.from_sources(path, {})
    assert [(lst.name, lst.port) for lst in config["listeners"]] == [("PLAINTEXT", 9092)]
    assert config["log.retention.check.interval.ms"] == 300000
    warned = caplog.text
    for key in ("process.roles", "controller.quorum.bootstrap.servers",
                "offsets.topic.replication.factor", "transaction.state.log.min.isr",
                "listener.security.protocol.map", "CONTROLLER://:9093"):
        assert key in warned, key
    assert "KRaft" in warned and "one replica per partition" in warned


def test_offsets_commit_timeout_is_a_known_key() -> None:
    """Kafka's offsets.commit.timeout.ms: accepted (it used to stop the broker as unknown),
    listed by DescribeConfigs with Kafka's default."""
    assert KEYS["offsets.commit.timeout.ms"].default == 5000
    config = BrokerConfig.from_sources(None, {"offsets.commit.timeout.ms": "7000"})
    assert config["offsets.commit.timeout.ms"] == 7000
    with pytest.raises(ConfigError, match="offsets.commit.timeout.ms"):
        BrokerConfig.from_sources(None, {"offsets.commit.timeout.ms": "0"})


def test_offsets_retention_check_interval_is_honoured() -> None:
    config = BrokerConfig.from_sources(None, {"offsets.retention.check.interval.ms": "1234"})
    assert config.group_config().offsets_retention_check_interval_ms == 1234


def test_a_plugin_class_is_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigError, match="create.topic.policy.class.name .*remove it"):
        BrokerConfig.from_sources(None, {"create.topic.policy.class.name": "com.example.P"})
    with pytest.raises(ConfigError, match="sasl.jaas.config.*sasl.plain.users"):
        BrokerConfig.from_sources(None, {"sasl.jaas.config": "x required;"})
    assert all(ignored_reason(k) is None for k in REFUSED)


def test_a_behaviour_key_is_accepted_at_kafkas_default_only() -> None:
    BrokerConfig.from_sources(None, {"log.cleanup.policy": "delete",
                                     "compression.type": "producer",
                                     "log.flush.interval.messages": "9223372036854775807"})
    with pytest.raises(ConfigError, match="log.cleanup.policy='compact'.*per topic"):
        BrokerConfig.from_sources(None, {"log.cleanup.policy": "compact"})
    with pytest.raises(ConfigError, match="log.flush.policy"):
        BrokerConfig.from_sources(None, {"log.flush.interval.messages": "10000"})
    assert set(DEFAULT_ONLY).isdisjoint(KEYS)


def test_a_typo_is_still_refused() -> None:
    with pytest.raises(ConfigError, match="unknown config key 'offsets.commit.timeout'"):
        BrokerConfig.from_sources(None, {"offsets.commit.timeout": "5000"})


def test_broker_starts_with_kafka_keys() -> None:
    """The broker itself starts with Kafka's keys given on its command line."""
    settings = {"process.roles": "broker,controller", "offsets.commit.timeout.ms": "5000",
                "offsets.topic.replication.factor": "1", "min.insync.replicas": "1",
                "controller.quorum.voters": "1@localhost:9093", "log.cleanup.policy": "delete"}
    with EmbeddedBroker(settings=settings) as broker:
        assert broker.port > 0


@pytest.mark.timeout(600)
def test_every_kafka_broker_key_is_decided(apache_kafka) -> None:
    """Asked of Kafka 4.4 itself: each of its broker keys is Exactly's, an alias, ignored with a
    reason, accepted at its default only, or refused with what to do instead."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    from exactly.server.config import ALIASES
    from exactly.server.kafka_keys import refused_reason

    admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    kafka_keys = set(admin.describe_configs([resource])[resource].result(timeout=30))
    assert len(kafka_keys) > 300
    undecided = sorted(k for k in kafka_keys
                       if k not in KEYS and k not in ALIASES and ignored_reason(k) is None
                       and refused_reason(k) is None)
    assert not undecided, f"Kafka 4.4 broker keys Exactly neither takes nor refuses: {undecided}"
