"""The asyncio network server: frames in, handlers, frames out in request order.

Requests on one connection are pipelined: each is handed to its handler as soon as it is read,
and responses are written in the order the requests arrived. Handlers start in arrival order, so
a handler that changes state before its first `await` (Produce appends that way) keeps the
client's order.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from exactly.protocol import framing
from exactly.protocol.apis import SUPPORTED, ApiKey, api_name, is_supported
from exactly.protocol.framing import MalformedRequest
from exactly.server.context import RequestContext
from exactly.server.handlers.api_versions import api_versions_response

if TYPE_CHECKING:
    from exactly.server.broker import Broker

log = logging.getLogger("exactly.server")

MAX_IN_FLIGHT = 64  # per connection; reading pauses beyond this


class Connection:
    def __init__(self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_host = peer[0] if isinstance(peer, tuple) else ""
        self.responses: asyncio.Queue[asyncio.Future[bytes | None] | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._serving: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        self._serving = asyncio.current_task()
        sender = asyncio.create_task(self._send_loop())
        try:
            await self._read_loop()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            if not sender.done():
                await self.responses.put(None)  # let the queued responses go out, then close
                try:
                    await sender
                except (ConnectionError, asyncio.CancelledError):
                    pass
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def _read_loop(self) -> None:
        max_bytes = self.broker.socket_request_max_bytes
        while True:
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
            if not await self._dispatch(frame):
                return

    async def _dispatch(self, frame: bytes) -> bool:
        """Start the request's handler; False when the connection must be closed."""
        try:
            api_key, api_version, correlation_id = framing.peek_header(frame)
        except MalformedRequest as exc:
            self._malformed(str(exc))
            return False
        if not is_supported(api_key, api_version):
            if api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 with the supported range so the client can pick a version.
                response = api_versions_response(0, self.broker.finalized_features,
                                                 error_unsupported=True)
                await self._queue_ready(framing.encode_response(api_key, 0, correlation_id, response))
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
        handler = self.broker.handlers[api_key]
        ctx = RequestContext(self.broker, api_key, api_version, correlation_id,
                             header.client_id, self.client_host)
        future: asyncio.Future[bytes | None] = asyncio.ensure_future(self._run(ctx, handler, request))
        await self.responses.put(future)  # a full queue pauses reading: backpressure
        return True

    async def _run(self, ctx: RequestContext, handler: Any, request: Any) -> bytes | None:
        try:
            response = await handler(ctx, request)
        except Exception:
            log.exception("handler for %s v%d failed; closing connection %s",
                          api_name(ctx.api_key), ctx.api_version, self.peer)
            raise
        if response is None:  # acks=0 produce: no response at all
            return None
        return framing.encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, response)

    async def _queue_ready(self, frame: bytes) -> None:
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        future.set_result(frame)
        await self.responses.put(future)

    def _malformed(self, reason: str) -> None:
        log.warning("closing connection %s: malformed request: %s", self.peer, reason)

    async def _send_loop(self) -> None:
        while True:
            future = await self.responses.get()
            if future is None:
                return
            try:
                frame = await future
            except Exception:  # noqa: BLE001 - logged by _run
                # The handler failed: the client cannot match a missing answer, so close.
                if self._serving is not None:
                    self._serving.cancel()
                return
            if frame is not None:
                self.writer.write(frame)
                if self.writer.transport.get_write_buffer_size() > 4 * 1024 * 1024:
                    await self.writer.drain()


async def start_server(broker: Broker, host: str, port: int) -> asyncio.Server:
    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(broker, reader, writer)
        broker.connections.add(conn)
        try:
            await conn.serve()
        finally:
            broker.connections.discard(conn)

    return await asyncio.start_server(on_connect, host, port, limit=1 << 20, backlog=512)
