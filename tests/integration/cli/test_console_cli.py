"""`exactly produce` and `exactly consume` on Exactly's own client (issue 18: confluent-kafka is
needed by tests and benchmarks only), run as a user runs them, against a real broker over TCP:
they work with confluent_kafka unimportable, a large produce from a pipe reports its progress,
settings the client does not know are named, --partition/--offset read one partition from an
offset, and Ctrl-C ends both cleanly."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from exactly.client import Admin, Consumer, NewTopic, Producer
from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly

# Runs `exactly ARGS...` with confluent_kafka unimportable, as after `pip install exactly`.
BLOCK_CONFLUENT = """
import sys

class _NoConfluent:
    def find_spec(self, name, path=None, target=None):
        if name == "confluent_kafka" or name.startswith("confluent_kafka."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, _NoConfluent())
from exactly.cli.main import main
sys.argv[0] = "exactly"
main()
"""


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _create(broker: EmbeddedBroker, topic: str, partitions: int = 1) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions)])


def test_produce_and_consume_without_confluent_kafka(broker: EmbeddedBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(broker, "console-plain", partitions=2)
    run = [sys.executable, "-c", BLOCK_CONFLUENT]
    produced = subprocess.run([*run, "produce", "console-plain", *bs, "--key-separator", ":"],
                              input="k1:one\nk2:two\nk3:three\n", capture_output=True, text=True,
                              timeout=60, check=False)
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr == "Produced 3 record(s) to console-plain.\n"
    consumed = subprocess.run([*run, "consume", "console-plain", *bs, "--from-beginning",
                               "--print-key", "--max-messages", "3"],
                              capture_output=True, text=True, timeout=60, check=False)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == ["k1\tone", "k2\ttwo", "k3\tthree"]
    assert consumed.stderr == "Processed a total of 3 messages\n"


def test_a_large_produce_from_a_pipe_reports_progress(broker: EmbeddedBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(broker, "console-large")
    lines = "".join(f"{i}\n" for i in range(250_000))
    proc = exactly("produce", "console-large", *bs, input=lines, timeout=120)
    assert proc.stderr.splitlines() == ["sent 100000 records", "sent 200000 records",
                                        "Produced 250000 record(s) to console-large."]
    # A small run says only how it ended.
    proc = exactly("produce", "console-large", *bs, input="one more\n")
    assert proc.stderr == "Produced 1 record(s) to console-large.\n"
    consumed = exactly("consume", "console-large", *bs, "--partition", "0", "--offset", "249999",
                       "--max-messages", "2")
    assert consumed.stdout.splitlines() == ["249999", "one more"]
    # `| head` closes the pipe early: the consumer stops quietly, no BrokenPipeError at exit
    # (where Python flushes stdout's buffer: buffered, as a user's shell has it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    piped = subprocess.run(f"{shlex.quote(sys.executable)} -m exactly consume console-large "
                           f"--bootstrap-server {broker.bootstrap} --from-beginning | head -n 2",
                           shell=True, capture_output=True, text=True, timeout=60, check=True,
                           env=env)
    assert piped.stdout.splitlines() == ["0", "1"]
    assert piped.stderr.startswith("Processed a total of "), piped.stderr
    assert len(piped.stderr.splitlines()) == 1, piped.stderr


def test_settings_the_client_does_not_know_are_named(broker: EmbeddedBroker, tmp_path) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    # A file written for librdkafka or the Java client: its own keys are skipped, with a word.
    props = tmp_path / "producer.properties"
    props.write_text("linger.ms=1\nqueue.buffering.max.messages=1000\n")
    proc = exactly("produce", "console-settings", *bs, "--producer.config", str(props),
                   "--producer-property", "no.such.setting=1", input="a\n")
    assert proc.stderr.splitlines() == [
        (f"warning: {props}: queue.buffering.max.messages is not a setting of Exactly's "
         "client; ignored"),
        ("warning: --producer-property: no.such.setting is not a setting of Exactly's client; "
         "ignored"),
        "Produced 1 record(s) to console-settings."]
    proc = exactly("consume", "console-settings", *bs, "--from-beginning", "--max-messages", "1",
                   "--property", "print.timestamp=true")
    assert proc.stdout == "a\n"
    assert proc.stderr.splitlines()[0] == ("warning: --property: print.timestamp is not a "
                                           "setting of Exactly's client; ignored")
    # A known key with a bad value stops the command before it sends anything.
    proc = exactly("produce", "console-settings", *bs, "--producer-property", "acks=most",
                   input="b\n", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: bad producer settings: bad value 'most' for acks")
    proc = exactly("consume", "console-settings", *bs, "--consumer-property",
                   "auto.offset.reset=never", check=False)
    assert proc.returncode == 2
    assert "bad value 'never' for auto.offset.reset" in proc.stderr


def test_partition_and_offset(broker: EmbeddedBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(broker, "console-parts", partitions=2)
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for i in range(5):
            producer.send("console-parts", f"p1-{i}", partition=1)
        producer.send("console-parts", "p0-0", partition=0)
    out = exactly("consume", "console-parts", *bs, "--partition", "1", "--offset", "2",
                  "--max-messages", "3").stdout
    assert out.splitlines() == ["p1-2", "p1-3", "p1-4"]
    out = exactly("consume", "console-parts", *bs, "--partition", "1", "--offset", "earliest",
                  "--timeout-ms", "1500").stdout
    assert out.splitlines() == [f"p1-{i}" for i in range(5)]
    proc = exactly("consume", "console-parts", *bs, "--partition", "7", check=False)
    assert proc.returncode == 1
    assert "error: topic 'console-parts' has no partition 7 (it has 2)" in proc.stderr
    proc = exactly("consume", "console-parts", *bs, "--offset", "1", check=False)
    assert proc.returncode == 2 and "--offset needs --partition" in proc.stderr
    proc = exactly("consume", "console-parts", *bs, "--partition", "0", "--offset", "-3",
                   check=False)
    assert proc.returncode == 2 and "'-3' is not an offset" in proc.stderr
    proc = exactly("consume", "console-nosuch", *bs, "--timeout", "5000", check=False)
    assert proc.returncode == 1
    assert proc.stderr == "error: topic 'console-nosuch' does not exist\n"


def _ended(proc: subprocess.Popen[str], what: str, timeout: float = 20) -> tuple[str, str]:
    """The process's output once it has ended; if it has not within `timeout` seconds after its
    Ctrl-C, its threads' stacks (faulthandler, on SIGABRT) in the failure."""
    try:
        proc.wait(timeout=timeout)  # stdin left open: communicate() would close it
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=20)
        raise AssertionError(f"{what} still running {timeout:.0f} s after Ctrl-C; "
                             f"its stderr and stacks:\n{err}") from None
    return proc.communicate(timeout=20)


