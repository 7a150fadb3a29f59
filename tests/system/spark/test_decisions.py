"""The decisions topic of exactly-once streams (issue 13, item 7), against a broker over TCP: it is
created compacted with small segments, stays small as decisions pile up (the broker's cleaner
keeps the newest per query), and a reader reads only what is new since it last asked."""

from __future__ import annotations

import time
from pathlib import Path

from exactly.client import Admin, NewTopic
from exactly.spark.decisions import (
    TOPIC_CONFIGS,
    Decision,
    DecisionReader,
    ensure_topic,
    latest_decision,
    record_decision,
)

SMALL = {**TOPIC_CONFIGS, "segment.bytes": "4096"}  # rolls every few dozen decisions


def test_the_topic_is_created_compacted_with_small_segments(broker) -> None:
    client = {"bootstrap.servers": broker.bootstrap}
    ensure_topic(client, "decisions-a")
    with Admin(client) as admin:
        configs = admin.describe_configs("decisions-a")
    assert {k: configs[k].value for k in TOPIC_CONFIGS} == TOPIC_CONFIGS


def test_a_reader_reads_only_what_is_new(broker) -> None:
    client = {"bootstrap.servers": broker.bootstrap}
    ensure_topic(client, "decisions-b")
    reader = DecisionReader(client, "decisions-b")
    assert reader.latest("q") is None
    for batch in range(5):
        record_decision(client, "decisions-b", Decision("q", batch, {"q-0": f"state-{batch}"}, "id"))
    record_decision(client, "decisions-b", Decision("other", 9, {}, "id2"))
    assert reader.latest("q") == Decision("q", 4, {"q-0": "state-4"}, "id")
    assert reader.records_read == 6
    record_decision(client, "decisions-b", Decision("q", 5, {"q-0": "state-5"}, "id"))
    assert reader.latest("q").batch == 5
    assert reader.latest("other").batch == 9
    assert reader.records_read == 7  # one new record read, not the history again
    assert latest_decision(client, "decisions-b", "q").batch == 5


def test_the_topic_stays_small_as_decisions_pile_up(broker_factory) -> None:
    broker = broker_factory(settings={"log.cleaner.backoff.ms": "100"})
    client = {"bootstrap.servers": broker.bootstrap}
    with Admin(client) as admin:
        admin.create_topics([NewTopic("decisions-c", 1, -1, SMALL)])
    for batch in range(300):
        record_decision(client, "decisions-c",
                        Decision("query", batch, {f"query-{p}": "x" * 40 for p in range(4)}, "id"))
    partition = Path(broker.data_dir) / "decisions-c-0"
    deadline = time.monotonic() + 30
    size = sum(p.stat().st_size for p in partition.glob("*.log"))
    while size > 3 * 4096 and time.monotonic() < deadline:
        time.sleep(0.2)
        size = sum(p.stat().st_size for p in partition.glob("*.log"))
    assert size <= 3 * 4096, f"{size} bytes of decisions on disk"
    fresh = DecisionReader(client, "decisions-c")  # a new Python worker: reads from the start
    assert fresh.latest("query").batch == 299
    assert fresh.records_read < 60, fresh.records_read
