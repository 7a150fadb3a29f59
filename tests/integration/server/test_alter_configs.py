"""IncrementalAlterConfigs' list operations (issue 13, item 6): APPEND and SUBTRACT on a list-typed
topic config such as `cleanup.policy` change the current value, as Apache Kafka does; on a key that
is not a list they get INVALID_CONFIG and change nothing. Over TCP with confluent-kafka's
AdminClient, and the list rule itself on the log's topic configs."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from exactly.log.errors import InvalidConfigError
from exactly.log.topic_config import TOPIC_CONFIG_KEYS, list_operation
from tests.support import create_topic


def _alter(admin: AdminClient, topic: str, name: str, value: str | None,
           op: AlterConfigOpType) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)


def _refusal(admin: AdminClient, topic: str, name: str, value: str,
             op: AlterConfigOpType) -> KafkaError:
    """The error of an alteration that must fail. (Caught here rather than with pytest.raises,
    whose traceback would keep the AdminClient alive, and connecting, after the broker is gone.)"""
    try:
        _alter(admin, topic, name, value, op)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    raise AssertionError(f"{op.name} {name}={value!r} was accepted")


def _value(admin: AdminClient, topic: str, name: str) -> tuple[str, bool]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(timeout=20)[name]
    return entry.value, entry.is_default


def test_append_then_subtract_on_cleanup_policy(broker) -> None:
    create_topic(broker.bootstrap, "lists")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _value(admin, "lists", "cleanup.policy") == ("delete", True)
    # APPEND works on the current value, here the default.
    _alter(admin, "lists", "cleanup.policy", "compact", AlterConfigOpType.APPEND)
    assert _value(admin, "lists", "cleanup.policy") == ("delete,compact", False)
    # What is there already is not added twice.
    _alter(admin, "lists", "cleanup.policy", "delete", AlterConfigOpType.APPEND)
    assert _value(admin, "lists", "cleanup.policy") == ("delete,compact", False)
    _alter(admin, "lists", "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)
    assert _value(admin, "lists", "cleanup.policy") == ("compact", False)
    # A list emptied by SUBTRACT is taken, as Apache Kafka 4.4 takes it: an empty policy, under
    # which neither retention nor compaction runs.
    _alter(admin, "lists", "cleanup.policy", "compact", AlterConfigOpType.SUBTRACT)
    assert _value(admin, "lists", "cleanup.policy") == ("", False)


def test_append_to_a_key_that_is_not_a_list_is_invalid_config(broker) -> None:
    create_topic(broker.bootstrap, "scalars", config={"retention.ms": "600000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for op in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
        error = _refusal(admin, "scalars", "retention.ms", "1000", op)
        assert error.code() == KafkaError.INVALID_CONFIG
        assert "retention.ms" in error.str() and "not a list" in error.str()
    assert _value(admin, "scalars", "retention.ms") == ("600000", False)


def test_list_operation_rules() -> None:
    assert list_operation("cleanup.policy", "delete", "compact", append=True) == "delete,compact"
    assert list_operation("cleanup.policy", "delete,compact", "compact, delete",
                          append=True) == "delete,compact"
    assert list_operation("cleanup.policy", "delete,compact", "delete",
                          append=False) == "compact"
    assert list_operation("cleanup.policy", "compact", "delete", append=False) == "compact"
    assert list_operation("leader.replication.throttled.replicas", "", "0:1,0:2",
                          append=True) == "0:1,0:2"
    assert {k for k, key in TOPIC_CONFIG_KEYS.items() if key.is_list} == {
        "cleanup.policy", "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas"}
    with pytest.raises(InvalidConfigError, match="not a list"):
        list_operation("segment.ms", "1000", "2000", append=True)
    with pytest.raises(InvalidConfigError, match="unknown topic config"):
        list_operation("no.such.key", "", "x", append=True)
