"""The exactly-once pipeline driven by a Spark Connect client (issue 15, item 4).

The driver is a Spark Connect server (tests.rigs.spark_connect.SparkConnectServer, local[2], from
the jars of the `pyspark` package); the application is a thin gRPC client that registers the
`exactly` data source through Connect and runs readStream -> transform -> writeStream on a
checkpoint.

The client runs in a process of its own, this module run as a program (`main` below): PySpark
refuses a Connect session in a process that has a classic one ([SESSION_ALREADY_EXIST] Cannot
start a remote Spark session because there is a regular Spark session already running), which
tests/system/spark/conftest.py's session-wide `spark` may be, and a Connect session made first would
switch pyspark.sql.functions to Connect columns for the classic tests after it.

- The pipeline end to end: the output read back with read_committed is the transformed input.
- The server (the driver) killed in the middle of the query, by `SparkConnectServer.kill()`
  while a task is in mid-write, or by a fault point's crash once a batch's decision is recorded:
  the server is started again, the client notices, opens a new session against it and starts
  the query again on the same checkpoint; the output is the transformed input exactly, and no
  transaction of the query is left open.
- A server whose Python lacks `exactly`, the package shipped the Connect way
  (`SparkSession.addArtifacts(zip, pyfile=True)`, by exactly.spark.ship): a batch read works; a
  stream does not in Spark 4.3 (ModuleNotFoundError: No module named 'exactly'), the limit the
  README states.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exactly import failpoints
from exactly.spark.decisions import latest_decision
from exactly.spark.options import DECISIONS_TOPIC
from exactly.testing import EmbeddedBroker
from tests.paths import REPO
from tests.rigs.spark_connect import SparkConnectServer
from tests.support import create_topic
from tests.system.spark.test_stream_faults import (
    _name,
    difference,
    feed,
    read_committed,
    still_open,
)

RECORDS = 400
MAX_OFFSETS = 100  # micro-batches of 100 offsets: 0..3
CLIENT_TIMEOUT = 420.0
QUERY_FAILED = 3  # the client's exit code when the query itself failed
PAUSED = "event=failpoint point=spark.task.write action=pause"

pytestmark = pytest.mark.timeout(900)


# -- the Connect client: this module run as a program -------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """Run the query through Connect until it has processed its whole input; on losing the
    server, open a new session (waiting for the server to come back) and start the query again
    on the same checkpoint. Exit 0 when done, QUERY_FAILED when the query failed."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    from exactly.spark import register, ship
    from tests.workers.spark_stream_worker import transform

    parser = argparse.ArgumentParser(description=main.__doc__)
    for name in ("remote", "bootstrap", "src", "dst", "checkpoint", "name"):
        parser.add_argument(name)
    parser.add_argument("--ship", action="store_true", help="exactly.spark.ship(spark) first")
    parser.add_argument("--batch-read", action="store_true",
                        help="print how many records a batch read of src returns first")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + CLIENT_TIMEOUT
    sessions = 0
    while True:
        sessions += 1
        spark: Any = SparkSession.builder.remote(args.remote).getOrCreate()
        # While the server is away, retry every 2 s at most, for 4 min (the default backs off
        # to a minute between tries, which would only make the test slower).
        spark.client.set_retry_policies([DefaultPolicy(max_retries=120, max_backoff=2000)])
        try:
            if args.ship:
                ship(spark)
            register(spark)
            if args.batch_read:
                count = (spark.read.format("exactly").option("kafka.bootstrap.servers",
                                                             args.bootstrap)
                         .option("subscribe", args.src).load().count())
                print(f"batch-read {count}", flush=True)
            source = (spark.readStream.format("exactly")
                      .option("kafka.bootstrap.servers", args.bootstrap)
                      .option("subscribe", args.src).option("startingOffsets", "earliest")
                      .option("maxOffsetsPerTrigger", MAX_OFFSETS).load())
            query = (transform(source).writeStream.format("exactly").queryName(args.name)
                     .option("kafka.bootstrap.servers", args.bootstrap)
                     .option("topic", args.dst)
                     .option("checkpointLocation", args.checkpoint).start())
            print(f"session {sessions}: query started", flush=True)
            query.processAllAvailable()
            query.stop()
            print(f"done in session {sessions}", flush=True)
            return 0
        except StreamingQueryException as exc:  # the query failed, the server is there
            print(f"query failed: {exc}", flush=True)
            return QUERY_FAILED
        except Exception as exc:  # the server went away: [NO_ACTIVE_SESSION] once it is back
            print(f"session {sessions} lost: {type(exc).__name__}: {str(exc)[:300]}",
                  flush=True)
            with contextlib.suppress(Exception):
                spark.stop()
            if sessions >= 4 or time.monotonic() > deadline:
                raise


