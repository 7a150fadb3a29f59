"""A real broker in a child process, for tests, benchmarks and demos.

    with EmbeddedBroker(settings={"log.flush.policy": "os"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        ...
        broker.restart()            # SIGKILL, then start again on the same data and port

The broker runs as `python -m exactly broker` so that a test talks to it over TCP exactly as a
client would, and so that `kill()` is a real crash. Its stderr (the broker's log) goes to
`broker.log_path`, which start() registers (exactly.testing.logs): a test that fails while the
broker is open shows the end of it on its report, however the broker was started.

pytest fixtures (import them into conftest.py):
    broker          a started broker, stopped after the test; settings from
                    @pytest.mark.broker_settings({...})
    broker_factory  make(settings=..., data_dir=...) -> a started broker; all closed after the test

The rigs the project's own tests and benchmarks start beside it (Apache Kafka 4.4, the power-cut
filesystem, PostgreSQL, a Spark Connect server) lie in the repository's tests/rigs, outside this
package; the demo's Spark standalone cluster in exactly.demo.spark_cluster.

The hooks that put the logs on failed tests' reports are the pytest plugin
exactly.testing.logs (tests/conftest.py loads it).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

from exactly import failpoints
from exactly.testing.logs import ProcessLog, register_log
from exactly.testing.ports import free_port

if TYPE_CHECKING:
    from exactly.server.services import Services

LISTENING = re.compile(r"Exactly broker listening on (?P<host>\S+):(?P<port>\d+)")
LISTENER = re.compile(r"Exactly broker listener (?P<name>\w+) on (?P<host>\S+):(?P<port>\d+)")
KEEP_ENV = "EXACTLY_KEEP_BROKER_DATA"  # set to 1 to keep temporary data dirs for a post-mortem


class BrokerStartError(RuntimeError):
    """The broker process did not come up; the message carries its log."""


_live: weakref.WeakSet[EmbeddedBroker] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for b in list(_live):
        if b.process is not None and b.process.poll() is None:
            b.process.kill()


EMBEDDED_DEFAULTS = {"transaction.two.phase.commit.enable": "true"}


class EmbeddedBroker:
    """A broker process on a data directory that outlives restarts.

    data_dir: kept between start/stop/kill/restart; a temporary one (removed by close()) if
    None. settings: broker config keys, passed as --set. port 0 picks a free port on the first
    start; restarts ask for the same port again.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        settings: Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config_file: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._tmp_root: Path | None = None
        if data_dir is None or log_path is None:
            self._tmp_root = Path(tempfile.mkdtemp(prefix="exactly-broker-"))
        self.data_dir = Path(data_dir) if data_dir is not None else self._tmp_root / "data"  # type: ignore[operator]
        self.log_path = Path(log_path) if log_path is not None else self._tmp_root / "broker.log"  # type: ignore[operator]
        # The embedded broker takes part in two-phase commit unless told otherwise (KIP-939's
        # broker default is off; the embedded broker is for development, tests and demos).
        self.settings = {k: _text(v) for k, v in {**EMBEDDED_DEFAULTS, **(settings or {})}.items()}
        self.config_file = config_file
        self.startup_timeout = startup_timeout
        self.env = dict(env) if env is not None else None
        self._requested_host = host
        self._requested_port = port
        self.host: str = host
        self.port: int = port
        self.process: subprocess.Popen[bytes] | None = None
        self.stdout_lines: list[str] = []
        # {listener name: (host, port)} as bound, e.g. {"SASL_SSL": ("127.0.0.1", 40123)}
        self.listener_addresses: dict[str, tuple[str, int]] = {}
        self.starts = 0
        self._reader: threading.Thread | None = None
        self._listening = threading.Event()
        self._log: ProcessLog | None = None
        _live.add(self)

    # -- what tests use --

    @property
    def bootstrap(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def address(self, listener: str) -> str:
        """HOST:PORT of the named listener (settings={"listeners": "SASL_SSL://127.0.0.1:0"})."""
        host, port = self.listener_addresses[listener]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Self:
        """Start the process and return once it accepts connections.

        Port 0 means a port outside the kernel's ephemeral range (`exactly.testing.ports`), chosen
        at the first start and kept by restarts: clients reconnecting to a restarted broker cannot
        draw it as their own source port and connect to themselves."""
        if self.running:
            raise RuntimeError(f"broker already running on {self.bootstrap}")
        self._log = register_log(
            "broker", self.log_path, title=lambda: f"broker log {self.bootstrap}", lines=300,
            temporary=self._tmp_root is not None and self.log_path.is_relative_to(self._tmp_root)
            and not os.environ.get(KEEP_ENV))
        # After a first start, ask for the port clients already know.
        port = self.port if self.starts else self._requested_port
        for attempt in range(5):
            if port == 0:
                port = free_port(self._requested_host)
            log_size = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                self._spawn(port)
                return self
            except BrokerStartError:
                if self._requested_port != 0 or attempt == 4 or not self._port_taken(log_size):
                    raise
            # Another process took the port between its choice and the bind, or took the old
            # port while the broker was down: any other port will do.
            self._note(f"port {port} is taken; starting on another free port")
            port = 0
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not end in `timeout` s. Returns the exit code."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._note(f"did not stop {timeout:g}s after SIGTERM: killed")
                proc.kill()
                proc.wait()
        self._join_reader()
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL (a crash) and wait. Returns the exit code."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._join_reader()
        return proc.returncode

    def restart(self, kill: bool = True) -> Self:
        """kill() (or stop()) then start() on the same data dir and, if free, the same port."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    def close(self) -> None:
        """stop(), then remove the temporary directory (if this broker made one)."""
        try:
            self.stop()
        finally:
            _live.discard(self)
            if self._log is not None:
                self._log.close()  # (a test running keeps a temporary log: logs.py)
                self._log = None
            if self._tmp_root is not None and not os.environ.get(KEEP_ENV):
                shutil.rmtree(self._tmp_root, ignore_errors=True)
                self._tmp_root = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 200) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedBroker({self.bootstrap}, {state}, data_dir={str(self.data_dir)!r})"

    # -- machinery --

    def command(self, port: int) -> list[str]:
        host = f"[{self._requested_host}]" if ":" in self._requested_host else self._requested_host
        cmd = [
            sys.executable,
            "-m",
            "exactly",
            "broker",
            "--data-dir",
            str(self.data_dir),
        ]
        if "listeners" not in self.settings:
            cmd += ["--listen", f"{host}:{port}"]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in self.settings.items():
            if key == "listeners":
                value = self._listeners_again(value)
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def _listeners_again(self, text: str) -> str:
        """listeners with each port 0 replaced by the port bound before, so restarts keep them,
        or at the first start by a free port outside the ephemeral range."""
        out = []
        for part in text.split(","):
            name, _, rest = part.strip().partition("://")
            bound = self.listener_addresses.get(name.upper())
            if rest.endswith(":0"):
                host = rest[:-2]
                port = bound[1] if bound is not None else free_port(host.strip("[]") or "0.0.0.0")
                part = f"{name}://{host}:{port}"
            out.append(part.strip())
        return ",".join(out)

    def _note(self, text: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(f"----- [EmbeddedBroker {time.strftime('%H:%M:%S')}] {text}\n")

    def _spawn(self, port: int) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command(port)
        self.starts += 1
        self._note(f"start #{self.starts}: {' '.join(cmd)}")
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONUNBUFFERED"] = "1"
        self._listening = threading.Event()
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                env=env,
                # A fault point's crash kills its whole session, so a broker with fault points
                # armed gets a session of its own; no other does, because a session is also a
                # scheduling group of its own (autogroup), which changes what benchmarks measure.
                start_new_session=failpoints.ENV in env,
            )
        assert self.process.stdout is not None
        self._reader = threading.Thread(
            target=self._read_stdout,
            args=(self.process.stdout, self._listening),
            name=f"broker-stdout-{self.process.pid}",
            daemon=True,
        )
        self._reader.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self._listening.wait(0.02):
            if self.process.poll() is not None:
                self._join_reader()
                raise BrokerStartError(
                    f"broker exited with code {self.process.returncode} before listening\n"
                    f"command: {' '.join(cmd)}\n{self._log_for_error()}"
                )
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                self._join_reader()
                raise BrokerStartError(
                    f"broker did not print 'Exactly broker listening on HOST:PORT' within "
                    f"{self.startup_timeout:g}s (killed)\ncommand: {' '.join(cmd)}\n"
                    f"{self._log_for_error()}"
                )

    def _port_taken(self, since: int) -> bool:
        with open(self.log_path, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        text = text.lower()
        return "address already in use" in text or "the address is in use" in text

    def _log_for_error(self) -> str:
        out = "".join(self.stdout_lines[-20:])
        return (
            f"--- broker stdout ---\n{out}--- broker stderr ({self.log_path}) ---\n"
            f"{self.log_tail(80)}"
        )

    def _read_stdout(self, stream: IO[bytes], listening: threading.Event) -> None:
        # Also keeps the pipe drained, so a chatty broker never blocks on a full pipe.
        with stream:
            for raw in stream:
                line = raw.decode(errors="replace")
                self.stdout_lines.append(line)
                named = LISTENER.search(line)
                if named:
                    self.listener_addresses[named["name"]] = (named["host"], int(named["port"]))
                if not listening.is_set():
                    m = LISTENING.search(line)
                    if m:
                        self.host = m["host"]
                        self.port = int(m["port"])
                        listening.set()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
            self._reader = None


@contextlib.asynccontextmanager
async def broker_in_process(settings: Mapping[str, str] | None = None,
                            ) -> AsyncIterator[Services]:
    """A broker on this process's event loop, on a temporary data directory and a free port of
    127.0.0.1; yields its services. For measuring the broker's own code without a second
    process (bench/txn_cpu.py); tests of behaviour use EmbeddedBroker, which is a real process.
    """
    from exactly.server.broker import Broker
    from exactly.server.config import BrokerConfig

    with tempfile.TemporaryDirectory(prefix="exactly-in-process-") as data:
        config = BrokerConfig.from_sources(None, {
            "listeners": "PLAINTEXT://127.0.0.1:0", **(settings or {}), "log.dirs": data})
        broker = Broker(config)
        await broker.start()
        try:
            yield broker.services
        finally:
            await broker.stop()


@dataclass(frozen=True)
class TestCertificates:
    """PEM files for TLS tests, made by make_test_certificates()."""

    __test__ = False  # not a pytest test class

    ca: Path  # the CA certificate: ssl.ca.location / ssl.truststore.location
    server: Path  # server certificate (CN=localhost, SAN localhost + 127.0.0.1) and key
    client_cert: Path  # a client certificate, subject CN=alice,O=Exactly, signed by the CA
    client_key: Path
    client_principal: str = "User:CN=alice,O=Exactly"


def make_test_certificates(directory: str | os.PathLike[str]) -> TestCertificates:
    """A throwaway CA, a server certificate for localhost/127.0.0.1 and a client certificate,
    made with the openssl command (EC P-256 keys, unencrypted)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
        "-subj", "/CN=Exactly Test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                  "extendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (("server", "/CN=localhost"), ("client", "/O=Exactly/CN=alice")):
        run("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "30", "-extfile", f"{name}.ext")
    (d / "server.pem").write_text((d / "server.crt").read_text() + (d / "server.key").read_text())
    return TestCertificates(d / "ca.pem", d / "server.pem", d / "client.crt", d / "client.key")


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
    @pytest.fixture
    def broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
        """A started broker on a temporary data dir; settings from
        @pytest.mark.broker_settings({"key": "value"})."""
        marker = request.node.get_closest_marker("broker_settings")
        settings = dict(marker.args[0]) if marker and marker.args else {}
        if marker:
            settings.update(marker.kwargs)
        b = EmbeddedBroker(settings=settings)
        try:
            b.start()
            yield b
        finally:
            b.close()

    @pytest.fixture
    def broker_factory() -> Iterator[Callable[..., EmbeddedBroker]]:
        """make(**EmbeddedBroker kwargs) -> a started broker. All are closed after the test."""
        made: list[EmbeddedBroker] = []

        def make(**kwargs: Any) -> EmbeddedBroker:
            b = EmbeddedBroker(**kwargs)
            made.append(b)
            return b.start()

        try:
            yield make
        finally:
            for b in made:
                b.close()
