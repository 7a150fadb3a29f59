"""Broker configs (issue 17, KIP-226) over TCP with confluent-kafka's AdminClient: DescribeConfigs
on BROKER resources gives every key with its source and read-only flag; IncrementalAlterConfigs
and the legacy AlterConfigs change the dynamic keys at run time (shown taking effect: a lowered
message.max.bytes refuses a batch at once, max.connections.per.ip closes a new connection),
kept across kill -9; read-only keys are refused with INVALID_REQUEST."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from tests.rawclient import RawConnection
from tests.support import create_topic, produce_confluent

NODE = "1"  # the embedded broker's node.id
BROKER, BROKER_LOGGER = 4, 8  # ConfigResource types
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def _describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([resource])[resource].result(timeout=20)


def _raw_alter(bootstrap: str, resource_type: int, name: str,
               ops: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs on the raw wire (librdkafka cannot name the cluster default
    scope nor BROKER_LOGGER): (error code, message)."""
    from kio.schema.incremental_alter_configs.v1 import request as alter

    host, port = bootstrap.split(":")
    conn = RawConnection(host, int(port))
    try:
        response = conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False,
                                resources=(alter.AlterConfigsResource(
                                    resource_type=resource_type, resource_name=name,
                                    configs=tuple(alter.AlterableConfig(
                                        name=k, config_operation=op, value=v)
                                        for k, op, v in ops)),))
    finally:
        conn.close()
    (result,) = response.responses
    return result.error_code, result.error_message


def _raw_describe(bootstrap: str, resource_type: int, name: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs on the raw wire: {name: (value, source)}."""
    from kio.schema.describe_configs.v4 import request as describe

    host, port = bootstrap.split(":")
    conn = RawConnection(host, int(port))
    try:
        response = conn.request(ApiKey.DESCRIBE_CONFIGS, 4, include_synonyms=False,
                                include_documentation=False, resources=(
                                    describe.DescribeConfigsResource(
                                        resource_type=resource_type, resource_name=name,
                                        configuration_keys=None),))
    finally:
        conn.close()
    (result,) = response.results
    assert result.error_code == ErrorCode.none
    return {c.name: (c.value, c.config_source) for c in result.configs}


def _set(admin: AdminClient, name: str, values: dict[str, str | None]) -> None:
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=(
            AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE))
        for k, v in values.items()])
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)


def _refusal(admin: AdminClient, name: str, values: dict[str, str]) -> KafkaError:
    try:
        _set(admin, name, values)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    raise AssertionError(f"{values} was accepted")


def _produce(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    """Deliver one record; the broker's error, if any (no retries: the first answer counts)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0, "linger.ms": 0,
                         "enable.idempotence": False})
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(20) == 0
    return outcome[0]


