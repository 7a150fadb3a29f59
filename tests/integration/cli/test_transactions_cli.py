"""`exactly transactions ...` run as a subprocess against a real broker: open transactions listed
and described, a hanging transaction found and aborted (read_committed moves on), force-terminate,
and a 2PC transaction that outlives transaction.max.timeout.ms found by --running-longer-than."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.static.primitive import i16, i32

from exactly.client import Admin, NewTopic, TransactionSession
from exactly.client import Producer as ExactlyProducer
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly, table
from tests.rawclient import RawConnection

TOPIC = "cli-txn"
HANGING = "cli-hanging"


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[EmbeddedBroker]:
    # Without KIP-890 verification a transactional batch is accepted for a partition the
    # coordinator never heard of: the way a hanging transaction comes about in Kafka.
    with EmbeddedBroker(settings={"transaction.partition.verification.enable": "false"}) as b:
        with Admin({"bootstrap.servers": b.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 2), NewTopic(HANGING, 1)])
        yield b


def _txn_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(TOPIC, b"v", partition=0)
    assert producer.flush(10) == 0
    return producer


def test_list_and_describe_an_open_transaction(txn_broker):
    bs = ("--bootstrap-server", txn_broker.bootstrap)
    producer = _txn_producer(txn_broker.bootstrap, "cli-open")

    rows = {r["TransactionalId"]: r for r in table(exactly("transactions", "list", *bs).stdout)}
    assert rows["cli-open"]["TransactionState"] == "Ongoing"
    pid = rows["cli-open"]["ProducerId"]
    ongoing = table(exactly("transactions", "list", *bs, "--state", "Ongoing",
                            "--producer-id", pid).stdout)
    assert [r["TransactionalId"] for r in ongoing] == ["cli-open"]
    assert table(exactly("transactions", "list", *bs, "--state", "Empty").stdout) == []
    assert "cli-open" not in exactly("transactions", "list", *bs, "--running-longer-than",
                                     "3600000").stdout

    (desc,) = table(exactly("transactions", "describe", *bs, "--transactional-id",
                            "cli-open").stdout)
    assert desc["ProducerId"] == pid and desc["TransactionState"] == "Ongoing"
    assert desc["TopicPartitions"] == f"{TOPIC}-0"
    assert int(desc["TransactionDurationMs"]) >= 0 and int(desc["CurrentTransactionStartTimeMs"]) > 0

    # Its coordinator knows it: not hanging, unless it is open longer than the max timeout.
    out = exactly("transactions", "find-hanging", *bs, "--topic", TOPIC).stdout
    assert "No hanging transactions found." in out
    time.sleep(0.01)
    (old,) = table(exactly("transactions", "find-hanging", *bs, "--topic", TOPIC,
                           "--max-transaction-timeout", "0").stdout)
    assert old["ProducerId"] == pid and old["Partition"] == "0"
    assert old["Reason"].startswith("open longer")

    producer.commit_transaction(10)
    (desc,) = table(exactly("transactions", "describe", *bs, "--transactional-id",
                            "cli-open").stdout)
    assert desc["TransactionState"] == "CompleteCommit"


def test_describe_an_unknown_transactional_id_fails_clearly(txn_broker):
    proc = exactly("transactions", "describe", "--bootstrap-server", txn_broker.bootstrap,
                   "--transactional-id", "cli-no-such", check=False)
    assert proc.returncode == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in proc.stderr and "cli-no-such" in proc.stderr
    assert proc.stderr.count("describe transaction 'cli-no-such'") == 1, proc.stderr  # no repeat


def _hanging_transaction(broker: EmbeddedBroker) -> tuple[int, int]:
    """A transactional batch in HANGING-0 whose coordinator never heard of the partition."""
    conn = RawConnection(broker.host, broker.port)
    try:
        init = conn.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id="cli-hanging-txn",
                            transaction_timeout=datetime.timedelta(minutes=10), producer_id=-1,
                            producer_epoch=-1)
        assert init.error_code == ErrorCode.none
        pid, epoch = init.producer_id, init.producer_epoch
        produce_m = __import__("kio.schema.produce.v9.request", fromlist=["_"])
        batch = build_batch([Record(None, b"hanging")], timestamp=int(time.time() * 1000),
                            producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            transactional=True)
        request = build(request_class(ApiKey.PRODUCE, 9), transactional_id="cli-hanging-txn",
                        acks=i16(-1), timeout=datetime.timedelta(seconds=10),
                        topic_data=(produce_m.TopicProduceData(name=HANGING, partition_data=(
                            produce_m.PartitionProduceData(index=i32(0), records=batch),)),))
        conn.send_bytes(conn.frame(ApiKey.PRODUCE, 9, request))
        produced = conn.read_response(ApiKey.PRODUCE, 9)
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
        return pid, epoch
    finally:
        conn.close()


def _read_committed(bootstrap: str, topic: str, partition: int, want: int,
                    timeout: float = 20) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cli-reader-{time.time()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    return values


def test_find_hanging_then_abort(txn_broker):
    bs = ("--bootstrap-server", txn_broker.bootstrap)
    pid, epoch = _hanging_transaction(txn_broker)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap, "enable.idempotence": True})
    plain.produce(HANGING, b"after", partition=0)
    assert plain.flush(10) == 0
    assert _read_committed(txn_broker.bootstrap, HANGING, 0, 1, timeout=3) == []  # held back

    (row,) = table(exactly("transactions", "find-hanging", *bs, "--topic", HANGING).stdout)
    assert (int(row["ProducerId"]), int(row["ProducerEpoch"])) == (pid, epoch)
    assert (row["Topic"], row["Partition"], row["StartOffset"]) == (HANGING, "0", "0")
    assert row["Reason"] == "unknown to the coordinator"
    # --partition narrows to the same one
    assert len(table(exactly("transactions", "find-hanging", *bs, "--topic", HANGING,
                             "--partition", "0").stdout)) == 1

    out = exactly("transactions", "abort", *bs, "--topic", HANGING, "--partition", "0",
                  "--producer-id", row["ProducerId"], "--producer-epoch", row["ProducerEpoch"],
                  "--coordinator-epoch", row["CoordinatorEpoch"]).stdout
    assert f"producer {pid}" in out

    assert _read_committed(txn_broker.bootstrap, HANGING, 0, 1) == [b"after"]
    assert "No hanging transactions found." in exactly("transactions", "find-hanging", *bs,
                                                       "--topic", HANGING).stdout


def test_abort_needs_the_transaction_identity(txn_broker):
    proc = exactly("transactions", "abort", "--bootstrap-server", txn_broker.bootstrap,
                   "--topic", HANGING, "--partition", "0", "--producer-id", "1", check=False)
    assert proc.returncode == 2 and "--start-offset" in proc.stderr
    proc = exactly("transactions", "abort", "--bootstrap-server", txn_broker.bootstrap,
                   "--topic", HANGING, "--partition", "0", "--start-offset", "999", check=False)
    assert proc.returncode == 1 and "no open transaction starts at offset 999" in proc.stderr


def test_force_terminate(txn_broker):
    bs = ("--bootstrap-server", txn_broker.bootstrap)
    producer = _txn_producer(txn_broker.bootstrap, "cli-force")
    out = exactly("transactions", "force-terminate", *bs, "--transactional-id", "cli-force").stdout
    assert "cli-force" in out
    (desc,) = table(exactly("transactions", "describe", *bs, "--transactional-id",
                            "cli-force").stdout)
    assert desc["TransactionState"] in ("CompleteAbort", "Empty")
    with pytest.raises(Exception, match="(?i)fenced"):
        producer.commit_transaction(10)


def test_command_config_file(txn_broker, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("# as Kafka's tools take\nsecurity.protocol=PLAINTEXT\n"
                     "sasl.kerberos.service.name=kafka\n")
    proc = exactly("transactions", "list", "--bootstrap-server", txn_broker.bootstrap,
                   "--command-config", str(props))
    assert "sasl.kerberos.service.name is not a setting" in proc.stderr
    assert proc.stdout.startswith("TransactionalId")
    proc = exactly("transactions", "list", "--bootstrap-server", txn_broker.bootstrap,
                   "--command-config", str(tmp_path / "missing.properties"), check=False)
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_describe_producers(txn_broker):
    bs = ("--bootstrap-server", txn_broker.bootstrap)
    with Admin({"bootstrap.servers": txn_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("cli-producers", 1)])
    describe = ("transactions", "describe-producers", *bs, "--topic", "cli-producers",
                "--partition", "0")
    assert exactly(*describe).stdout.split() == [
        "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
        "CurrentTransactionStartOffset"]

    producer = Producer({"bootstrap.servers": txn_broker.bootstrap,
                         "transactional.id": "cli-producers"})
    producer.init_transactions(10)
    producer.begin_transaction()
    before = int(time.time() * 1000)
    for value in (b"a", b"b", b"c"):
        producer.produce("cli-producers", value, partition=0)
    assert producer.flush(10) == 0
    (row,) = table(exactly(*describe).stdout)
    listed = {r["TransactionalId"]: r for r in table(exactly("transactions", "list", *bs).stdout)}
    assert row["ProducerId"] == listed["cli-producers"]["ProducerId"]
    assert row["LastSequence"] == "2" and row["CurrentTransactionStartOffset"] == "0"
    assert int(row["LastTimestamp"]) >= before - 1000
    producer.commit_transaction(10)
    (row,) = table(exactly(*describe).stdout)
    assert row["CurrentTransactionStartOffset"] == "None"

    proc = exactly("transactions", "describe-producers", *bs, "--topic", "cli-nosuch",
                   "--partition", "0", check=False)
    assert proc.returncode == 1
    assert proc.stderr == ("error: describe producers of cli-nosuch-0: "
                           "UNKNOWN_TOPIC_OR_PARTITION\n")


MAX_TIMEOUT_MS = 2000


def test_a_2pc_transaction_outlives_the_max_timeout_and_is_listed():
    with EmbeddedBroker(settings={
            "transaction.two.phase.commit.enable": "true",
            "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}) as broker:
        bs = ("--bootstrap-server", broker.bootstrap)
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("cli-2pc", 1)])
        session = TransactionSession({"bootstrap.servers": broker.bootstrap,
                                      "transactional.id": "cli-2pc-txn",
                                      "transaction.two.phase.commit.enable": True})
        session.initialize()
        session.begin_transaction()
        producer = ExactlyProducer({"bootstrap.servers": broker.bootstrap}, session=session)
        producer.send("cli-2pc", b"prepared", partition=0)
        session.prepare_transaction()

        time.sleep(MAX_TIMEOUT_MS / 1000 + 0.8)  # past the max timeout and a cleanup round
        rows = table(exactly("transactions", "list", *bs, "--running-longer-than", "1000").stdout)
        assert [(r["TransactionalId"], r["TransactionState"]) for r in rows] == [
            ("cli-2pc-txn", "Ongoing")]
        (hanging,) = table(exactly("transactions", "find-hanging", *bs, "--topic", "cli-2pc",
                                   "--max-transaction-timeout", str(MAX_TIMEOUT_MS)).stdout)
        assert hanging["Reason"].startswith("open longer")

        exactly("transactions", "force-terminate", *bs, "--transactional-id", "cli-2pc-txn")
        assert table(exactly("transactions", "list", *bs, "--running-longer-than", "1000",
                             "--state", "Ongoing").stdout) == []
        assert _read_committed(broker.bootstrap, "cli-2pc", 0, 1, timeout=3) == []
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            (state,) = admin.describe_producers([("cli-2pc", 0)])[("cli-2pc", 0)]
            assert state.current_txn_start_offset == -1  # the LSO moved on
        producer.close()
        session.close()
