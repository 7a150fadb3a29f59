"""The broker: builds the services (services.py), wires them to the network, and runs the timers.

Nothing else holds the broker: request handlers, the network and the metrics receive the
`Services` and use the parts they name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from exactly.groups import GroupCoordinator
from exactly.log import LogManager
from exactly.log.errors import CorruptRecordError
from exactly.log.files import mkdir_durably
from exactly.server import network
from exactly.server.acl import make_authorizer
from exactly.server.appends import AppendService
from exactly.server.auth import ListenerRuntime, ScramCredentialStore
from exactly.server.config import ConfigError, load_or_create_meta
from exactly.server.connection_limits import ConnectionLimits
from exactly.server.data_dir import DataDirLock
from exactly.server.dynamic_config import DynamicBrokerConfig, apply_to
from exactly.server.handlers.api_versions import FIXED_FEATURES
from exactly.server.log_cleaning import CleanerService
from exactly.server.services import BrokerIdentity, Services, wall_clock_ms
from exactly.server.startup import StartupError, data_dir_error, listen_error
from exactly.server.transactions import TransactionDriver
from exactly.share import ShareCoordinator
from exactly.txn import TransactionCoordinator
from exactly.txn.producer_ids import ProducerIdManager

if TYPE_CHECKING:
    from exactly.server.config import BrokerConfig
    from exactly.server.metrics import MetricsServer

log = logging.getLogger("exactly.broker")

TICK_SECONDS = 0.1


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.log_dir = config.log_dir
        self._lock = DataDirLock(self.log_dir)
        try:
            mkdir_durably(self.log_dir)
            self._lock.acquire()  # before anything in the directory is read
        except OSError as exc:
            raise data_dir_error(self.log_dir, exc) from exc
        clock = wall_clock_ms
        dynamic_config = DynamicBrokerConfig(config, self.log_dir)
        config = dynamic_config.effective  # the static config under the stored dynamic values
        logs = LogManager(self.log_dir, config.log_config())
        producer_ids = ProducerIdManager(self.log_dir / "producer_ids")
        try:
            groups = GroupCoordinator(logs, config.group_config(), now_ms=clock())
            txn = TransactionCoordinator(logs, producer_ids, config.txn_config(), now_ms=clock())
            share = ShareCoordinator(logs, config.share_config(), now_ms=clock())
            # KIP-848's group configs are kept with the share groups' in one config store.
            groups.consumer.group_configs = lambda g: share.other_configs.get(g, {})
        except CorruptRecordError as exc:
            # A coordinator that skipped a damaged batch could bring back an older state of a
            # transaction or an offset: better not to start, and say where the damage is.
            raise StartupError(
                f"cannot load the coordinators' state: {exc}; `exactly log verify --data-dir "
                f"{self.log_dir}` lists what is damaged") from exc
        appends = AppendService(config.log_config().flush_policy)
        self._cleaning = CleanerService(logs, config.cleaner_config(), clock)
        transaction_version: int = config["transaction.version"]
        self.services = Services(
            logs=logs,
            cleaner=self._cleaning.cleaner,
            txn=txn,
            producer_ids=producer_ids,
            groups=groups,
            transactions=TransactionDriver(
                coordinator=txn, groups=groups, logs=logs, appends=appends, clock=clock,
                transaction_version=transaction_version,
                verification_enabled=config["transaction.partition.verification.enable"],
                share=share),
            appends=appends,
            # None unless authorizer.class.name is set: then every request is allowed.
            authorizer=make_authorizer(config),
            credentials=ScramCredentialStore(self.log_dir),
            identity=BrokerIdentity(
                node_id=config["node.id"], cluster_id=load_or_create_meta(config),
                finalized_features={"transaction.version": transaction_version,
                                    **FIXED_FEATURES}),
            config=config,
            clock=clock,
            share=share,
            dynamic_config=dynamic_config,
        )
        self.connections: set[network.Connection] = set()
        self.limits = ConnectionLimits.from_config(config)
        dynamic_config.on_change(apply_to(logs, self._cleaning, self.limits))
        self.listeners: list[tuple[asyncio.Server, ListenerRuntime]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._metrics: MetricsServer | None = None  # when metrics.listen is set

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Recover, listen, start the timers; returns the first listener's bound address."""
        services, config = self.services, self.config
        await services.transactions.recover()  # before any client: nothing left half-finished
        self.listeners = await network.start_listeners(services, self.connections, self.limits)
        bound = self.listeners[0][0].sockets[0].getsockname()
        idle_ms = config["connections.max.idle.ms"]
        self._every(min(idle_ms / 10_000, network.TRIM_AFTER_SECONDS), "idle connections",
                    lambda: self._sweep_idle(idle_ms / 1000))
        self._every(TICK_SECONDS, "group coordinator tick",
                    lambda: services.groups.tick(services.clock()))
        self._every(TICK_SECONDS, "share coordinator tick",
                    lambda: services.share.tick(services.clock()))
        self._every(config["log.retention.check.interval.ms"] / 1000, "retention check",
                    self._apply_retention)
        self._every(config["log.flush.offset.checkpoint.interval.ms"] / 1000,
                    "recovery point checkpoint", self._checkpoint)
        self._every(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000,
                    "transaction timeout check", services.transactions.abort_timed_out)
        self._every(TICK_SECONDS, "transaction deadline check", self._abort_due_transactions)
        self._every(config["producer.id.expiration.check.interval.ms"] / 1000,
                    "producer id expiration", self._expire_producers)
        self._cleaning.start()
        await self._start_metrics()
        return bound[0], bound[1]

    @property
    def advertised(self) -> tuple[str, int]:
        """What the first listener advertises."""
        first = self.listeners[0][1]
        return first.advertised_host, first.advertised_port

    def _every(self, seconds: float, what: str,
               action: Callable[[], Awaitable[None] | None]) -> None:
        """Run `action` (a plain function or a coroutine function) every `seconds`."""
        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    pending = action()
                    if pending is not None:
                        await pending
                except Exception:
                    log.exception("%s failed", what)
        self._tasks.append(asyncio.create_task(loop()))

    async def _checkpoint(self) -> None:
        """Every log.flush.offset.checkpoint.interval.ms: fsync the logs (in a worker thread; a
        no-op for what log.flush.policy=fsync synced already), write their recovery points, and
        snapshot the producer state of each log that grew. A start after a crash then validates
        and replays at most one interval's writes, under either flush policy."""
        logs = self.services.logs
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, logs.flush_all, logs.logs())
        logs.checkpoint_recovery_points()
        writes = logs.snapshot_producer_states()
        await loop.run_in_executor(None, lambda: [write() for write in writes])

    def _sweep_idle(self, idle_seconds: float) -> None:
        """connections.max.idle.ms: close the connections that sent nothing for longer and wait
        for no answer; trim the buffers of those silent for a while."""
        now = time.monotonic()
        trim_cutoff = now - network.TRIM_AFTER_SECONDS
        for conn in self.connections:
            if conn.last_active < trim_cutoff:
                conn.trim()
        cutoff = now - idle_seconds
        idle = [conn for conn in self.connections if conn.last_active < cutoff and conn.is_quiet]
        for conn in idle:
            log.info("event=connection_idle_closed peer=%s idle_ms=%d", conn.peer,
                     (time.monotonic() - conn.last_active) * 1000)
            conn.close()

    async def _abort_due_transactions(self) -> None:
        """Abort as soon as a transaction's timeout or session deadline passes, not up to
        transaction.abort.timed.out.transaction.cleanup.interval.ms later (Kafka's bar)."""
        services = self.services
        deadline = services.txn.next_deadline_ms()
        if deadline is not None and services.clock() >= deadline:
            await services.transactions.abort_timed_out()

    def _expire_producers(self) -> None:
        self.services.logs.expire_producers(self.services.clock(),
                                            self.config["producer.id.expiration.ms"])

    def _apply_retention(self) -> None:
        deleted = self.services.logs.apply_retention(self.services.clock())
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)

    async def _start_metrics(self) -> None:
        """The Prometheus endpoint, if metrics.listen is set (prometheus-client loaded only then)."""
        if not self.config["metrics.listen"]:
            return
        from exactly.server.metrics import MetricsServer, parse_listen

        host, port = parse_listen(self.config["metrics.listen"])  # type: ignore[misc]
        self._metrics = MetricsServer(self.services)
        try:
            bound = await self._metrics.start(host, port)
        except OSError as exc:
            raise listen_error("metrics.listen", host, port, exc) from exc
        print(f"Exactly metrics on http://{bound[0]}:{bound[1]}/metrics", flush=True)
        log.info("metrics served on http://%s:%d/metrics", bound[0], bound[1])

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for server, _ in self.listeners:
            server.close()
        # Before the connections close: their share sessions end with the broker, not with them
        # (nothing is released, as nothing acquired is durable).
        self.services.share.stop()
        for conn in list(self.connections):
            conn.close()
        if self.listeners:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.listeners[0][0].wait_closed(), 2)
        if self._metrics is not None:
            await self._metrics.stop()
        await self.services.transactions.stop()
        await self._cleaning.stop()
        self.services.logs.close()
        self._lock.release()


async def serve(config: BrokerConfig) -> None:
    broker = Broker(config)
    host, port = await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    for server, listener in broker.listeners:  # before the line EmbeddedBroker waits for
        bound = server.sockets[0].getsockname()
        print(f"Exactly broker listener {listener.name} on {bound[0]}:{bound[1]}", flush=True)
    print(f"Exactly broker listening on {host}:{port}", flush=True)
    identity = broker.services.identity
    log.info("broker %d of cluster %s serving %s:%d, advertised %s:%d, data in %s",
             identity.node_id, identity.cluster_id, host, port, *broker.advertised,
             broker.log_dir)
    await stop.wait()
    log.info("shutting down")
    await broker.stop()


# A thread that waits for the GIL gets it after this long at most (the interpreter's default is
# 5 ms). The broker's threads (fsync rounds, the log cleaner, checkpoints) take the GIL back
# several times per task: at 5 ms each, an acks=all answer under fsync waited 50-250 ms whenever
# the event loop was busy (issue 14: a Metadata flood), against 10-20 ms at this interval.
SWITCH_INTERVAL_SECONDS = 0.0005


def run(config: BrokerConfig) -> None:
    """Run a broker in the foreground until SIGINT or SIGTERM."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
