"""`exactly delete-records` and `exactly log-dirs` (issue 18, item 3), as kafka-delete-records.sh
and kafka-log-dirs.sh: Kafka's options and JSON, over TCP against a broker process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from exactly.client import Admin, NewTopic, Producer
from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly

TOPIC = "cut-me"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as b:
        with Admin({"bootstrap.servers": b.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic("other", 1, 1)])
        with Producer({"bootstrap.servers": b.bootstrap}) as producer:
            for i in range(10):
                for p in (0, 1):
                    producer.send(TOPIC, f"record {i}".encode(), partition=p)
            producer.send("other", b"x" * 1000, partition=0)
            producer.flush()
        yield b


def offsets_file(tmp_path: Path, entries: list[dict]) -> str:
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps({"partitions": entries, "version": 1}))
    return str(path)


def log_start(bootstrap: str, partition: int) -> int:
    """The partition's low watermark, as an unchanged client (librdkafka) sees it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "records-cli"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)
    finally:
        consumer.close()
    return int(low)


def test_delete_records_moves_the_log_start(broker: EmbeddedBroker, tmp_path: Path) -> None:
    path = offsets_file(tmp_path, [{"topic": TOPIC, "partition": 0, "offset": 4},
                                   {"topic": TOPIC, "partition": 1, "offset": -1}])
    proc = exactly("delete-records", "--bootstrap-server", broker.bootstrap,
                   "--offset-json-file", path)
    assert proc.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {TOPIC}-0\tlow_watermark: 4",
        f"partition: {TOPIC}-1\tlow_watermark: 10",  # -1: up to the high watermark
    ]
    assert log_start(broker.bootstrap, 0) == 4
    assert log_start(broker.bootstrap, 1) == 10


def test_delete_records_reports_each_failure_and_does_the_rest(broker: EmbeddedBroker,
                                                               tmp_path: Path) -> None:
    path = offsets_file(tmp_path, [{"topic": TOPIC, "partition": 0, "offset": 6},
                                   {"topic": TOPIC, "partition": 0 + 7, "offset": 1},
                                   {"topic": "other", "partition": 0, "offset": 99}])
    proc = exactly("delete-records", "--bootstrap-server", broker.bootstrap,
                   "--offset-json-file", path, check=False)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert f"partition: {TOPIC}-0\tlow_watermark: 6" in lines
    assert any(line.startswith(f"partition: {TOPIC}-7\terror: ")
               and "UNKNOWN_TOPIC_OR_PARTITION" in line for line in lines), lines
    assert any(line.startswith("partition: other-0\terror: ")
               and "OFFSET_OUT_OF_RANGE" in line for line in lines), lines
    assert log_start(broker.bootstrap, 0) == 6


@pytest.mark.parametrize("content, says", [
    ("not json", "is not JSON"),
    ('{"version": 1}', "expected"),
    ('{"partitions": [{"topic": "t", "partition": -1, "offset": 1}]}', "partitions[0] needs"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": "1"}]}', "partitions[0] needs"),
    (('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
      ' {"topic": "t", "partition": 0, "offset": 2}]}'), "more than once"),
])
def test_a_bad_offset_file_is_refused_before_anything_is_sent(tmp_path: Path, content: str,
                                                              says: str) -> None:
    path = tmp_path / "offsets.json"
    path.write_text(content)
    # No broker is there: the file is checked first.
    proc = exactly("delete-records", "--bootstrap-server", "127.0.0.1:1", "--offset-json-file",
                   str(path), check=False)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and str(path) in proc.stderr


def test_log_dirs_describe_prints_kafkas_json(broker: EmbeddedBroker) -> None:
    proc = exactly("log-dirs", "--describe", "--bootstrap-server", broker.bootstrap,
                   "--topic-list", f"{TOPIC},other")
    lines = proc.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1].startswith("Received log directory information from brokers ")
    doc = json.loads(lines[2])
    assert doc["version"] == 1
    (entry,) = doc["brokers"]
    (log_dir,) = entry["logDirs"]
    assert log_dir["error"] is None and Path(log_dir["logDir"]).is_dir()
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{TOPIC}-0", f"{TOPIC}-1", "other-0"}  # only the topics asked for
    assert sizes["other-0"] > 1000  # the 1000-byte record is in it
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])

    everything = json.loads(exactly("log-dirs", "--describe", "--bootstrap-server",
                                    broker.bootstrap).stdout.splitlines()[2])
    names = {p["partition"] for d in everything["brokers"][0]["logDirs"] for p in d["partitions"]}
    assert {f"{TOPIC}-0", "other-0"} <= names and any(n.startswith("__") for n in names)


def test_log_dirs_refuses_an_unknown_broker(broker: EmbeddedBroker) -> None:
    proc = exactly("log-dirs", "--describe", "--bootstrap-server", broker.bootstrap,
                   "--broker-list", "41", check=False)
    assert proc.returncode == 1
    assert "no broker with id 41" in proc.stderr


def test_no_broker_is_said_at_once(tmp_path: Path) -> None:
    from tests.integration.cli.test_first_contact_cli import _closed_port

    where = f"127.0.0.1:{_closed_port()}"
    path = offsets_file(tmp_path, [{"topic": TOPIC, "partition": 0, "offset": 1}])
    for args in (("delete-records", "--offset-json-file", path), ("log-dirs", "--describe")):
        proc = exactly(*args, "--bootstrap-server", where, "--timeout", "5000", check=False,
                       timeout=20)
        assert proc.returncode == 1 and proc.stdout == ""
        (line,) = proc.stderr.splitlines()
        assert line.startswith(f"error: no broker at {where} ("), line
