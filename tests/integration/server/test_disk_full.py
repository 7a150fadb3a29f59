"""A full disk (issue 14, item 7): a broker whose data directory is on a 24 MiB tmpfs answers
KAFKA_STORAGE_ERROR once it is full, logs it at ERROR, counts it on /metrics, and serves what it
acknowledged before. (The tests run as root on this machine, which can mount a tmpfs.)"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from exactly.testing import EmbeddedBroker
from tests.integration.server.test_compaction import _metrics_url, read_all
from tests.support import create_topic


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_an_error_and_loses_nothing_acknowledged(small_disk: Path) -> None:
    with EmbeddedBroker(data_dir=small_disk / "data",
                        settings={"metrics.listen": "127.0.0.1:0", "log.flush.policy": "os",
                                  "offsets.topic.num.partitions": "1",
                                  "transaction.state.log.num.partitions": "1"}) as broker:
        create_topic(broker.bootstrap, "filling")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "linger.ms": 5, "retries": 0, "enable.idempotence": False})
        acknowledged: list[bytes] = []
        errors: list[int] = []

        def report(err: KafkaError | None, msg: object) -> None:
            if err is None:
                acknowledged.append(msg.value())  # type: ignore[attr-defined]
            else:
                errors.append(err.code())

        n = 0
        while not errors and n < 100_000:
            for _ in range(50):
                producer.produce("filling", f"{n:08d}".encode() * 128, on_delivery=report)
                n += 1
            producer.flush(30)
        assert KafkaError.KAFKA_STORAGE_ERROR in errors, errors[:5]
        assert "ERROR exactly.produce produce to filling-0 failed: KAFKA_STORAGE_ERROR" in \
            broker.log_text()
        with urllib.request.urlopen(_metrics_url(broker), timeout=10) as answer:
            metrics = answer.read().decode()
        counted = [line for line in metrics.splitlines()
                   if line.startswith("exactly_log_storage_errors_total")]
        assert counted and float(counted[0].split()[-1]) >= 1
        assert [v for _, _, v in read_all(broker.bootstrap, "filling")] == acknowledged
