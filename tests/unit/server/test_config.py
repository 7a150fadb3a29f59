"""BrokerConfig: the properties file format, precedence, and a ConfigError for every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

import exactly.configdef
from exactly.groups.config import GROUP_KEYS, GroupConfig
from exactly.log.config import CLEANER_KEYS, LOG_DIRS_KEY, LOG_KEYS, LogConfig
from exactly.server.acl import make_authorizer
from exactly.server.acl.config import ACL_KEYS
from exactly.server.auth.config import AUTH_KEYS
from exactly.server.config import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_STATIC_BROKER,
    KEYS,
    BrokerConfig,
    ConfigError,
    load_or_create_meta,
    parse_properties,
)
from exactly.txn.config import TXN_KEYS
from exactly.txn.state import TxnConfig

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def write(tmp_path: Path, text: str, name: str = "server.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config(**overrides: str) -> BrokerConfig:
    return BrokerConfig.from_sources(None, {k.replace("_", "."): v for k, v in overrides.items()})


# -- the properties format -------------------------------------------------------------------


def test_properties_separators_comments_blanks():
    props = parse_properties(
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   \n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "  d  =  spaced value\n"
        "e=\n"
        "f\n"
        "g=x=y:z\n",
        "test",
    )
    values = {k: v for k, (v, _) in props.items()}
    assert values == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value",
        "e": "",
        "f": "",
        "g": "x=y:z",
    }
    assert props["b"][1] == "test:6"


def test_properties_line_continuation():
    props = parse_properties("listeners=PLAINTEXT://127.0.0.1:9092,\\\n    PLAINTEXT2://x:1\nz=1\n")
    assert props["listeners"][0] == "PLAINTEXT://127.0.0.1:9092,PLAINTEXT2://x:1"
    assert props["z"][0] == "1"


def test_properties_escaped_backslash_does_not_continue():
    props = parse_properties("a=c:\\\\\nb=2\n")
    assert props["a"][0] == "c:\\"
    assert props["b"][0] == "2"


def test_properties_continuation_at_end_of_file():
    assert parse_properties("a=1\\")["a"][0] == "1"


def test_properties_escapes_and_later_duplicate_wins():
    props = parse_properties("k\\=ey=v\\tal\\u0041\nx=1\nx=2\n")
    assert props["k=ey"][0] == "v\talA"
    assert props["x"][0] == "2"


def test_properties_bad_unicode_escape():
    with pytest.raises(ConfigError, match="uXXXX"):
        parse_properties("a=\\u12")


def test_comment_marker_inside_a_value_is_kept():
    assert parse_properties("a=b#c\n")["a"][0] == "b#c"


# -- loading ---------------------------------------------------------------------------------


def test_defaults():
    c = BrokerConfig.from_sources(None, {})
    assert c["node.id"] == 1
    assert c.listener == ("127.0.0.1", 9092)
    assert c.advertised_listener is None
    assert c.log_dir == Path("data")
    assert c["num.partitions"] == 1
    assert c["auto.create.topics.enable"] is True
    assert c["log.retention.ms"] == 168 * 3_600_000
    assert c["log.roll.ms"] == 168 * 3_600_000
    assert c["log.flush.policy"] == "fsync"
    assert c["offsets.topic.num.partitions"] == 50
    assert c.get("cluster.id") is None
    assert c.log_config() == LogConfig()


def test_every_default_is_valid_and_typed():
    c = BrokerConfig.defaults()
    for name, key in KEYS.items():
        value = c[name]
        if key.default is None and name not in ("log.retention.ms", "log.roll.ms"):
            assert value is None or name == "advertised.listeners", name
        elif key.type in ("INT", "LONG"):
            assert isinstance(value, int) and not isinstance(value, bool), name
        elif key.type == "BOOLEAN":
            assert isinstance(value, bool), name


def test_file_values_are_typed(tmp_path):
    path = write(
        tmp_path,
        (
            "node.id=7\n"
            "listeners=PLAINTEXT://0.0.0.0:0\n"
            "advertised.listeners=PLAINTEXT://broker.example:19092\n"
            "log.dirs=/var/exactly/a,/var/exactly/b\n"
            "num.partitions=3\n"
            "auto.create.topics.enable=FALSE\n"
            "log.segment.bytes=1048576\n"
            "log.flush.policy=os\n"
            "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
        ),
    )
    c = BrokerConfig.from_sources(path, {})
    assert c["node.id"] == 7
    assert c.listener == ("0.0.0.0", 0)
    assert c.advertised_listener == ("broker.example", 19092)
    assert c.log_dir == Path("/var/exactly/a")
    assert c["num.partitions"] == 3
    assert c["auto.create.topics.enable"] is False
    assert c["log.segment.bytes"] == 1048576
    assert c["cluster.id"] == "MkU3OEVBNTcwNTJENDM2Qk"
    assert c.is_set("num.partitions") and not c.is_set("delete.topic.enable")


def test_overrides_win_over_file_and_later_override_wins(tmp_path):
    path = write(tmp_path, "num.partitions=3\nlog.dirs=/from/file\n")
    c = BrokerConfig.from_sources(path, {"num.partitions": "5", "log.dirs": "/from/cli"})
    assert c["num.partitions"] == 5
    assert c.log_dir == Path("/from/cli")


def test_values_are_trimmed():
    assert config(num_partitions=" 4 ")["num.partitions"] == 4


def test_ipv6_and_wildcard_listeners():
    assert config(listeners="PLAINTEXT://[::1]:9093").listener == ("::1", 9093)
    assert config(listeners="PLAINTEXT://:9093").listener == ("", 9093)
    assert config(listeners="plaintext://localhost:1").listener == ("localhost", 1)


def test_broker_id_alias():
    assert config(broker_id="4")["node.id"] == 4
    assert config(broker_id="4")["broker.id"] == 4
    c = BrokerConfig.from_sources(None, {"node.id": "4", "broker.id": "4"})
    assert c["node.id"] == 4


def test_alias_in_file_overridden_by_canonical_key_on_command_line(tmp_path):
    path = write(tmp_path, "broker.id=2\nlog.dir=/old\n")
    c = BrokerConfig.from_sources(path, {"node.id": "3", "log.dirs": "/new"})
    assert c["node.id"] == 3
    assert c.log_dir == Path("/new")


def test_node_id_and_broker_id_disagreeing_is_an_error():
    with pytest.raises(ConfigError, match=r"broker\.id.*node\.id|node\.id.*broker\.id"):
        BrokerConfig.from_sources(None, {"node.id": "1", "broker.id": "2"})


def test_log_dirs_wins_over_log_dir(tmp_path):
    path = write(tmp_path, "log.dirs=/a\nlog.dir=/b\n")
    assert BrokerConfig.from_sources(path, {}).log_dir == Path("/a")
    assert config(log_dir="/c").log_dir == Path("/c")


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120_000),
        ({"log.retention.ms": "5", "log.retention.minutes": "2", "log.retention.hours": "1"}, 5),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-1"}, -1),
        ({"log.retention.ms": "-1", "log.retention.hours": "1"}, -1),
    ],
)
def test_retention_precedence(settings, expected):
    c = BrokerConfig.from_sources(None, settings)
    assert c["log.retention.ms"] == expected
    assert c.log_config().retention_ms == expected


def test_roll_precedence():
    assert config(log_roll_hours="2")["log.roll.ms"] == 7_200_000
    assert (
        BrokerConfig.from_sources(None, {"log.roll.hours": "2", "log.roll.ms": "1000"})[
            "log.roll.ms"
        ]
        == 1000
    )


@pytest.mark.parametrize(
    ("settings", "build", "expected"),
    [
        (
            {
                "log.segment.bytes": "1000",
                "log.roll.ms": "2000",
                "log.retention.ms": "3000",
                "log.retention.bytes": "4000",
                "log.index.interval.bytes": "50",
                "log.index.size.max.bytes": "6000",
                "message.max.bytes": "7000",
                "log.flush.policy": "os",
            },
            BrokerConfig.log_config,
            LogConfig(
                segment_bytes=1000,
                segment_ms=2000,
                retention_ms=3000,
                retention_bytes=4000,
                index_interval_bytes=50,
                segment_index_bytes=6000,
                max_message_bytes=7000,
                flush_policy="os",
            ),
        ),
        (
            {
                "transaction.state.log.num.partitions": "3",
                "transaction.max.timeout.ms": "60000",
                "transactional.id.expiration.ms": "1000",
            },
            BrokerConfig.txn_config,
            TxnConfig(num_partitions=3, max_timeout_ms=60000, transactional_id_expiration_ms=1000),
        ),
        (
            {
                "group.initial.rebalance.delay.ms": "0",
                "group.min.session.timeout.ms": "100",
                "group.max.session.timeout.ms": "200",
                "offsets.topic.num.partitions": "4",
                "offsets.retention.minutes": "7",
            },
            BrokerConfig.group_config,
            GroupConfig(
                initial_rebalance_delay_ms=0,
                min_session_timeout_ms=100,
                max_session_timeout_ms=200,
                offsets_topic_num_partitions=4,
                offsets_retention_ms=7 * 60_000,
            ),
        ),
    ],
    ids=["log", "txn", "group"],
)
def test_package_config_mapping(settings, build, expected):
    assert build(BrokerConfig.from_sources(None, settings)) == expected


def test_package_configs_of_the_default_keys_are_the_dataclass_defaults():
    c = BrokerConfig.defaults()
    assert c.log_config() == LogConfig()
    assert c.txn_config() == TxnConfig()
    assert c.group_config() == GroupConfig()


def test_every_package_key_is_gathered_in_describe_configs_order():
    # DescribeConfigs lists the keys in this order; each package's tuple keeps its place in it.
    assert list(KEYS) == [
        "node.id", "listeners", "advertised.listeners", "log.dirs", "num.partitions",
        "default.replication.factor", "auto.create.topics.enable", "delete.topic.enable",
        "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.retention.ms",
        "log.retention.minutes", "log.retention.hours", "log.retention.bytes",
        "log.retention.check.interval.ms", "log.index.interval.bytes", "log.index.size.max.bytes",
        "message.max.bytes", "log.flush.policy", "log.flush.offset.checkpoint.interval.ms",
        "log.cleaner.enable", "log.cleaner.backoff.ms", "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.min.cleanable.ratio", "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms", "log.cleaner.delete.retention.ms",
        "socket.request.max.bytes", "fetch.max.bytes", "queued.max.request.bytes", "max.connections", "max.connections.per.ip",
        "max.connections.per.ip.overrides", "connections.max.idle.ms",
        "offsets.topic.num.partitions", "offsets.topic.segment.bytes", "offsets.retention.minutes",
        "offsets.retention.check.interval.ms", "offsets.commit.timeout.ms",
        "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms",
        "group.max.session.timeout.ms", "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms", "group.consumer.max.size",
        "group.consumer.assignors", "group.consumer.migration.policy",
        "group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms", "group.share.delivery.count.limit",
        "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit",
        "group.share.partition.max.record.locks", "group.share.session.timeout.ms",
        "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms",
        "group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms", "group.share.max.size",
        "group.share.max.share.sessions", "share.coordinator.state.topic.num.partitions",
        "share.coordinator.state.topic.segment.bytes",
        "share.coordinator.snapshot.update.records.per.snapshot",
        "transaction.state.log.num.partitions",
        "transaction.state.log.segment.bytes", "transaction.max.timeout.ms", "transactional.id.expiration.ms",
        "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.partition.verification.enable", "transaction.two.phase.commit.enable",
        "transaction.version", "metrics.listen", "cluster.id", "sasl.server.max.receive.size",
        "sasl.enabled.mechanisms",
        "sasl.plain.users", "ssl.keystore.type", "ssl.keystore.location",
        "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
        "ssl.truststore.type", "ssl.truststore.location", "ssl.client.auth",
        "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
        "num.network.threads", "num.io.threads",
    ]
    for key in (LOG_DIRS_KEY, *LOG_KEYS, *CLEANER_KEYS, *GROUP_KEYS, *TXN_KEYS, *AUTH_KEYS,
                *ACL_KEYS):
        assert KEYS[key.name] is key


def test_config_error_is_one_type_wherever_it_is_imported(tmp_path):
    assert ConfigError is exactly.configdef.ConfigError
    # make_authorizer raises it without importing the broker's config module.
    (tmp_path / "acls.json").write_text("not json")
    c = config(log_dirs=str(tmp_path), authorizer_class_name=STANDARD_AUTHORIZER)
    with pytest.raises(ConfigError, match="acls.json"):
        make_authorizer(c)


def test_advertised_listener_defaults_to_listeners():
    c = config(listeners="PLAINTEXT://0.0.0.0:9092")
    assert c.advertised_listener is None
    assert c["advertised.listeners"][0].host == "0.0.0.0"


def test_accepted_compatibility_keys(tmp_path):
    path = write(tmp_path, "num.network.threads=3\nnum.io.threads=8\n")
    BrokerConfig.from_sources(path, {})


def test_items_for_describe_configs():
    c = config(num_partitions="3", log_retention_hours="2")
    entries = {e.name: e for e in c.items()}
    assert set(entries) == set(KEYS)
    assert entries["num.partitions"].value == "3"
    assert entries["num.partitions"].source == CONFIG_SOURCE_STATIC_BROKER
    assert not entries["num.partitions"].is_default
    assert entries["delete.topic.enable"].value == "true"
    assert entries["delete.topic.enable"].source == CONFIG_SOURCE_DEFAULT
    assert entries["delete.topic.enable"].is_default
    assert entries["listeners"].value == "PLAINTEXT://127.0.0.1:9092"
    assert entries["log.retention.hours"].value == "2"
    assert entries["log.retention.ms"].value is None  # unset: derived from the hours
    assert all(e.documentation for e in entries.values())


def test_typed_access_of_unknown_key_is_a_key_error():
    c = BrokerConfig.defaults()
    with pytest.raises(KeyError):
        c["no.such.key"]
    assert "no.such.key" not in c
    assert "broker.id" in c
    assert c.get("no.such.key", 5) == 5


# -- bad input: each names the key, the value and what is allowed ---------------------------


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("node.id", "one", "whole number"),
        ("node.id", "-1", "from 0"),
        ("broker.id", "x", "whole number"),
        ("num.partitions", "0", "from 1"),
        ("num.partitions", "1.5", "whole number"),
        ("num.partitions", "", "whole number"),
        ("num.partitions", "3000000000", "2147483647"),
        ("default.replication.factor", "3", "must be 1"),
        ("auto.create.topics.enable", "yes", "true or false"),
        ("delete.topic.enable", "1", "true or false"),
        ("log.segment.bytes", "13", "from 14"),
        ("log.roll.ms", "0", "from 1"),
        ("log.roll.hours", "0", "from 1"),
        ("log.retention.ms", "-2", "from -1"),
        ("log.retention.minutes", "soon", "whole number"),
        ("log.retention.hours", "-5", "from -1"),
        ("log.retention.bytes", "99999999999999999999", "9223372036854775807"),
        ("log.retention.check.interval.ms", "0", "from 1"),
        ("log.index.interval.bytes", "-1", "from 0"),
        ("log.index.size.max.bytes", "3", "from 4"),
        ("message.max.bytes", "big", "whole number"),
        ("log.flush.policy", "never", "fsync, os"),
        ("socket.request.max.bytes", "0", "from 1"),
        ("offsets.topic.num.partitions", "0", "from 1"),
        ("offsets.retention.minutes", "0", "from 1"),
        ("group.initial.rebalance.delay.ms", "-1", "from 0"),
        ("group.min.session.timeout.ms", "x", "whole number"),
        ("group.max.session.timeout.ms", "x", "whole number"),
        ("cluster.id", "has space", "A-Z"),
        ("log.dirs", " , ", "at least one directory"),
        ("listeners", "127.0.0.1:9092", "NAME://HOST:PORT"),
        ("listeners", "PLAINTEXT://host", "NAME://HOST:PORT"),
        ("listeners", "PLAINTEXT://host:70000", "0 and 65535"),
        ("listeners", "SSL://host:9093", "ssl.keystore.location"),
        ("listeners", "SASL_SSL://host:9093", "ssl.keystore.location"),
        ("listeners", "PLAINTEXT://a:1,SASL_PLAINTEXT://b:1", "share a port"),
        ("listeners", "INTERNAL://host:9093", "use PLAINTEXT"),
        ("listeners", "PLAINTEXT://a:1,PLAINTEXT://b:2", "different name"),
        ("listeners", "", "at least one listener"),
        ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092", "cannot be advertised"),
        ("advertised.listeners", "PLAINTEXT://:9092", "cannot be advertised"),
        ("advertised.listeners", "PLAINTEXT://[::]:9092", "cannot be advertised"),
        ("advertised.listeners", "SSL://h:1", "not in listeners"),
        ("sasl.enabled.mechanisms", "GSSAPI", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        ("sasl.plain.users", "alice", "USER:PASSWORD"),
        ("ssl.client.auth", "maybe", "none, requested, required"),
        ("ssl.keystore.type", "JKS", "PEM"),
        ("num.io.threads", "0", "from 1"),
    ],
)
def test_bad_value_names_key_value_and_what_is_allowed(key, value, allowed):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_sources(None, {key: value})
    message = str(info.value)
    assert message.startswith(f"{key}=")
    assert repr(value.strip()) in message
    assert allowed in message


def test_bad_value_in_file_names_file_and_line(tmp_path):
    path = write(tmp_path, "# header\nnum.partitions=3\nlog.segment.bytes=ten\n")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_sources(path, {})
    assert "log.segment.bytes='ten'" in str(info.value)
    assert f"{path}:3" in str(info.value)


def test_unknown_key_is_an_error_with_a_suggestion(tmp_path):
    path = write(tmp_path, "num.partition=3\n")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_sources(path, {})
    assert "unknown config key 'num.partition'" in str(info.value)
    assert "did you mean 'num.partitions'" in str(info.value)
    assert f"{path}:1" in str(info.value)


def test_unknown_override_key_is_an_error():
    with pytest.raises(ConfigError, match="unknown config key 'zookeeper.connect'"):
        BrokerConfig.from_sources(None, {"zookeeper.connect": "localhost:2181"})


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        BrokerConfig.from_sources(tmp_path / "nope.properties", {})


def test_non_utf8_file_is_an_error(tmp_path):
    path = tmp_path / "bin.properties"
    path.write_bytes(b"a=\xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        BrokerConfig.from_sources(path, {})


def test_session_timeout_bounds_must_be_ordered():
    with pytest.raises(ConfigError, match="group.min.session.timeout.ms=10.*group.max"):
        BrokerConfig.from_sources(
            None, {"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"}
        )


def test_advertised_listener_name_must_be_a_listener():
    c = config(advertised_listeners="PLAINTEXT://h:1")
    assert c.advertised_listener == ("h", 1)
    with pytest.raises(ConfigError, match="listener SASL_PLAINTEXT is not in listeners"):
        config(advertised_listeners="SASL_PLAINTEXT://h:1")


def test_several_listeners_each_advertised():
    c = config(listeners="PLAINTEXT://0.0.0.0:9092,SASL_PLAINTEXT://0.0.0.0:9093",
               advertised_listeners="PLAINTEXT://a:9092,SASL_PLAINTEXT://b:19093",
               sasl_plain_users="alice:secret,bob:p:w")
    assert [lst.name for lst in c.listeners] == ["PLAINTEXT", "SASL_PLAINTEXT"]
    assert c.advertised_for("SASL_PLAINTEXT") == ("b", 19093)
    assert c.plain_users == {"alice": "secret", "bob": "p:w"}
    entries = {e.name: e for e in c.items()}
    assert entries["sasl.plain.users"].is_sensitive and entries["sasl.plain.users"].value is None


def test_secrets_are_hidden_from_describe_configs():
    c = config(ssl_key_password="pw", ssl_keystore_certificate_chain="CHAIN",
               ssl_keystore_key="KEY")
    entries = {e.name: e for e in c.items()}
    # As Apache Kafka 4.4, whose type for all three is PASSWORD: the certificate chain too.
    for name in ("ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain"):
        assert entries[name].is_sensitive and entries[name].value is None, name
    assert c["ssl.key.password"] == "pw"  # hidden from clients, not from the broker
    assert c["ssl.keystore.certificate.chain"] == "CHAIN"


# -- meta.properties ---------------------------------------------------------------------------


def test_cluster_id_generated_once_and_kept(tmp_path):
    c = config(log_dirs=str(tmp_path / "d"))
    first = load_or_create_meta(c)
    assert len(first) == 22
    assert load_or_create_meta(c) == first
    meta = (tmp_path / "d" / "meta.properties").read_text()
    assert f"cluster.id={first}" in meta and "node.id=1" in meta


def test_configured_cluster_id_is_stored_and_checked(tmp_path):
    d = str(tmp_path / "d")
    assert load_or_create_meta(config(log_dirs=d, cluster_id="abc")) == "abc"
    assert load_or_create_meta(config(log_dirs=d)) == "abc"
    with pytest.raises(ConfigError, match="cluster.id='other'.*another cluster"):
        load_or_create_meta(config(log_dirs=d, cluster_id="other"))


def test_node_id_must_match_meta_properties(tmp_path):
    d = str(tmp_path / "d")
    load_or_create_meta(config(log_dirs=d))
    with pytest.raises(ConfigError, match="node.id=2.*another broker"):
        load_or_create_meta(config(log_dirs=d, node_id="2"))
