"""The command-line tools reach a SASL_SSL listener with Kafka's client properties files, as an
operator of a secured cluster runs them: `--command-config` for topics, configs, transactions
and consumer groups, `--producer.config`/`--consumer.config` for produce and consume. The
credentials are spelled both ways Kafka users write them (a Java client's sasl.jaas.config line;
librdkafka's sasl.username and sasl.password), with TLS checked against the test CA. A wrong
password is an authentication error in one line, exit 1, within --timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from exactly.testing import EmbeddedBroker, TestCertificates
from tests.helpers.cli.support import exactly, table
from tests.integration.server.auth.conftest import (  # noqa: F401 (fixture)
    alter_scram,
    certs,
    secure_settings,
)

TOPIC = "secure-cli"


@pytest.fixture(scope="module")
def secure_broker(certs: TestCertificates) -> Iterator[EmbeddedBroker]:  # noqa: F811
    with EmbeddedBroker(settings=secure_settings(certs)) as b:
        alter_scram(b, "carol", "carol-secret", "SCRAM-SHA-512")
        yield b


def _properties(path: Path, certs: TestCertificates, *lines: str) -> Path:  # noqa: F811
    path.write_text("\n".join(["security.protocol=SASL_SSL", f"ssl.ca.location={certs.ca}",
                               *lines]) + "\n")
    return path


def _scram_jaas(password: str) -> str:
    return ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="carol" password="{password}";')


def test_tools_over_sasl_ssl(secure_broker: EmbeddedBroker, certs: TestCertificates,  # noqa: F811
                             tmp_path: Path) -> None:
    # The admin tools log in as a Java client's file says (SCRAM, sasl.jaas.config); the console
    # tools with librdkafka's key names (PLAIN).
    command = _properties(tmp_path / "admin.properties", certs, "sasl.mechanism=SCRAM-SHA-512",
                          _scram_jaas("carol-secret"))
    client = _properties(tmp_path / "client.properties", certs, "sasl.mechanism=PLAIN",
                         "sasl.username=alice", "sasl.password=alice-secret")
    bs = ("--bootstrap-server", secure_broker.address("SASL_SSL"))
    cc = (*bs, "--command-config", str(command))

    assert exactly("topics", "create", "--topic", TOPIC, "--partitions", "1", *cc).stdout == \
        f"Created topic {TOPIC}.\n"
    assert TOPIC in exactly("topics", "list", *cc).stdout.split()
    exactly("topics", "alter", "--topic", TOPIC, "--partitions", "2", *cc)
    assert f"Topic: {TOPIC}\tPartitionCount: 2\t" in exactly("topics", "describe", TOPIC,
                                                             *cc).stdout

    exactly("configs", "--alter", "--topic", TOPIC, "--add-config", "retention.ms=3600000", *cc)
    assert exactly("configs", "--describe", "--topic", TOPIC, *cc).stdout.splitlines() == [
        f"Dynamic configs for topic {TOPIC} are:",
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}"]

    produced = exactly("produce", TOPIC, *bs, "--producer.config", str(client), "--timeout",
                       "10000", input="one\ntwo\n")
    assert "Produced 2 record(s)" in produced.stderr
    consumed = exactly("consume", TOPIC, *bs, "--consumer.config", str(client), "--group",
                       "secure-cli-group", "--from-beginning", "--max-messages", "2",
                       "--timeout", "10000")
    assert sorted(consumed.stdout.splitlines()) == ["one", "two"]
    assert "secure-cli-group" in exactly("consumer-groups", "--list", *cc).stdout.split()
    # Kafka 4.2's spellings (KIP-1147): --topic, and --command-config for the console tools too.
    produced = exactly("produce", "--topic", TOPIC, *bs, "--command-config", str(client),
                       "--timeout", "10000", input="three\n")
    assert "Produced 1 record(s)" in produced.stderr
    consumed = exactly("consume", "--topic", TOPIC, *bs, "--command-config", str(client),
                       "--from-beginning", "--max-messages", "3", "--timeout", "10000")
    assert sorted(consumed.stdout.splitlines()) == ["one", "three", "two"]

    # A transaction left open over the same listener, for the transaction tools to see.
    host, port = secure_broker.listener_addresses["SASL_SSL"]
    producer = Producer({"bootstrap.servers": f"{host}:{port}", "security.protocol": "SASL_SSL",
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                         "sasl.password": "alice-secret", "ssl.ca.location": str(certs.ca),
                         "transactional.id": "secure-cli-txn"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(TOPIC, b"open", partition=1)
    assert producer.flush(10) == 0
    try:
        listed = {r["TransactionalId"]: r for r in table(exactly("transactions", "list",
                                                                 *cc).stdout)}
        assert listed["secure-cli-txn"]["TransactionState"] == "Ongoing"
        rows = table(exactly("transactions", "describe-producers", "--topic", TOPIC,
                             "--partition", "1", *cc).stdout)
        (open_here,) = [r for r in rows if r["CurrentTransactionStartOffset"] != "None"]
        assert open_here["ProducerId"] == listed["secure-cli-txn"]["ProducerId"]
    finally:
        producer.abort_transaction(10)


@pytest.mark.parametrize(("args", "what"), [
    (("topics", "list"), "list topics"),
    (("configs", "--describe", "--broker-defaults"),
     "describe configs of the brokers' cluster-wide default"),
    (("transactions", "list"), "list transactions"),
    (("produce", TOPIC, "--producer.config"), None),
    (("consume", TOPIC, "--timeout-ms", "3000", "--consumer.config"), None),
], ids=lambda a: a[0] if isinstance(a, tuple) else None)
def test_a_wrong_password_is_an_authentication_error(secure_broker: EmbeddedBroker,
                                                     certs: TestCertificates,  # noqa: F811
                                                     tmp_path: Path, args: tuple[str, ...],
                                                     what: str | None) -> None:
    wrong = _properties(tmp_path / "wrong.properties", certs, "sasl.mechanism=SCRAM-SHA-512",
                        _scram_jaas("not-the-password"))
    config = (str(wrong),) if what is None else ("--command-config", str(wrong))
    # A client retrying until its own timeouts fails here by the subprocess timeout.
    proc = exactly(*args, *config, "--bootstrap-server", secure_broker.address("SASL_SSL"),
                   "--timeout", "5000", check=False, timeout=20, input="a line\n")
    assert proc.returncode == 1 and proc.stdout == ""
    # One error line (produce first says how many records it wrote: none); no client logs.
    lines = proc.stderr.splitlines()
    assert lines[:-1] in ([], [f"Produced 0 record(s) to {TOPIC}."]), proc.stderr
    assert lines[-1].startswith(f"error: {what or ''}"), lines[-1]
    assert ("authentication of 'carol' with SCRAM-SHA-512" in lines[-1]
            and "(SASL_AUTHENTICATION_FAILED)" in lines[-1]), lines[-1]
