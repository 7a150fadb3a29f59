"""The broker: wires the log, the coordinators and the handlers to the network server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from exactly.groups import GroupConfig, GroupCoordinator
from exactly.log import LogManager, PartitionLog
from exactly.server import network
from exactly.server.acl import make_authorizer
from exactly.server.auth import ScramCredentialStore
from exactly.server.config import ConfigError, load_or_create_meta
from exactly.server.flusher import Flusher
from exactly.server.handlers import HANDLERS
from exactly.server.transactions import finish, recover
from exactly.txn import TransactionCoordinator, TxnConfig
from exactly.txn.producer_ids import ProducerIdManager

if TYPE_CHECKING:
    from exactly.server.config import BrokerConfig

log = logging.getLogger("exactly.broker")

TICK_SECONDS = 0.1


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.handlers = HANDLERS
        self.socket_request_max_bytes: int = config["socket.request.max.bytes"]
        self.log_dir = config.log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = load_or_create_meta(config)
        # None unless authorizer.class.name is set: then every request is allowed.
        self.authorizer = make_authorizer(config)
        self.logs = LogManager(self.log_dir, config.log_config())
        self.groups = GroupCoordinator(
            self.logs,
            GroupConfig(
                initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                min_session_timeout_ms=config["group.min.session.timeout.ms"],
                max_session_timeout_ms=config["group.max.session.timeout.ms"],
                offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
                offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            ),
            now_ms=self.now_ms(),
        )
        self.producer_ids = ProducerIdManager(self.log_dir / "producer_ids")
        self.txn = TransactionCoordinator(
            self.logs,
            self.producer_ids,
            TxnConfig(
                num_partitions=config["transaction.state.log.num.partitions"],
                max_timeout_ms=config["transaction.max.timeout.ms"],
                transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
            ),
            now_ms=self.now_ms(),
        )
        self.transaction_version: int = config["transaction.version"]
        self.finalized_features = {"transaction.version": self.transaction_version}
        self.flusher = Flusher(config.log_config().flush_policy)
        self.connections: set[Any] = set()
        self.advertised_host = ""
        self.advertised_port = 0
        self._append_waiters: dict[PartitionLog, set[asyncio.Future[None]]] = {}
        self._server: asyncio.Server | None = None
        self.listeners: list[tuple[asyncio.Server, Any]] = []
        self.scram_credentials = ScramCredentialStore(self.log_dir)
        self._tasks: list[asyncio.Task[None]] = []
        # Transactional id -> set once its markers are written (exactly.server.transactions).
        self.markers_in_progress: dict[str, asyncio.Event] = {}
        self.background_tasks: set[asyncio.Task[None]] = set()  # markers after an EndTxn answer
        self._metrics: Any = None  # exactly.server.metrics.MetricsServer when metrics.listen is set
        self.metrics_enabled = bool(config["metrics.listen"])

    # -- time, durability, wake-ups -------------------------------------------------------

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Return once everything appended to `logs` so far is durable under the flush policy."""
        await self.flusher.sync(logs)

    def notify_append(self, partition_log: PartitionLog) -> None:
        """Wake the fetches long-polling on this partition."""
        waiters = self._append_waiters.pop(partition_log, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_append(self, logs: Iterable[PartitionLog], timeout: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        logs = list(logs)
        for plog in logs:
            self._append_waiters.setdefault(plog, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            for plog in logs:
                waiters = self._append_waiters.get(plog)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._append_waiters[plog]

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        await recover(self)  # before any client: no transaction is left half-finished
        self.listeners = await network.start_listeners(self)  # [(server, ListenerRuntime)]
        self._server, first = self.listeners[0]
        sock = self._server.sockets[0].getsockname()
        bound_host, bound_port = sock[0], sock[1]
        # What a handler without a connection's listener advertises: the first listener.
        self.advertised_host, self.advertised_port = first.advertised_host, first.advertised_port
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        self._tasks.append(asyncio.create_task(self._transaction_timeout_loop()))
        self._tasks.append(asyncio.create_task(self._producer_expiration_loop()))
        await self._start_metrics()
        return bound_host, bound_port

    async def _start_metrics(self) -> None:
        """The Prometheus endpoint, if metrics.listen is set (prometheus-client loaded only then)."""
        if not self.config["metrics.listen"]:
            return
        from exactly.server.metrics import MetricsServer, parse_listen

        host, port = parse_listen(self.config["metrics.listen"])  # type: ignore[misc]
        self._metrics = MetricsServer(self)
        bound = await self._metrics.start(host, port)
        print(f"Exactly metrics on http://{bound[0]}:{bound[1]}/metrics", flush=True)
        log.info("metrics served on http://%s:%d/metrics", bound[0], bound[1])

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                self.groups.tick(self.now_ms())
            except Exception:
                log.exception("group coordinator tick failed")

    async def _retention_loop(self) -> None:
        interval = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                deleted = self.logs.apply_retention(self.now_ms())
                if deleted:
                    log.info("retention deleted %d segment(s)", deleted)
            except Exception:
                log.exception("retention check failed")

    async def _transaction_timeout_loop(self) -> None:
        interval = self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                for markers in self.txn.tick(self.now_ms()):
                    log.info("transaction %r timed out: aborting it", markers.transactional_id)
                    await finish(self, markers)
            except Exception:
                log.exception("transaction timeout check failed")

    async def _producer_expiration_loop(self) -> None:
        interval = self.config["producer.id.expiration.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.logs.expire_producers(self.now_ms(), self.config["producer.id.expiration.ms"])
            except Exception:
                log.exception("producer id expiration failed")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            for server, _ in self.listeners[1:]:
                server.close()
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        if self._metrics is not None:
            await self._metrics.stop()
        if self.background_tasks:
            # Markers of answered commits: let them land rather than leave them to recovery.
            _, late = await asyncio.wait(set(self.background_tasks), timeout=10)
            for task in late:
                task.cancel()
        self.logs.close()


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
    log.info("broker %d of cluster %s serving %s:%d, advertised %s:%d, data in %s",
             broker.node_id, broker.cluster_id, host, port, broker.advertised_host,
             broker.advertised_port, broker.log_dir)
    await stop.wait()
    log.info("shutting down")
    await broker.stop()


def run(config: BrokerConfig) -> None:
    """Run a broker in the foreground until SIGINT or SIGTERM."""
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