class Client:
    """The client process; its output goes to `log`."""

    def __init__(self, server: SparkConnectServer, bootstrap: str, src: str, dst: str,
                 checkpoint: Path, name: str, log: Path, *extra: str) -> None:
        self.log = log
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.pop(failpoints.ENV, None)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.system.spark.test_connect", server.remote, bootstrap,
                 src, dst, str(checkpoint), name, *extra], cwd=REPO, env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = CLIENT_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the client did not end in {timeout:.0f} s\n"
                                 f"{self.output()[-6000:]}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class ConnectPipeline:
    """A query from a new input topic to a new output topic, run by Connect clients."""

    def __init__(self, bootstrap: str, server: SparkConnectServer, tmp: Path) -> None:
        self.bootstrap, self.server, self.tmp = bootstrap, server, tmp
        self.src, self.dst, self.name = _name("in"), _name("out"), _name("q")
        self.checkpoint = tmp / "checkpoint"
        create_topic(bootstrap, self.src, partitions=2)
        create_topic(bootstrap, self.dst, partitions=2)
        self.expected = feed(bootstrap, self.src, RECORDS)
        self.clients: list[Client] = []

    def client(self, *extra: str) -> Client:
        client = Client(self.server, self.bootstrap, self.src, self.dst, self.checkpoint,
                        self.name, self.tmp / f"client-{len(self.clients)}.log", *extra)
        self.clients.append(client)
        return client

    def report(self) -> str:
        clients = "\n".join(f"--- client {i} ---\n{c.output()[-4000:]}"
                            for i, c in enumerate(self.clients))
        return f"{clients}\n--- server log ({self.server.log_path}) ---\n" \
               f"{self.server.log_tail(40)}"

    def check(self) -> None:
        """The output is the transformed input exactly; no transaction of the query is open."""
        got = difference(self.expected, read_committed(self.bootstrap, self.dst))
        assert got == (0, 0), f"(duplicates, missing) = {got}\n{self.report()}"
        assert still_open(self.bootstrap, self.name) == []

    def close(self) -> None:
        for client in self.clients:
            client.kill()


# -- fixtures -----------------------------------------------------------------------------------

@pytest.fixture
def connect_server() -> Iterator[Callable[..., SparkConnectServer]]:
    """make(**SparkConnectServer kwargs) -> a started server; all closed after the test."""
    made: list[SparkConnectServer] = []

    def make(**kwargs: Any) -> SparkConnectServer:
        server = SparkConnectServer(conf={"spark.sql.shuffle.partitions": "2"}, **kwargs)
        made.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in made:
            server.close()


@pytest.fixture
def pipelines() -> Iterator[list[ConnectPipeline]]:
    made: list[ConnectPipeline] = []
    try:
        yield made
    finally:
        for pipe in made:
            pipe.close()


def _pipeline(made: list[ConnectPipeline], broker: EmbeddedBroker, server: SparkConnectServer,
              tmp: Path) -> ConnectPipeline:
    pipe = ConnectPipeline(broker.bootstrap, server, tmp)
    made.append(pipe)
    return pipe


# -- the tests ----------------------------------------------------------------------------------

