"""The asyncio network server: frames in, handlers, frames out in request order.

Requests on one connection are pipelined: each is handed to its handler as soon as it is read,
and responses are written in the order the requests arrived. A handler runs inline until it
finishes or first waits (most finish: their answer is written at once, without a task); one that
waits goes on as a task. Handlers start in arrival order, so a handler that changes state before
its first `await` (Produce appends that way) keeps the client's order.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from exactly.protocol import framing
from exactly.protocol.apis import SUPPORTED, ApiKey, api_name, is_supported
from exactly.protocol.framing import MalformedRequest
from exactly.server.auth import AuthSession, ListenerRuntime
from exactly.server.auth.session import SaslFailure
from exactly.server.auth.tls import principal_of
from exactly.server.context import RequestContext
from exactly.server.handlers.api_versions import api_versions_response
from exactly.server.metrics import timed

if TYPE_CHECKING:
    from exactly.server.broker import Broker

log = logging.getLogger("exactly.server")

MAX_IN_FLIGHT = 64  # answers waiting per connection; reading pauses beyond this
MAX_WRITE_BUFFER = 4 * 1024 * 1024  # bytes not yet sent; reading pauses beyond this

Frame = bytes | None  # None: a request answered by no response (Produce with acks=0)


class Connection:
    def __init__(self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 listener: ListenerRuntime | None = None):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_host = peer[0] if isinstance(peer, tuple) else ""
        # Answers not written yet, in request order; the head may still be in the works.
        self._pending: deque[asyncio.Future[Frame]] = deque()
        self._room = asyncio.Event()
        self._failed = False
        listener = listener or ListenerRuntime("PLAINTEXT", broker.advertised_host,
                                               broker.advertised_port)
        # On an SSL listener the client certificate names the principal; with SASL, SASL does.
        tls_principal = (principal_of(writer.get_extra_info("peercert"))
                         if listener.name == "SSL" else None)
        self.session = AuthSession(listener, mechanisms=broker.config["sasl.enabled.mechanisms"],
                                   plain_users=broker.config.plain_users,
                                   scram_store=broker.scram_credentials,
                                   tls_principal=tls_principal)
        # Requests are timed and counted (metrics.timed -> observe_request) only when the broker
        # serves metrics (metrics.listen).
        self._timed: Any = timed if broker.metrics_enabled else None

    async def serve(self) -> None:
        try:
            await self._read_loop()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            # Let the answers still in the works go out, then close.
            if self._pending and not self._failed:
                await asyncio.wait(list(self._pending))
                self._write_ready()
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def _read_loop(self) -> None:
        max_bytes = self.broker.socket_request_max_bytes
        transport = self.writer.transport
        while not self._failed:
            if len(self._pending) >= MAX_IN_FLIGHT:
                self._room.clear()
                await self._room.wait()
                continue
            if transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
                await self.writer.drain()
            try:
                size_bytes = await self.reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    self._malformed(f"connection closed inside a frame size ({len(exc.partial)} bytes)")
                return
            (size,) = framing.SIZE.unpack(size_bytes)
            if size < 0 or size > max_bytes:
                # Refused before reading the body, as socket.request.max.bytes promises.
                self._malformed(f"frame size {size} outside 0..{max_bytes} (socket.request.max.bytes)")
                return
            try:
                frame = await self.reader.readexactly(size)
            except asyncio.IncompleteReadError as exc:
                self._malformed(f"connection closed after {len(exc.partial)} of {size} frame bytes")
                return
            if not self._dispatch(frame):
                return

    def _dispatch(self, frame: bytes) -> bool:
        """Start the request's handler; False when the connection must be closed."""
        session = self.session
        if session.raw_tokens_expected():
            return self._raw_sasl_token(frame)
        try:
            api_key, api_version, correlation_id = framing.peek_header(frame)
        except MalformedRequest as exc:
            self._malformed(str(exc))
            return False
        if not session.authenticated and not session.allows_before_auth(api_key):
            # As Kafka: anything but ApiVersions/SaslHandshake/SaslAuthenticate before
            # authentication closes the connection.
            log.warning("closing connection %s on %s listener: %s before SASL authentication",
                        self.peer, session.listener.name, api_name(api_key))
            return False
        if not is_supported(api_key, api_version):
            if api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 with the supported range so the client can pick a version.
                response = api_versions_response(0, self.broker.finalized_features,
                                                 error_unsupported=True)
                self._answer(framing.encode_response(api_key, 0, correlation_id, response))
                return True
            self._malformed(
                f"unsupported API {api_name(api_key)} (key {api_key}) version {api_version}; "
                f"supported: {SUPPORTED.get(api_key, 'none')}"
            )
            return False
        try:
            header, request = framing.decode_request(frame)
        except MalformedRequest as exc:
            self._malformed(f"{exc} (frame starts {bytes(frame[:256]).hex()})")
            return False
        ctx = RequestContext(self.broker, api_key, api_version, correlation_id,
                             header.client_id, self.client_host, session=session,
                             principal=session.principal)
        coro = self._run(ctx, self.broker.handlers[api_key], request)
        if self._timed is not None:
            coro = self._timed(api_key, len(frame) + 4, coro)
        try:
            waiting_on = coro.send(None)
        except StopIteration as done:
            self._answer(done.value)
            return not session.close_after_response  # a failed authentication
        except Exception:  # noqa: BLE001 - logged by _run; the client can't match a lost answer
            return False
        future = asyncio.ensure_future(_go_on(coro, waiting_on))
        self._pending.append(future)
        future.add_done_callback(self._on_done)
        return True

    async def _run(self, ctx: RequestContext, handler: Any, request: Any) -> Frame:
        try:
            response = await handler(ctx, request)
        except Exception:
            log.exception("handler for %s v%d failed; closing connection %s",
                          api_name(ctx.api_key), ctx.api_version, self.peer)
            raise
        if response is None:  # acks=0 produce: no response at all
            return None
        return framing.encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, response)

    def _answer(self, frame: Frame) -> None:
        if not self._pending:
            if frame is not None:
                self.writer.write(frame)
            return
        ready: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        ready.set_result(frame)  # after the earlier answers, which are still in the works
        self._pending.append(ready)

    def _on_done(self, _future: asyncio.Future[Frame]) -> None:
        self._write_ready()
        if len(self._pending) < MAX_IN_FLIGHT:
            self._room.set()

    def _write_ready(self) -> None:
        """Write the answers at the head of the queue that are done, in order."""
        while self._pending and self._pending[0].done():
            future = self._pending.popleft()
            if future.cancelled() or future.exception() is not None:
                # The handler failed (logged by _run): close, as the answer can never come.
                self._failed = True
                self._pending.clear()
                self.writer.transport.abort()
                self._room.set()
                return
            frame = future.result()
            if frame is not None and not self.writer.transport.is_closing():
                self.writer.write(frame)

    def _raw_sasl_token(self, frame: bytes) -> bool:
        """After SaslHandshake v0, the SASL tokens come unwrapped, size-prefixed (as old Kafka
        clients send them); a failure just closes the connection."""
        try:
            token = self.session.authenticate(frame)
        except SaslFailure as exc:
            log.warning("closing connection %s: %s", self.peer, exc)
            return False
        self._answer(framing.SIZE.pack(len(token)) + token)
        return True

    def _malformed(self, reason: str) -> None:
        log.warning("closing connection %s: malformed request: %s", self.peer, reason)


