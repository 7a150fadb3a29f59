"""One broker per data directory (issue 14, item 1): a second broker on a directory in use exits
with status 1 and Kafka-like words, and the first broker's data stay whole; the lock dies with
its holder, kill -9 included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from exactly.server.data_dir import DataDirInUseError, DataDirLock
from exactly.testing import EmbeddedBroker
from tests.support import consume_confluent, create_topic, end_offsets


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[object] = []
    for n in range(start, start + count):
        producer.produce("locked", f"v{n}".encode(),
                         on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert producer.flush(30) == 0 and errors == []


def test_a_second_broker_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with EmbeddedBroker(data_dir=data) as first:
        create_topic(first.bootstrap, "locked")
        produce(first.bootstrap, 0, 1000)
        assert first.process is not None
        second = subprocess.run(
            [sys.executable, "-m", "exactly", "broker", "--data-dir", str(data), "--listen",
             "127.0.0.1:0"], check=False, capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL)
        assert second.returncode == 1, second.stderr
        assert second.stderr.strip().splitlines()[-1] == (
            f"error: data directory {data} is in use by another broker (pid {first.process.pid})")
        produce(first.bootstrap, 1000, 1000)  # the first broker goes on
        first.kill()  # the kernel drops the lock with its holder
        first.start()
        assert end_offsets(first.bootstrap, "locked", 1) == [2000]
        values = [m.value() for m in consume_confluent(first.bootstrap, "locked", 2000)]
        assert values == [f"v{n}".encode() for n in range(2000)]


def test_the_lock_in_one_process(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    lock.acquire()
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirInUseError, match=f"in use by another broker \\(pid {os.getpid()}\\)"):
        DataDirLock(tmp_path).acquire()
    lock.release()
    again = DataDirLock(tmp_path)
    again.acquire()
    again.release()
