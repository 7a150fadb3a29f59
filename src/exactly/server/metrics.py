"""Prometheus metrics: an HTTP `/metrics` endpoint on `metrics.listen` (off unless set).

Two kinds of metric:
- per request, fed by the network server through `observe_request`: request count and latency
  per API, bytes in and out;
- the broker's state, read at scrape time by `BrokerCollector` (nothing polls): the seed's
  `active-transaction-open-time-max` (KIP-939), transactions by state, and each partition's last
  stable offset lag behind its high watermark (an open transaction holds read_committed back),
  and the log cleaner's progress: bytes read and written, records removed, the last clean's time
  and duration, and each compacted partition's dirty ratio (Kafka's LogCleaner metrics); writes
  that failed for the disk's sake, and corrupt batches fetches found (log/checked_reads.py).

The HTTP server runs on the broker's event loop, so the collector reads the coordinator and the
logs on the same thread that changes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from exactly.log.errors import UnknownTopicOrPartitionError
from exactly.protocol.apis import api_name
from exactly.txn.state import TxnState

if TYPE_CHECKING:
    from exactly.server.services import Services

log = logging.getLogger("exactly.metrics")

# One registry per process: the broker is one process, and a registry of our own keeps the
# client library's default process/platform collectors (and any test's) out of it.
REGISTRY = CollectorRegistry(auto_describe=True)

_REQUESTS = Counter("exactly_requests", "Requests handled, per API.", ["api"], registry=REGISTRY)
_LATENCY = Histogram(
    "exactly_request_duration_seconds",
    "Time from a request's arrival to its response being queued, per API.",
    ["api"],
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
_BYTES_IN = Counter("exactly_bytes_in", "Request bytes received (frames).", registry=REGISTRY)
_BYTES_OUT = Counter("exactly_bytes_out", "Response bytes sent (frames).", registry=REGISTRY)


def observe_request(api_key: int, seconds: float, bytes_in: int, bytes_out: int) -> None:
    """Record one handled request. Called by the network server for every request."""
    name = api_name(api_key)
    _REQUESTS.labels(name).inc()
    _LATENCY.labels(name).observe(seconds)
    _BYTES_IN.inc(bytes_in)
    _BYTES_OUT.inc(bytes_out)


async def timed(api_key: int, bytes_in: int, handling: Awaitable[bytes | None]) -> bytes | None:
    """Await a request's handling (which returns its response frame, None for none) and record
    it: the network server's hook, `coro = metrics.timed(api_key, len(frame), self._run(...))`."""
    started = time.perf_counter()
    frame = await handling
    observe_request(api_key, time.perf_counter() - started, bytes_in, len(frame) if frame else 0)
    return frame