def test_pipeline_from_a_connect_client(connect_server: Callable[..., SparkConnectServer],
                                        spark_broker: EmbeddedBroker,
                                        pipelines: list[ConnectPipeline],
                                        tmp_path: Path) -> None:
    server = connect_server()
    pipe = _pipeline(pipelines, spark_broker, server, tmp_path)
    client = pipe.client()
    assert client.wait() == 0, pipe.report()
    pipe.check()
    decision = latest_decision({"bootstrap.servers": spark_broker.bootstrap}, DECISIONS_TOPIC,
                               f"exactly-spark-{pipe.name}")
    assert decision is not None and decision.batch >= 3, decision  # 4 micro-batches or more


def _wait_for_mid_write(pipe: ConnectPipeline, client: Client, timeout: float = 240) -> None:
    """Until a task pauses in mid-write (fault point spark.task.write=pause; the server's log
    holds its Python workers' stderr, where the fault point says so) and the broker has its
    transaction open: the rows it sent before the pause may still be on their way."""
    deadline = time.monotonic() + timeout
    while not (PAUSED in pipe.server.log_path.read_text(errors="replace")
               and still_open(pipe.bootstrap, pipe.name)):
        assert client.proc.poll() is None, f"the client ended early\n{pipe.report()}"
        assert time.monotonic() < deadline, f"no task in mid-write\n{pipe.report()}"
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["kill-mid-write", "crash-after-decision"])
def test_connect_server_killed_mid_query(connect_server: Callable[..., SparkConnectServer],
                                         spark_broker: EmbeddedBroker,
                                         pipelines: list[ConnectPipeline], tmp_path: Path,
                                         how: str) -> None:
    if how == "kill-mid-write":
        # the tasks of batches 1.. wait 5 s in mid-write, their transactions open: time to kill
        server = connect_server(env={failpoints.ENV: "spark.task.write=pause:5@1"})
    else:
        # the driver's commit of batch 1 kills the server once the decision is recorded
        server = connect_server(env={failpoints.ENV: "spark.driver.after_decision=crash@1"})
    pipe = _pipeline(pipelines, spark_broker, server, tmp_path)
    client = pipe.client()
    if how == "kill-mid-write":
        _wait_for_mid_write(pipe, client)
        assert server.kill() == -9
    else:
        assert server.wait(timeout=300) == -9, pipe.report()
    # the dead driver left the batch in doubt: transactions of the query are open
    assert still_open(spark_broker.bootstrap, pipe.name), pipe.report()
    server.env.pop(failpoints.ENV)
    server.start()
    assert client.wait() == 0, pipe.report()
    output = client.output()
    assert "session 1 lost" in output and "done in session 2" in output, pipe.report()
    pipe.check()


def test_shipped_through_connect_serves_batch_reads_not_streams(
        connect_server: Callable[..., SparkConnectServer], spark_broker: EmbeddedBroker,
        pipelines: list[ConnectPipeline], lean_python: Path, tmp_path: Path) -> None:
    """Server workers whose Python lacks exactly, the package shipped by addArtifacts. Spark 4.3
    gives the Python worker of a streaming source the includes of `<SparkFiles root>/
    streaming_job` (PythonStreamingSourceRunner), where a Connect session's artifacts never are,
    and the stream's write tasks do not find them either: the stream fails. If this test fails
    because the stream ran, Spark has lifted the limit: update the README."""
    server = connect_server(python=str(lean_python))
    pipe = _pipeline(pipelines, spark_broker, server, tmp_path)
    client = pipe.client("--ship", "--batch-read")
    assert client.wait() == QUERY_FAILED, pipe.report()
    output = client.output()
    assert f"batch-read {RECORDS}" in output, pipe.report()
    assert "Failed to plan Python data source initialize source" in output, pipe.report()
    assert "ModuleNotFoundError: No module named 'exactly'" in output, pipe.report()


if __name__ == "__main__":
    sys.exit(main())
