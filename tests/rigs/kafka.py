"""Apache Kafka 4.4 in child processes, beside Exactly, for tests and benchmarks.

    with ApacheKafka() as kafka:                  # one node: controller and broker in one JVM
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
    with ApacheKafka(nodes=3) as cluster:         # three combined nodes, KRaft quorum of three
        cluster.kill(2)                           # SIGKILL node 2
        cluster.start(2)                          # and bring it back on its data and ports

Kafka is the reference implementation of every KIP Exactly builds on, the peer in its
benchmarks and the engine of its scale-out path. It runs here exactly as `kafka-server-start.sh`
would run it: the `kafka.Kafka` main class, on the classpath that scripts/kafka-deps.sh resolves
from Maven Central (interop/jvm/pom.xml), storage formatted by Kafka's own StorageTool. Nothing
is downloaded by hand.

Each node is a KRaft process with `process.roles=broker,controller` on loopback ports, with a
static voter set of every node. Defaults follow a small production cluster: default replication
factor 3 and `min.insync.replicas=2` on three nodes (1 and 1 on one node), internal topics
replicated the same way, KIP-939's `transaction.two.phase.commit.enable=true`, and transaction
version 2 (Kafka 4.4's default feature level). `settings` override any of them.

Each node's output (log4j2 to stderr, INFO) goes to `node_log(node_id)`, registered by the
node's start (exactly.testing.logs): a test that fails while the cluster is open shows it on its
report.

pytest fixtures (import them into conftest.py):
    apache_kafka          a started one-node Kafka, stopped after the test; settings from
                          @pytest.mark.kafka_settings({...})
    apache_kafka_factory  make(nodes=..., settings=...) -> a started Kafka; closed after the test
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from exactly.testing.logs import ProcessLog, register_log
from exactly.testing.ports import NoFreePort, free_port

KEEP_ENV = "EXACTLY_KEEP_BROKER_DATA"  # set to 1 to keep temporary data dirs for a post-mortem
ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is tests/rigs/kafka.py)
CLASSPATH_FILE_ENV = "EXACTLY_KAFKA_CLASSPATH_FILE"

# JVM flags of Kafka's own kafka-run-class.sh (its KAFKA_JVM_PERFORMANCE_OPTS).
KAFKA_JVM_FLAGS = (
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)

LOG4J2_CONFIG = """\
Configuration:
  Appenders:
    Console:
      name: STDERR
      target: SYSTEM_ERR
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDERR
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: INFO
"""


class KafkaStartError(RuntimeError):
    """A Kafka node did not come up; the message carries its log."""


class KafkaSetupError(RuntimeError):
    """Kafka's classpath could not be resolved (Maven, Java)."""


_live: weakref.WeakSet[ApacheKafka] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for k in list(_live):
        for proc in k._procs.values():
            if proc.poll() is None:
                proc.kill()