async def _go_on(coro: Coroutine[Any, Any, Frame], waiting_on: Any) -> Frame:
    """Drive a handler that ran inline until it waited, as an asyncio Task would have."""
    while True:
        if waiting_on is None:  # a bare yield: asyncio.sleep(0)
            await asyncio.sleep(0)
        else:
            waiting_on._asyncio_future_blocking = False
            try:
                await waiting_on
            except BaseException:  # noqa: BLE001, S110 - the handler sees it when resumed
                pass
        try:
            waiting_on = coro.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def start_server(broker: Broker, host: str, port: int,
                       listener: ListenerRuntime | None = None,
                       ssl_context: ssl.SSLContext | None = None) -> asyncio.Server:
    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(broker, reader, writer, listener)
        broker.connections.add(conn)
        try:
            await conn.serve()
        finally:
            broker.connections.discard(conn)

    return await asyncio.start_server(on_connect, host, port, limit=1 << 20, backlog=512,
                                      ssl=ssl_context,
                                      ssl_handshake_timeout=10 if ssl_context else None)


async def start_listeners(broker: Broker) -> list[tuple[asyncio.Server, ListenerRuntime]]:
    """Bind every configured listener (each on its own port, TLS ones with the broker's
    certificate) and work out what each advertises."""
    from exactly.server.auth.tls import TlsConfigError, server_context
    from exactly.server.config import ConfigError

    config = broker.config
    ssl_context = None
    if any(lst.name in ("SSL", "SASL_SSL") for lst in config.listeners):
        try:
            ssl_context = server_context(config)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None
    started: list[tuple[asyncio.Server, ListenerRuntime]] = []
    try:
        for lst in config.listeners:
            runtime = ListenerRuntime(lst.name, "", 0)
            tls = ssl_context if lst.name in ("SSL", "SASL_SSL") else None
            server = await start_server(broker, lst.host, lst.port, runtime, tls)
            bound = server.sockets[0].getsockname()
            advertised = config.advertised_for(lst.name)
            if advertised is not None and advertised[1] != 0:
                runtime.advertised_host, runtime.advertised_port = advertised
            else:
                host = advertised[0] if advertised else bound[0]
                runtime.advertised_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
                runtime.advertised_port = bound[1]
            started.append((server, runtime))
    except BaseException:
        for server, _ in started:
            server.close()
        raise
    return started