@pytest.mark.broker_settings({"log.retention.hours": "100"})
def test_broker_configs_described_altered_live_and_kept(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = _describe(admin, NODE)
    # Sources and read-only flags, as Kafka gives them.
    assert entries["log.retention.hours"].value == "100"
    assert entries["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not entries["message.max.bytes"].is_read_only
    assert entries["listeners"].is_read_only
    assert _raw_describe(broker.bootstrap, BROKER, "") == {}  # no dynamic default yet

    # A read-only key is refused, and nothing changes.
    refused = _refusal(admin, NODE, {"listeners": "PLAINTEXT://127.0.0.1:1", "message.max.bytes": "2000"})
    assert refused.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in refused.str()
    assert "listeners" in refused.str()
    assert _describe(admin, NODE)["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert _refusal(admin, NODE, {"message.max.bytes": "lots"}).code() == KafkaError.INVALID_REQUEST

    # message.max.bytes lowered for this broker: a 5 kB batch is refused at once...
    create_topic(broker.bootstrap, "sizes")
    assert _produce(broker.bootstrap, "sizes", b"x" * 5000) is None
    _set(admin, NODE, {"message.max.bytes": "2000"})
    entry = _describe(admin, NODE)["message.max.bytes"]
    assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    too_large = _produce(broker.bootstrap, "sizes", b"x" * 5000)
    assert too_large is not None and too_large.code() == KafkaError.MSG_SIZE_TOO_LARGE
    # ... and a cluster-wide default sits under it.
    assert _raw_alter(broker.bootstrap, BROKER, "", [("log.retention.ms", SET, "3600000"),
                                                     ("message.max.bytes", SET, "1000000")]) \
        == (ErrorCode.none, None)
    default = _raw_describe(broker.bootstrap, BROKER, "")
    assert default == {"log.retention.ms": ("3600000", DYNAMIC_DEFAULT),
                       "message.max.bytes": ("1000000", DYNAMIC_DEFAULT)}
    entries = _describe(admin, NODE)
    assert entries["message.max.bytes"].value == "2000"  # this broker's value wins
    assert entries["log.retention.ms"].value == "3600000"
    assert entries["log.retention.ms"].source == DYNAMIC_DEFAULT

    broker.restart()  # kill -9: the dynamic values were stored before the answer
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _describe(admin, NODE)["message.max.bytes"].value == "2000"
    too_large = _produce(broker.bootstrap, "sizes", b"x" * 5000)
    assert too_large is not None and too_large.code() == KafkaError.MSG_SIZE_TOO_LARGE
    # Deleted: the default scope's value applies again.
    _set(admin, NODE, {"message.max.bytes": None})
    entry = _describe(admin, NODE)["message.max.bytes"]
    assert (entry.value, entry.source) == ("1000000", DYNAMIC_DEFAULT)
    assert _produce(broker.bootstrap, "sizes", b"x" * 5000) is None


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_configs_replaces_a_broker_scope(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _set(admin, NODE, {"log.retention.bytes": "123456789", "log.cleaner.backoff.ms": "1000"})
    resource = ConfigResource(ResourceType.BROKER, NODE, set_config={"max.connections.per.ip": "1"})
    admin.alter_configs([resource])[resource].result(timeout=20)
    entries = _describe(admin, NODE)
    assert entries["max.connections.per.ip"].value == "1"
    # The legacy API replaces the scope: what it did not name went back to the default.
    assert entries["log.retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["log.cleaner.backoff.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # max.connections.per.ip=1 applies to new connections: the admin client holds the one allowed.
    host, port = broker.bootstrap.split(":")
    extra = RawConnection(host, int(port))
    try:
        assert extra.is_closed_by_peer(timeout=5)
    finally:
        extra.close()


@pytest.mark.broker_settings({"log.segment.bytes": "1024"})
def test_broker_logger_levels_described_and_altered_live(broker) -> None:
    levels = _raw_describe(broker.bootstrap, BROKER_LOGGER, NODE)
    assert levels["root"][0] == "INFO" and levels["exactly.log.partition"][0] == "INFO"
    assert levels["root"][1] == 6  # DYNAMIC_BROKER_LOGGER_CONFIG
    # DEBUG for the partition log: its segment rolls show up in the broker's log at once.
    assert "event=segment_rolled" not in broker.log_path.read_text()
    assert _raw_alter(broker.bootstrap, BROKER_LOGGER, NODE,
                      [("exactly.log.partition", SET, "DEBUG")]) == (ErrorCode.none, None)
    assert _raw_describe(broker.bootstrap, BROKER_LOGGER, NODE)["exactly.log.partition"][0] == "DEBUG"
    create_topic(broker.bootstrap, "rolled")
    produce_confluent(broker.bootstrap, "rolled", [b"x" * 500] * 6,
                      extra={"linger.ms": 0, "batch.num.messages": 1})
    assert "event=segment_rolled" in broker.log_path.read_text()
    # Deleted: the parent's level again.
    assert _raw_alter(broker.bootstrap, BROKER_LOGGER, NODE,
                      [("exactly.log.partition", DELETE, None)]) == (ErrorCode.none, None)
    assert _raw_describe(broker.bootstrap, BROKER_LOGGER, NODE)["exactly.log.partition"][0] == "INFO"
    # Kafka's refusals: an unknown logger or level, the root's level deleted.
    assert _raw_alter(broker.bootstrap, BROKER_LOGGER, NODE, [("nope", SET, "DEBUG")])[0] \
        == ErrorCode.invalid_config
    assert _raw_alter(broker.bootstrap, BROKER_LOGGER, NODE, [("root", SET, "LOUD")])[0] \
        == ErrorCode.invalid_config
    assert _raw_alter(broker.bootstrap, BROKER_LOGGER, NODE, [("root", DELETE, None)])[0] \
        == ErrorCode.invalid_request
