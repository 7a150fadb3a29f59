"""Prometheus metrics: an HTTP `/metrics` endpoint on `metrics.listen` (off unless set).

Two kinds of metric:
- counted as things happen, fed by the network server: request count and latency per API, bytes
  in and out (`timed`, only with metrics.listen set); request errors by API and error code
  (`count_errors`: every non-zero error code in a response, the top-level one and each topic's,
  partition's, group's or member's, as Kafka's RequestMetrics ErrorsPerSec counts
  `AbstractResponse.errorCounts`; NONE is not counted, the request count has those); connections
  per listener, open now, accepted, closed, and refused by the connection limits (Kafka's
  socket-server-metrics connection-count, connection-creation-total, connection-close-total);
  the record bytes of Fetch answers sent from segment files with sendfile (zero copy, network.py),
  so that whether answers take that path, or are copied, can be seen;
- the broker's state, read at scrape time by `BrokerCollector` (metrics_collector.py).

The HTTP server runs on the broker's event loop, so the collector reads the coordinator and the
logs on the same thread that changes them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING, Any

from kio.serial import entity_reader
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from exactly.protocol.apis import api_name, response_class
from exactly.protocol.errors import error_name
from exactly.server.metrics_collector import BrokerCollector

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


_ERRORS = Counter(
    "exactly_request_errors",
    "Error codes in responses, per API and error (Kafka's name): the top-level code and each "
    "topic's, partition's, group's or member's; NONE is not counted.",
    ["api", "error"], registry=REGISTRY)
_CONNECTIONS_OPEN = Gauge("exactly_connections_open", "Client connections open now, per listener.",
                          ["listener"], registry=REGISTRY)
_CONNECTIONS_ACCEPTED = Counter("exactly_connections_accepted",
                                "Client connections accepted, per listener.", ["listener"],
                                registry=REGISTRY)
_CONNECTIONS_CLOSED = Counter("exactly_connections_closed",
                              "Accepted client connections closed (by either side), per listener.",
                              ["listener"], registry=REGISTRY)
_CONNECTIONS_REFUSED = Counter(
    "exactly_connections_refused",
    "Connections closed at once by max.connections or max.connections.per.ip, per listener.",
    ["listener"], registry=REGISTRY)


_SENDFILE_BYTES = Counter(
    "exactly_fetch_sendfile_bytes",
    "Record bytes of Fetch answers sent from segment files with sendfile (zero copy, on "
    "listeners without TLS); ranges below the copy threshold, and answers queued behind unsent "
    "bytes, are copied and not counted.", registry=REGISTRY)


def sent_from_file(size: int) -> None:
    """`size` bytes of a segment file went to a client's socket with sendfile."""
    _SENDFILE_BYTES.inc(size)


def connection_opened(listener: str) -> None:
    """A connection was accepted on `listener` (its name, e.g. PLAINTEXT)."""
    _CONNECTIONS_ACCEPTED.labels(listener).inc()
    _CONNECTIONS_OPEN.labels(listener).inc()


def connection_closed(listener: str) -> None:
    """An accepted connection on `listener` is gone."""
    _CONNECTIONS_CLOSED.labels(listener).inc()
    _CONNECTIONS_OPEN.labels(listener).dec()


def connection_refused(listener: str) -> None:
    """The connection limits turned a connection on `listener` away."""
    _CONNECTIONS_REFUSED.labels(listener).inc()


def count_errors(api_key: int, api_version: int, response: Any) -> None:
    """Count the error codes of one response (a kio entity, or its body already encoded, as
    the hand-written Produce/AddPartitionsToTxn/EndTxn answers are). Never raises: a metric must
    not cost a client its answer."""
    try:
        if isinstance(response, bytes):
            response, _ = _body_reader(api_key, api_version)(response, 0)
        codes = collections.Counter(error_codes(response))
    except Exception:
        log.exception("counting the errors of a %s v%d response failed", api_name(api_key),
                      api_version)
        return
    name = api_name(api_key)
    for code, count in codes.items():
        _ERRORS.labels(name, error_name(code)).inc(count)


def error_codes(entity: Any) -> Iterator[int]:
    """Every non-zero error code in a kio entity, its nested entities included."""
    cls = type(entity)
    fields = _ERROR_FIELDS.get(cls)
    if fields is None:
        fields = _ERROR_FIELDS[cls] = _error_fields(cls)
    codes, nested = fields
    for name in codes:
        code = getattr(entity, name)
        if code:
            yield int(code)
    for name in nested:
        value = getattr(entity, name)
        if isinstance(value, tuple):
            for item in value:
                yield from error_codes(item)
        elif value is not None:
            yield from error_codes(value)


_ERROR_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _error_fields(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A kio entity class's error-code fields, and its fields holding entities (kio gives every
    primitive field a `kafka_type`; entity fields and tuples of entities have none)."""
    codes: list[str] = []
    nested: list[str] = []
    for field in dataclasses.fields(cls):
        kind = field.metadata.get("kafka_type")
        if kind == "error_code":
            codes.append(field.name)
        elif kind is None:
            nested.append(field.name)
    return tuple(codes), tuple(nested)


@functools.cache
def _body_reader(api_key: int, api_version: int) -> Any:
    return entity_reader(response_class(api_key, api_version))


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
