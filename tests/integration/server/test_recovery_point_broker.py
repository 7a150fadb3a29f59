"""The recovery-point checkpoint of a real broker (issue 13, item 4): written every
`log.flush.offset.checkpoint.interval.ms`; after kill -9 the restart recovers each partition from
it, and every acknowledged record is there, over TCP with confluent-kafka."""

from __future__ import annotations

import re
import time
from pathlib import Path

from exactly.log.checkpoints import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from exactly.testing import EmbeddedBroker
from tests.support import consume_confluent, create_topic, end_offsets, produce_confluent

TOTAL = 3000


def wait_for_checkpoint(path: Path, expected: dict[tuple[str, int], int], timeout: float = 30
                        ) -> dict[tuple[str, int], int]:
    deadline = time.monotonic() + timeout
    found = read_checkpoint(path)
    while time.monotonic() < deadline:
        found = read_checkpoint(path)
        if all(found.get(key) == offset for key, offset in expected.items()):
            break
        time.sleep(0.1)
    return found


def test_recovery_point_checkpoint_survives_kill9() -> None:
    settings = {"log.flush.offset.checkpoint.interval.ms": 200, "log.flush.policy": "fsync"}
    with EmbeddedBroker(settings=settings) as broker:
        create_topic(broker.bootstrap, "points", partitions=2)
        values = [str(i).encode() * 20 for i in range(TOTAL)]
        placed = produce_confluent(broker.bootstrap, "points", values,
                                   keys=[str(i % 5).encode() for i in range(TOTAL)])
        ends = [1 + max((o for p, o in placed if p == partition), default=-1)
                for partition in range(2)]
        assert sum(ends) == TOTAL
        path = broker.data_dir / RECOVERY_POINT_CHECKPOINT
        # acks=all under fsync: everything is flushed, so the next checkpoint holds the ends.
        expected = {("points", p): ends[p] for p in range(2)}
        found = wait_for_checkpoint(path, expected)
        assert {k: v for k, v in found.items() if k[0] == "points"} == expected

        log_before = len(broker.log_text())
        broker.kill()
        broker.start()
        restart_log = broker.log_text()[log_before:]
        for partition in range(2):
            # Recovered from the checkpoint: nothing after it to validate.
            assert re.search(rf"event=segment_recovered dir=\S+points-{partition} segment=0 "
                             rf"from_offset={ends[partition]} validated_bytes=0 ",
                             restart_log), restart_log[-3000:]
        assert end_offsets(broker.bootstrap, "points", 2) == ends
        records = consume_confluent(broker.bootstrap, "points", TOTAL, timeout=60)
        where = {(m.partition(), m.offset()): m.value() for m in records}
        assert where == {placed[i]: values[i] for i in range(TOTAL)}
