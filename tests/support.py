"""Helpers shared by the tests that drive a broker process with real Kafka clients."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                 replication: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication, config=config or {})],
                                  operation_timeout=10)
    futures[name].result(timeout=20)


def produce_confluent(bootstrap: str, topic: str, values: list[bytes], *, keys: list[bytes] | None = None,
                      compression: str = "none", extra: dict | None = None) -> list[tuple[int, int]]:
    """Idempotent, acks=all; returns (partition, offset) per record, raising on any delivery error."""
    errors: list[KafkaError] = []
    placed: dict[int, tuple[int, int]] = {}

    def on_delivery(i: int) -> Callable:
        def cb(err: KafkaError | None, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                placed[i] = (msg.partition(), msg.offset())
        return cb

    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "compression.type": compression, "linger.ms": 5}
    conf.update(extra or {})
    producer = Producer(conf)
    for i, value in enumerate(values):
        key = keys[i] if keys else None
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery(i))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not errors, errors[:5]
    return [placed[i] for i in range(len(values))]


def consume_confluent(bootstrap: str, topic: str, count: int, *, group: str | None = None,
                      timeout: float = 60, extra: dict | None = None) -> list:
    """Read `count` records from the beginning; returns the confluent Message objects."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group or f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra or {})
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count} records"
    return got


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """High watermark of each partition."""
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPET = re.compile(r"<!-- snippet: (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)```", re.DOTALL)


def readme_snippets() -> dict[str, str]:
    """The README's Python blocks that follow a `<!-- snippet: NAME -->` line, by name."""
    return {m["name"]: m["code"] for m in SNIPPET.finditer(README.read_text())}


def run_snippet(name: str, replacements: dict[str, str], tmp_path: Path,
                timeout: float = 600, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> str:
    """Run the README's snippet `name` as a program of its own (a fresh process, as a user would
    run it), with the `replacements` made (each must occur: e.g. localhost:9092 -> a test
    broker), in `tmp_path` unless `cwd` is given; its stdout. Fails the test with its output if
    it exits non-zero."""
    code = readme_snippets()[name]
    for old, new in replacements.items():
        assert old in code, f"snippet {name} no longer contains {old!r}"
        code = code.replace(old, new)
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "EXACTLY_FAILPOINTS")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd or tmp_path,
                          env={**environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"snippet {name} failed:\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-6000:]}"
    return proc.stdout