class BrokerCollector(Collector):
    """The broker's state as gauges, read when Prometheus scrapes."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def describe(self) -> list[Any]:
        return []  # unchecked collector: its metric names are not reserved in the registry

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._transactions()
        yield self._lso_lag()
        yield from self._cleaner()
        errors = CounterMetricFamily("exactly_log_storage_errors",
                                     "Writes that failed for the disk's sake (full, I/O error): "
                                     "answered KAFKA_STORAGE_ERROR.")
        errors.add_metric([], self.services.logs.storage_errors)
        yield errors
        corrupt = CounterMetricFamily(
            "exactly_log_corrupt_batches",
            "Corrupt batches (CRC, length, offsets) that fetches found in segment bytes read from "
            "disk, each counted once: fetches from them are answered CORRUPT_MESSAGE; run "
            "`exactly log verify`.", labels=["topic", "partition"])
        for plog in sorted(self.services.logs.logs(), key=lambda p: (p.topic, p.partition)):
            corrupt.add_metric([plog.topic, str(plog.partition)], plog.corrupt_batches.count)
        yield corrupt

    def _cleaner(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        m = self.services.cleaner.metrics
        for name, text, value in (
            ("runs", "Cleans done.", m.runs),
            ("read_bytes", "Bytes of segments the cleaner read (offset map and copy).",
             m.bytes_read),
            ("written_bytes", "Bytes of cleaned segments the cleaner wrote.", m.bytes_written),
            ("removed_records", "Records the cleaner removed.", m.records_removed),
        ):
            counter = CounterMetricFamily(f"exactly_log_cleaner_{name}", text)
            counter.add_metric([], value)
            yield counter
        last = GaugeMetricFamily("exactly_log_cleaner_last_clean_timestamp_seconds",
                                 "When the last clean was planned (0: none yet).")
        last.add_metric([], m.last_clean_ms / 1000)
        yield last
        took = GaugeMetricFamily("exactly_log_cleaner_last_clean_duration_seconds",
                                 "How long the last clean took.")
        took.add_metric([], m.last_clean_seconds)
        yield took
        dirty = GaugeMetricFamily(
            "exactly_log_cleaner_dirty_ratio",
            "Share of a compacted partition's cleanable bytes not cleaned yet, as of the "
            "cleaner's last look (min.cleanable.dirty.ratio is the threshold).",
            labels=["topic", "partition"])
        for (topic, partition), ratio in sorted(m.dirty_ratios.items()):
            dirty.add_metric([topic, str(partition)], ratio)
        yield dirty

    def _transactions(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now_ms = self.services.clock()
        open_max = 0
        by_state = {s.display_name: 0 for s in TxnState}
        for meta in self.services.txn.list_transactions(now_ms=now_ms):
            by_state[meta.state.display_name] += 1
            if meta.state.is_open and meta.txn_start_ms >= 0:
                open_max = max(open_max, now_ms - meta.txn_start_ms)
        g = GaugeMetricFamily(
            "exactly_transaction_active_open_time_max_ms",
            "The longest time a currently open transaction has been open, in ms "
            "(Kafka's transaction-coordinator-metrics active-transaction-open-time-max).",
        )
        g.add_metric([], open_max)
        yield g
        states = GaugeMetricFamily(
            "exactly_transactions", "Transactional ids known to the coordinator, by state.",
            labels=["state"])
        for name, count in sorted(by_state.items()):
            states.add_metric([name], count)
        yield states
        expired = CounterMetricFamily(
            "exactly_transaction_expired_aborts",
            "Transactions the coordinator aborted on its own, by reason: timeout "
            "(transaction.timeout.ms) or session (KIP-1309: no heartbeat for the session "
            "timeout).", labels=["reason"])
        for reason, count in sorted(self.services.txn.expired_aborts.items()):
            expired.add_metric([reason], count)
        yield expired

    def _lso_lag(self) -> GaugeMetricFamily:
        g = GaugeMetricFamily(
            "exactly_partition_lso_lag",
            "High watermark minus last stable offset: records read_committed consumers cannot "
            "read yet because a transaction before them is open.",
            labels=["topic", "partition"])
        logs = self.services.logs
        for info in sorted(logs.topics(), key=lambda t: t.name):
            for partition in range(info.num_partitions):
                try:
                    plog = logs.get_log(info.name, partition)
                except UnknownTopicOrPartitionError:  # a partition not opened (yet)
                    continue
                g.add_metric([info.name, str(partition)],
                             plog.high_watermark - plog.last_stable_offset)
        return g


class MetricsServer:
    """A minimal HTTP/1.1 server for GET /metrics, on the broker's event loop."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.collector = BrokerCollector(services)
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        REGISTRY.register(self.collector)
        self._server = await asyncio.start_server(self._serve, host, port)
        sock = self._server.sockets[0].getsockname()
        return sock[0], sock[1]

    async def stop(self) -> None:
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(self.collector)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 10)
            while True:  # headers: not needed, but read them so the client is not reset
                line = await asyncio.wait_for(reader.readline(), 10)
                if line in (b"\r\n", b"\n", b""):
                    break
            parts = request_line.decode("latin-1").split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            path = path.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET /metrics\n"
            elif path in ("/metrics", "/"):
                # Transactions whose EndTxn was answered show as complete, as they are about to.
                await self.services.transactions.wait_for_all_markers()
                started = time.perf_counter()
                body = generate_latest(REGISTRY)
                log.debug("metrics scrape took %.1f ms", (time.perf_counter() - started) * 1000)
                status, ctype = "200 OK", CONTENT_TYPE_LATEST
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"try /metrics\n"
            head = (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            writer.write(head if method == "HEAD" else head + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def parse_listen(text: str) -> tuple[str, int] | None:
    """metrics.listen: HOST:PORT (or [IPv6]:PORT), empty for off."""
    text = text.strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:9404 (port 0 picks a free port), "
                         "or empty for no metrics endpoint")
    return host.strip("[]") or "0.0.0.0", int(port)