def kafka_classpath() -> str:
    """The classpath of Kafka 4.4 and its tools: $EXACTLY_KAFKA_CLASSPATH_FILE, else the file
    scripts/kafka-deps.sh writes (it is run when the file is missing or stale)."""
    named = os.environ.get(CLASSPATH_FILE_ENV)
    if named:
        return Path(named).read_text().strip()
    script = ROOT / "scripts" / "kafka-deps.sh"
    if not script.exists():
        raise KafkaSetupError(
            f"no {CLASSPATH_FILE_ENV} and no {script}: ApacheKafka runs from a checkout of "
            "Exactly, or with the classpath of kafka_2.13 4.4 in a file named by "
            f"{CLASSPATH_FILE_ENV}")
    done = subprocess.run(["bash", str(script), "--print"], check=False, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise KafkaSetupError(f"scripts/kafka-deps.sh failed:\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1]).read_text().strip()


def java_command() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaSetupError("no java: Kafka 4.4 needs Java 17 or later (JAVA_HOME or PATH)")
    return found


def _node_port(host: str, taken: set[int]) -> int:
    try:
        return free_port(host, taken)
    except NoFreePort as exc:
        raise KafkaStartError(str(exc)) from exc


def _cluster_id() -> str:
    """A random id in Kafka's form; as Kafka's Uuid.randomUuid, never one starting with '-',
    which a command line would read as an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class ApacheKafka:
    """Apache Kafka 4.4 with `nodes` combined controller+broker nodes (ids 1..nodes).

    data_dir: where each node's storage and log live; temporary (removed by close()) if None.
    settings: server.properties keys for every node, over the defaults described above.
    heap: the JVM heap of each node (-Xmx; -Xms is a quarter of it, so an idle node stays small).
    """

    def __init__(
        self,
        nodes: int = 1,
        settings: Mapping[str, Any] | None = None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        heap: str = "512m",
        jvm_flags: tuple[str, ...] = KAFKA_JVM_FLAGS,
        startup_timeout: float = 120.0,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        self.nodes = nodes
        self.node_ids = list(range(1, nodes + 1))
        self.host = host
        self.heap = heap
        self.jvm_flags = tuple(jvm_flags)
        self.startup_timeout = startup_timeout
        self._tmp_root: Path | None = None
        if data_dir is None:
            self._tmp_root = Path(tempfile.mkdtemp(prefix="exactly-apache-kafka-"))
            data_dir = self._tmp_root
        self.data_dir = Path(data_dir)
        self.cluster_id = _cluster_id()
        self._pick_ports()
        self.settings = {k: _text(v) for k, v in (settings or {}).items()}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._classpath: str | None = None
        self._formatted = False
        self.starts = {n: 0 for n in self.node_ids}
        self._logs: dict[int, ProcessLog] = {}
        _live.add(self)

    # -- what tests use --

    @property
    def bootstrap(self) -> str:
        """Every running node's HOST:PORT, comma-separated (all nodes when none runs)."""
        running = [n for n in self.node_ids if self.running(n)] or self.node_ids
        return ",".join(self.address(n) for n in running)

    def address(self, node_id: int) -> str:
        return f"{self.host}:{self.ports[node_id]}"

    def running(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.poll() is None

    def pid(self, node_id: int) -> int:
        return self._procs[node_id].pid

    def node_log(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}.log"

    def log_tail(self, node_id: int, lines: int = 200) -> str:
        try:
            text = self.node_log(node_id).read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self, node_id: int | None = None) -> Self:
        """Start every node (None) or one, and return once each started node serves: its
        broker answers Metadata listing every running node."""
        ids = self.node_ids if node_id is None else [node_id]
        for n in ids:
            if self.running(n):
                raise RuntimeError(f"Kafka node {n} is already running on {self.address(n)}")
        first = not self._formatted
        for attempt in range(3):
            if not self._formatted:
                self._format()
            for n in ids:
                self._spawn(n)
            deadline = time.monotonic() + self.startup_timeout
            try:
                for n in ids:
                    self._wait_serving(n, deadline)
                return self
            except KafkaStartError:
                # A port taken by another process between choosing and binding it: on a first
                # start nothing is stored yet, so start over on other ports.
                if not (first and attempt < 2 and self._port_taken(ids)):
                    raise
                for n in ids:
                    self.kill(n)
                    self._note(n, "a port was taken meanwhile: starting over on other ports")
                    shutil.rmtree(self.data_dir / f"node-{n}", ignore_errors=True)
                self._formatted = False
                self._pick_ports()
        raise AssertionError("unreachable")

    def kill(self, node_id: int) -> int | None:
        """SIGKILL one node (a crash) and wait. Returns the exit code."""
        proc = self._procs.get(node_id)
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._note(node_id, "killed (SIGKILL)")
        return proc.returncode

    def stop(self, node_id: int | None = None, timeout: float = 60.0) -> None:
        """SIGTERM (a controlled shutdown) every node or one, SIGKILL after `timeout` s."""
        ids = self.node_ids if node_id is None else [node_id]
        procs = [(n, self._procs[n]) for n in ids if n in self._procs]
        for _, proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for n, proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._note(n, f"did not stop {timeout:g}s after SIGTERM: killed")
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """stop() (SIGKILL at once: the data is thrown away), then remove the temporary dir."""
        try:
            for n in self.node_ids:
                self.kill(n)
        finally:
            _live.discard(self)
            for entry in self._logs.values():
                entry.close()  # (a test running keeps a temporary log: logs.py)
            self._logs.clear()
            if self._tmp_root is not None and not os.environ.get(KEEP_ENV):
                shutil.rmtree(self._tmp_root, ignore_errors=True)
                self._tmp_root = None

    def tool(self, main_class: str, *args: str, timeout: float = 120.0,
             ) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's tools (e.g. org.apache.kafka.tools.ProducerPerformance) on the
        same classpath, as its shell script would."""
        cmd = [java_command(), "-Xmx256m", "-cp", self.classpath,
               f"-Dlog4j2.configurationFile={self._log4j_config()}", main_class, *args]
        return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)

    @property
    def classpath(self) -> str:
        if self._classpath is None:
            self._classpath = kafka_classpath()
        return self._classpath

    def properties(self, node_id: int) -> dict[str, str]:
        """The node's server.properties, defaults and settings merged."""
        n = self.nodes
        voters = ",".join(f"{i}@{self.host}:{self.controller_ports[i]}" for i in self.node_ids)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": (f"PLAINTEXT://{self.host}:{self.ports[node_id]},"
                          f"CONTROLLER://{self.host}:{self.controller_ports[node_id]}"),
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.ports[node_id]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / f"node-{node_id}"),
            "default.replication.factor": str(min(3, n)),
            "min.insync.replicas": str(min(2, n)),
            "offsets.topic.replication.factor": str(min(3, n)),
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": str(min(2, n)),
            "share.coordinator.state.topic.replication.factor": str(min(3, n)),
            "share.coordinator.state.topic.min.isr": str(min(2, n)),
            "group.initial.rebalance.delay.ms": "0",
            # KIP-939: Kafka's broker default is off; Exactly's embedded broker has it on.
            "transaction.two.phase.commit.enable": "true",
        }
        props.update(self.settings)
        return props

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        up = [n for n in self.node_ids if self.running(n)]
        return f"ApacheKafka(nodes={self.nodes}, running={up}, bootstrap={self.bootstrap!r})"

    # -- machinery --

    def _pick_ports(self) -> None:
        taken: set[int] = set()
        self.ports = {n: _node_port(self.host, taken) for n in self.node_ids}
        self.controller_ports = {n: _node_port(self.host, taken) for n in self.node_ids}

    def _port_taken(self, ids: list[int]) -> bool:
        return any("Address already in use" in self.log_tail(n, 400) for n in ids)

    def _properties_file(self, node_id: int) -> Path:
        path = self.data_dir / f"node-{node_id}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(node_id).items()))
        return path

    def _log4j_config(self) -> Path:
        path = self.data_dir / "log4j2.yaml"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(LOG4J2_CONFIG)
        return path

    def _java(self, main_class: str, *args: str, heap: str = "256m") -> list[str]:
        return [java_command(), f"-Xmx{heap}", "-cp", self.classpath,
                f"-Dlog4j2.configurationFile={self._log4j_config()}", main_class, *args]

    def _format(self) -> None:
        """Kafka's StorageTool formats each node's log dir (in parallel: a JVM each)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        running = []
        for n in self.node_ids:
            cmd = self._java("kafka.tools.StorageTool", "format", "--ignore-formatted",
                             "-t", self.cluster_id, "-c", str(self._properties_file(n)))
            running.append((n, cmd, subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        for n, cmd, proc in running:
            out, _ = proc.communicate(timeout=self.startup_timeout)
            if proc.returncode != 0:
                raise KafkaStartError(
                    f"Kafka's StorageTool failed for node {n} (exit {proc.returncode})\n"
                    f"command: {' '.join(cmd)}\n{out}")
        self._formatted = True

    def _heap_flags(self) -> list[str]:
        size = self.heap.strip().lower()
        num, unit = int(size[:-1]), size[-1]
        initial = f"{max(1, num // 4)}{unit}"
        return [f"-Xmx{self.heap}", f"-Xms{initial}"]

    def _spawn(self, node_id: int) -> None:
        props = self._properties_file(node_id)
        cmd = [java_command(), *self._heap_flags(), *self.jvm_flags,
               f"-Dlog4j2.configurationFile={self._log4j_config()}",
               "-cp", self.classpath, "kafka.Kafka", str(props)]
        self.starts[node_id] += 1
        self._logs[node_id] = register_log(
            f"Apache Kafka node {node_id}", self.node_log(node_id), lines=300,
            temporary=self._tmp_root is not None and not os.environ.get(KEEP_ENV))
        self._note(node_id, f"start #{self.starts[node_id]}: {' '.join(cmd[:3])} ... kafka.Kafka "
                            f"{props}")
        with open(self.node_log(node_id), "ab") as log:
            self._procs[node_id] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def _wait_serving(self, node_id: int, deadline: float) -> None:
        proc = self._procs[node_id]
        while True:
            if proc.poll() is not None:
                raise KafkaStartError(
                    f"Kafka node {node_id} exited with code {proc.returncode} before serving\n"
                    f"--- node {node_id} log ({self.node_log(node_id)}) ---\n"
                    f"{self.log_tail(node_id, 80)}")
            try:
                listed = metadata_brokers(self.host, self.ports[node_id], timeout=2.0)
            except OSError:
                listed = set()
            want = {n for n in self.node_ids if self.running(n)} | {node_id}
            if want <= listed:
                return
            if time.monotonic() > deadline:
                raise KafkaStartError(
                    f"Kafka node {node_id} did not list nodes {sorted(want)} in Metadata within "
                    f"{self.startup_timeout:g}s (lists {sorted(listed)})\n"
                    f"--- node {node_id} log ({self.node_log(node_id)}) ---\n"
                    f"{self.log_tail(node_id, 80)}")
            time.sleep(0.2)

    def _note(self, node_id: int, text: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.node_log(node_id), "a", encoding="utf-8") as f:
            f.write(f"----- [ApacheKafka {time.strftime('%H:%M:%S')}] node {node_id}: {text}\n")


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> set[int]:
    """The node ids a broker lists in a Metadata v1 answer (no topics): a raw request, so a
    node is known to serve clients without any client library."""
    # Metadata v1: header v1 (api key 3, version 1, correlation id, client id), topics = [] .
    client_id = b"exactly-testing"
    body = struct.pack(">hhih", 3, 1, 1, len(client_id)) + client_id + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read(s, 4))[0]
        data = _read(s, size)
    # correlation id (4), brokers: count, then node_id, host, port, rack per broker.
    pos = 4
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    ids = set()
    for _ in range(count):
        node, hlen = struct.unpack_from(">ih", data, pos)
        pos += 6 + hlen + 4
        (rlen,) = struct.unpack_from(">h", data, pos)
        pos += 2 + max(rlen, 0)
        ids.add(node)
    return ids


def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- pytest ----------------------------------------------------------------------------------

try:
    import pytest
except ImportError:  # pytest is a test dependency; the class above works without it
    pass
else:
    _KAFKAS = pytest.StashKey[list[ApacheKafka]]()

    def track(node: Any, kafka: ApacheKafka) -> None:
        """Attach `kafka`'s node logs to `node`'s report if the test fails."""
        node.stash.setdefault(_KAFKAS, []).append(kafka)

    def tracked(node: Any) -> list[ApacheKafka]:
        return list(node.stash.get(_KAFKAS, []))

    @pytest.fixture
    def apache_kafka(request: pytest.FixtureRequest) -> Iterator[ApacheKafka]:
        """A started one-node Apache Kafka 4.4; settings from
        @pytest.mark.kafka_settings({"key": "value"})."""
        marker = request.node.get_closest_marker("kafka_settings")
        settings = dict(marker.args[0]) if marker and marker.args else {}
        if marker:
            settings.update(marker.kwargs)
        kafka = ApacheKafka(settings=settings)
        track(request.node, kafka)
        with contextlib.ExitStack() as stack:
            stack.callback(kafka.close)
            kafka.start()
            yield kafka

    @pytest.fixture
    def apache_kafka_factory(request: pytest.FixtureRequest,
                             ) -> Iterator[Callable[..., ApacheKafka]]:
        """make(**ApacheKafka kwargs) -> a started Kafka. All are closed after the test."""
        made: list[ApacheKafka] = []

        def make(**kwargs: Any) -> ApacheKafka:
            kafka = ApacheKafka(**kwargs)
            made.append(kafka)
            track(request.node, kafka)
            return kafka.start()

        try:
            yield make
        finally:
            for kafka in made:
                kafka.close()

    def report_sections(item: pytest.Item) -> list[tuple[str, str]]:
        """Each node log of the Kafkas a test used: tracked ones and fixture values."""
        seen: list[ApacheKafka] = tracked(item)
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, ApacheKafka) and value not in seen:
                seen.append(value)
        return [(f"Apache Kafka node {n} log ({k.node_log(n)})", k.log_tail(n, 300))
                for k in seen for n in k.node_ids]

