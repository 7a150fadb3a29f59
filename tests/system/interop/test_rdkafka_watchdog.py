"""A consume-transform-produce worker on librdkafka never sits for good in a transactional call.

tests/system/test_eos_pipeline.py's broker-kill test stopped short: its group's committed offsets
never reached the end, with the workers running. Their librdkafka logs (debug=eos,broker) showed
why: after a broker kill the producer re-bootstraps ("Transaction coordinator decommissioned",
"Starting re-bootstrap sequence"), its cached group coordinator is the decommissioned broker
handle ("Handle is terminating"), and send_offsets_to_transaction, once AddOffsetsToTxn is
answered, never sends its TxnOffsetCommit nor returns, whatever its timeout (librdkafka #5456,
#5511, open in 2.16). The worker's consumer then cannot join the next rebalance (served by the
application's poll), so the whole group waits.

The same happens against Apache Kafka 4.4 (a one-node cluster killed and restarted): nothing in
the broker's answers causes it. The workers bound the call (tests/workers/rdkafka_watchdog.py) and,
crash-only, exit and are restarted. Here the sequence is played step by step
(tests/workers/rebootstrap_probe.py): the probe must come back, one way or the other, within its
timeout and grace. Without the bound it blocks until this test's own deadline.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exactly.testing import EmbeddedBroker
from exactly.testing.logs import attach_log
from tests.paths import WORKERS
from tests.support import create_topic, produce_confluent
from tests.workers.rdkafka_watchdog import EXIT_STATUS

PROBE = WORKERS / "rebootstrap_probe.py"


def _line(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert time.monotonic() < deadline, "the probe took too long"
    return line


@pytest.mark.parametrize("target", ["exactly", "kafka"])
def test_send_offsets_after_a_rebootstrap_returns_or_the_worker_exits(
        tmp_path: Path, target: str, broker_factory: Callable[..., EmbeddedBroker],
        apache_kafka_factory: Callable[..., Any]) -> None:
    log = tmp_path / "probe.log"
    attach_log("rebootstrap probe", log)
    settings = {"group.initial.rebalance.delay.ms": "0"}
    if target == "kafka":
        broker = apache_kafka_factory(settings=settings)
        kill, start = (lambda: broker.kill(1)), (lambda: broker.start(1))
    else:
        broker = broker_factory(settings=settings)
        kill, start = broker.kill, broker.start
    create_topic(broker.bootstrap, "probe-in")
    create_topic(broker.bootstrap, "probe-out")
    produce_confluent(broker.bootstrap, "probe-in", [b"a", b"b", b"c"])
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, str(PROBE), broker.bootstrap, "probe-in",
                                 "probe-out"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True)
    try:
        deadline = time.monotonic() + 120
        assert _line(proc, deadline) == "committed"
        kill()
        assert _line(proc, deadline) == "decommissioned"
        start()
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # TIMEOUT_S + GRACE_S = 5 s in the probe; 60 s leaves room for a loaded machine.
        try:
            status = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("send_offsets_to_transaction is still blocked 60 s after "
                                 "it was called with a 3 s timeout") from None
    finally:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None
    rest = proc.stdout.read()
    stderr = log.read_text()
    if status == EXIT_STATUS:  # librdkafka blocked: the watchdog ended the process
        assert "send_offsets_to_transaction has not returned" in stderr
    else:  # a librdkafka that honours its timeout
        assert status == 0 and ("returned" in rest or "raised" in rest), (status, rest)