def test_ctrl_c_ends_both_cleanly(broker: EmbeddedBroker) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(broker, "console-ctrl-c")
    cmd = [sys.executable, "-m", "exactly"]
    # PYTHONFAULTHANDLER: a process that does not end is sent SIGABRT, and its threads' stacks
    # go to the report.
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    producer = subprocess.Popen([*cmd, "produce", "console-ctrl-c", *bs], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    consumer = subprocess.Popen([*cmd, "consume", "console-ctrl-c", *bs, "--from-beginning"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert producer.stdin is not None and consumer.stdout is not None
        producer.stdin.write("typed\n")
        producer.stdin.flush()
        assert consumer.stdout.readline() == "typed\n"  # sent, delivered and read: both busy
        producer.send_signal(signal.SIGINT)
        consumer.send_signal(signal.SIGINT)
        # stdin stays open until the producer is gone: the Ctrl-C alone must end it.
        _, produce_err = _ended(producer, "exactly produce")
        _, consume_err = _ended(consumer, "exactly consume")
    finally:
        for proc in (producer, consumer):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert producer.returncode == 130, produce_err
    assert produce_err == "Produced 1 record(s) to console-ctrl-c.\n"
    assert consumer.returncode == 0, consume_err
    assert consume_err == "Processed a total of 1 messages\n"


def test_a_broker_killed_mid_produce_fails_it_within_the_timeout() -> None:
    with EmbeddedBroker() as broker:
        _create(broker, "console-killed")
        producer = subprocess.Popen(
            [sys.executable, "-m", "exactly", "produce", "console-killed", "--bootstrap-server",
             broker.bootstrap, "--timeout", "3000"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert producer.stdin is not None
            producer.stdin.write("before\n")
            producer.stdin.flush()
            with Consumer({"bootstrap.servers": broker.bootstrap,
                           "auto.offset.reset": "earliest"}) as consumer:
                consumer.assign([("console-killed", 0)])
                assert [r.value for r in consumer.poll(20_000)] == [b"before"]
            broker.kill()
            producer.stdin.write("after\n")
            producer.stdin.close()
            assert producer.wait(timeout=30) == 1
            assert producer.stderr is not None
            err = producer.stderr.read()
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
    # "before" was written, but its acknowledgement may have been lost with the broker.
    produced, error = err.splitlines()
    acknowledged = re.fullmatch(r"Produced (\d) record\(s\) to console-killed\.", produced)
    failed = re.match(r"error: (\d) record\(s\) not acknowledged; the first error: ", error)
    assert acknowledged and failed, err
    assert int(acknowledged[1]) + int(failed[1]) == 2, err
    assert "delivery.timeout.ms (3000 ms)" in error
