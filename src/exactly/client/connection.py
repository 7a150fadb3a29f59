"""One TCP connection to one broker: ApiVersions negotiation, pipelined requests, responses
matched to their requests by correlation id.

Responses are read by an asyncio BufferedProtocol: each complete frame is decoded and handed to
its waiter in the loop turn its bytes arrive, with no reader task in between (a task would add a
loop turn and a stream reader's work to every response: a 1-record transaction has
two or three responses on its critical path).

The transport reads into a buffer the connection keeps (RECEIVE_BUFFER), not into a fresh bytes
object per read: the standard loop's reads ask for 256 KiB, which glibc may serve with mmap, and
then every answer cost an mmap, an mremap and a munmap. A frame too large for that
buffer (a Fetch answer of megabytes) is read straight into a buffer of its own size, kept for
the next one up to LARGE_KEPT. A frame is decoded from a view of the buffer: the decoders copy
what the response keeps (kio makes bytes of records and strings), so nothing refers to the buffer
once the frame is handled and the next answers are read over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import ssl
import struct
from typing import Any, NamedTuple

from exactly.client.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from exactly.client.security import PLAINTEXT, Security, sasl_client
from exactly.client.versions import CLIENT_VERSIONS
from exactly.protocol.apis import ApiKey, api_name, build, request_class
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.fast_requests import Encoded
from exactly.protocol.framing import (
    RequestHeader,
    client_id_field,
    decode_response,
    encode_request,
    encoded_request,
)

log = logging.getLogger("exactly.client")

_SIZE = struct.Struct(">i")
_WRITE_BUFFER = 1 << 22
RECEIVE_BUFFER = 64 * 1024  # answers up to this are read into the connection's buffer
LARGE_KEPT = 1 << 20  # a buffer for larger answers is kept for the next one up to this size
# A larger answer's buffer is made of its size at once up to this (fetch.max.bytes' default, 50
# MiB, fits), and beyond it grows as the bytes arrive: a size read from something that is not a
# broker (an HTTP server's "HTTP" is 1.2 GB) is not allocated before it is sent.
LARGE_AT_ONCE = 64 << 20
_INF = float("inf")


class Sent(NamedTuple):
    """A request written, its answer awaited (BrokerConnection.write, answer)."""
    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future[Any]


def _connected_to_itself(transport: asyncio.BaseTransport) -> bool:
    """A socket whose source and destination are the same address and port: with the broker
    down and its port inside the kernel's ephemeral range, a reconnect can draw that port as its
    own and, by TCP's simultaneous open, connect to itself. Its requests would come back as
    answers, and it would hold the port the broker needs to listen on again."""
    local, peer = transport.get_extra_info("sockname"), transport.get_extra_info("peername")
    return local is not None and peer is not None and local[:2] == peer[:2]


class BrokerConnection:
    """Send requests (kio entities, or bodies encoded by hand: fast_requests), get kio response
    entities.

    `version(api_key)` is the version to build a request with: the highest both sides speak.
    Requests are pipelined; responses come back in order and are matched to their futures.
    """

    def __init__(self, host: str, port: int, *, client_id: str, request_timeout_ms: int) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self._client_id_field = client_id_field(client_id)  # the request header's, encoded once
        self.request_timeout = request_timeout_ms / 1000
        self.node_id: int | None = None
        self._frames: _Frames | None = None
        self._ids = itertools.count(1)
        # correlation id -> (api key, version, future, deadline on the loop's clock)
        self._waiting: dict[int, tuple[int, int, asyncio.Future[Any], float]] = {}
        # One timer for every waiter's deadline (see send), due at the earliest one it knows.
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_at = _INF
        self._broker_versions: dict[int, tuple[int, int]] = {}
        self.finalized_features: dict[str, int] = {}
        self.closed = False

    @classmethod
    async def connect(cls, host: str, port: int, *, client_id: str = "exactly",
                      request_timeout_ms: int = 30_000, connect_timeout_ms: int = 10_000,
                      security: Security = PLAINTEXT) -> BrokerConnection:
        """Connect, wrap in TLS (SSL, SASL_SSL), negotiate versions, authenticate (SASL_*)."""
        conn = cls(host, port, client_id=client_id, request_timeout_ms=request_timeout_ms)
        tls: dict[str, Any] = {}
        if security.tls:
            tls = {"ssl": security.ssl_context, "server_hostname": host,
                   "ssl_handshake_timeout": connect_timeout_ms / 1000}
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not asyncio.wait_for: on Python 3.11 wait_for returns the
            # connection to a caller cancelled as it opens, and the caller went on.
            async with asyncio.timeout(connect_timeout_ms / 1000):
                transport, conn._frames = await loop.create_connection(
                    lambda: _Frames(conn), host, port, **tls)
        except ssl.SSLError as exc:
            raise AuthenticationError(
                f"TLS handshake with {host}:{port} failed: {exc}; check ssl.ca.location (the CA "
                "that signed the broker's certificate) and that the certificate names the host "
                "(or set ssl.endpoint.identification.algorithm=none)") from exc
        except (OSError, TimeoutError) as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        if _connected_to_itself(transport):
            # Reset, not closed: a close would leave the port in TIME_WAIT for a minute.
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
            raise KafkaConnectionError(
                f"cannot connect to {host}:{port}: connected to itself (nothing listens there, and "
                "the kernel gave this socket that very port as its source port: TCP simultaneous "
                "open); dropped, so the broker can bind its port again")
        try:
            await conn._negotiate()
            if security.sasl:
                await conn._authenticate(security)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _authenticate(self, security: Security) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done (KIP-152)."""
        where = f"{self.host}:{self.port}"
        if self.broker_max_version(ApiKey.SASL_AUTHENTICATE) < 0:
            raise AuthenticationError(f"broker {where} does not offer SaslAuthenticate: is this a "
                                      "SASL listener? (security.protocol=SASL_*)")
        handshake = await self.send(build(request_class(ApiKey.SASL_HANDSHAKE, 1),
                                          mechanism=security.mechanism))
        if handshake.error_code != ErrorCode.none:
            enabled = ", ".join(handshake.mechanisms) or "none"
            raise AuthenticationError(
                f"broker {where} refused SASL mechanism {security.mechanism} "
                f"({error_name(handshake.error_code)}); it enables: {enabled}",
                int(handshake.error_code))
        client = sasl_client(security)
        version = min(2, self.broker_max_version(ApiKey.SASL_AUTHENTICATE))
        token: bytes | None = client.first()
        while token is not None:
            response = await self.send(build(request_class(ApiKey.SASL_AUTHENTICATE, version),
                                             auth_bytes=token))
            if response.error_code != ErrorCode.none:
                raise AuthenticationError(
                    f"authentication of {security.username!r} with {security.mechanism} at "
                    f"{where} failed ({error_name(response.error_code)}): "
                    f"{response.error_message or 'no reason given'}", int(response.error_code))
            token = client.evaluate(response.auth_bytes)
            if token is None and not client.complete:
                raise AuthenticationError(f"{security.mechanism} exchange with {where} ended early")

    async def _negotiate(self) -> None:
        """ApiVersions: v3 first; a broker that does not know it answers v0 with its table."""
        try:
            response = await self.send(build(request_class(ApiKey.API_VERSIONS, 3),
                                              client_software_name="exactly",
                                              client_software_version="0.1.0"))
        except UnsupportedVersionError:
            response = await self.send(build(request_class(ApiKey.API_VERSIONS, 0)))
        if response.error_code != 0:
            raise UnsupportedVersionError(f"{self}: ApiVersions failed with code {response.error_code}",
                                          response.error_code)
        self._broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        self.finalized_features = {f.name: f.max_version_level
                                   for f in getattr(response, "finalized_features", ())}

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
        except UnsupportedVersionError:
            return False
        return True

    def version(self, api_key: int, *, max_version: int | None = None) -> int:
        """The highest version of `api_key` that this client and this broker both speak."""
        ours = CLIENT_VERSIONS.get(api_key)
        theirs = self._broker_versions.get(api_key)
        if ours is None or theirs is None:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} does not offer {api_name(api_key)}")
        high = min(ours[1], theirs[1], max_version if max_version is not None else ours[1])
        low = max(ours[0], theirs[0])
        if high < low:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} speaks {api_name(api_key)} v{theirs[0]}-v{theirs[1]}, "
                f"this client v{ours[0]}-v{min(ours[1], high)}")
        return high

    def broker_max_version(self, api_key: int) -> int:
        return self._broker_versions.get(api_key, (-1, -1))[1]

    async def send(self, request: Any, *, expect_response: bool = True,
                   timeout: float | None = None) -> Any:
        """Send a request (as `write` takes it); returns the response entity (None if none is
        expected)."""
        return await self.answer(self.write(request, expect_response=expect_response,
                                            timeout=timeout))

    def write(self, request: Any, *, expect_response: bool = True,
              timeout: float | None = None) -> Sent | None:
        """Write a request now, in this call (requests reach the broker in the order of these
        calls): a kio entity, or a body encoded by hand (fast_requests.Encoded). `answer()`
        waits for its response; None if none is expected."""
        frames = self._frames
        if self.closed or frames is None:
            raise KafkaConnectionError(f"connection to {self.host}:{self.port} is closed")
        correlation_id = next(self._ids)
        if request.__class__ is Encoded:  # written by hand (fast_requests)
            api_key, version = request.api_key, request.version
            frame = encoded_request(correlation_id, self._client_id_field, request)
        else:  # a kio entity
            api_key, version = int(request.__api_key__), int(request.__version__)
            frame = encode_request(RequestHeader(api_key, version, correlation_id, self.client_id),
                                   request)
        sent = None
        if expect_response:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[Any] = loop.create_future()
            # The connection's one timer fails the waiters whose deadline passed, rather than
            # asyncio.wait_for (an extra future and callbacks) or a timer per request (made
            # and cancelled: 3-5 us each, two or three per 1-record transaction).
            deadline = loop.time() + (timeout if timeout is not None else self.request_timeout)
            self._waiting[correlation_id] = (api_key, version, future, deadline)
            if deadline < self._deadline_at:
                self._watch_deadline(deadline)
            sent = Sent(correlation_id, api_key, version, future)
        frames.transport.write(frame)
        return sent

    async def answer(self, sent: Sent | None) -> Any:
        """The response to a request `write()` wrote (None for one that expects none), once the
        socket's buffer has room again."""
        frames = self._frames
        if frames is not None and frames.paused:  # the socket's buffer is full: wait until it drains
            await frames.drained()
        if sent is None:
            return None
        try:
            return await sent.future
        except TimeoutError:
            self._waiting.pop(sent.correlation_id, None)
            raise KafkaTimeoutError(
                f"{api_name(sent.api_key)} v{sent.version} to {self.host}:{self.port} got no "
                "answer in time") from None
        except Exception:
            # A cancellation that arrives while the connection fails its waiters (as when
            # asyncio.run cancels everything at exit) must win: a caller that retries
            # connection errors would otherwise loop forever.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from None
            raise

    def _watch_deadline(self, at: float) -> None:
        """Have the connection's timer fire at `at` (the loop's clock), or not at all (inf)."""
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._deadline_at = at
        if at < _INF:
            self._deadline_timer = asyncio.get_running_loop().call_at(at, self._deadlines_due)

    def _deadlines_due(self) -> None:
        """The timer fired: fail the waiters whose deadline passed (their send() raises
        KafkaTimeoutError), and set it for the earliest of the others."""
        self._deadline_timer = None
        # A millisecond's slack: uvloop's clock counts whole milliseconds, and its timers can
        # fire when it reads a little before their time.
        now = asyncio.get_running_loop().time() + 0.001
        earliest = _INF
        for _, _, future, deadline in self._waiting.values():
            if future.done():
                continue  # a cancelled send(); its answer, if any, is dropped
            if deadline <= now:
                future.set_exception(TimeoutError())
            elif deadline < earliest:
                earliest = deadline
        self._watch_deadline(earliest)

    def _on_frame(self, frame: memoryview) -> None:
        """A response frame (without its size) arrived: resolve its request's waiter. `frame` is
        a view of the connection's read buffer, read over after this returns."""
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        entry = self._waiting.pop(correlation_id, None)
        if entry is None:
            return  # its caller timed out
        api_key, version, future, _ = entry
        if future.done():
            return
        if api_key == ApiKey.API_VERSIONS and frame[4:6] == b"\x00\x23":
            # UNSUPPORTED_VERSION: the body's layout varies between brokers (KIP-511 says v0;
            # librdkafka's mock differs), so it is not decoded: negotiate asks again with v0,
            # which every broker reads.
            future.set_exception(UnsupportedVersionError("ApiVersions version refused", 35))
            return
        try:
            _, response = decode_response(api_key, version, frame)
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            future.set_exception(KafkaConnectionError(
                f"cannot decode {api_name(api_key)} v{version} response: {exc}"))
            return
        future.set_result(response)

    def _on_lost(self, error: BaseException | None) -> None:
        """The connection is gone (closed by either side, or failed): fail every waiter."""
        self.closed = True
        waiting, self._waiting = self._waiting, {}
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer, self._deadline_at = None, _INF
        for _, _, future, _ in waiting.values():
            if not future.done():
                future.set_exception(KafkaConnectionError(
                    f"connection to {self.host}:{self.port} lost: {error or 'closed'}"))

    async def close(self) -> None:
        self.closed = True
        self._on_lost(None)
        frames = self._frames
        if frames is not None:
            frames.transport.close()
            with contextlib.suppress(Exception):
                await frames.lost

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node={self.node_id})"


class _Frames(asyncio.BufferedProtocol):
    """The connection's reading side: cuts the byte stream into size-prefixed response frames
    and hands each to the connection as soon as it is complete; and the writing side's flow
    control (`paused` while the socket's buffer is full)."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport = None  # type: ignore[assignment] # set at once
        self.buffer = bytearray(RECEIVE_BUFFER)
        self.have = 0  # bytes of self.buffer received and not yet taken as frames
        self.large = bytearray()  # the buffer of a frame larger than self.buffer
        self.frame_size: int | None = None  # the size of the large frame being read
        self.frame_have = 0  # and its bytes read so far
        self.paused = False
        self._drained: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] # a stream transport (TCP, TLS)
        # Writers wait once 4 MiB are buffered (large produce requests go out back to back).
        self.transport.set_write_buffer_limits(high=_WRITE_BUFFER)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.frame_size is None:
            return memoryview(self.buffer)[self.have:]
        if self.frame_have == len(self.large):  # grown as its bytes arrive (LARGE_AT_ONCE)
            # A new buffer, not a resize: the transport may still hold a view of the old one.
            grown = bytearray(min(self.frame_size, 2 * len(self.large)))
            grown[:self.frame_have] = memoryview(self.large)[:self.frame_have]
            self.large = grown
        return memoryview(self.large)[self.frame_have:self.frame_size]

    def buffer_updated(self, nbytes: int) -> None:
        if self.frame_size is None:
            self.have += nbytes
            self._take_frames()
            return
        self.frame_have += nbytes
        if self.frame_have == self.frame_size:
            self.frame_size = None
            self.conn._on_frame(memoryview(self.large)[:self.frame_have].toreadonly())
            if len(self.large) > LARGE_KEPT:
                self.large = bytearray()

    def _take_frames(self) -> None:
        """Hand over the complete frames in self.buffer; keep the rest at its start."""
        buffer, have, pos = self.buffer, self.have, 0
        while have - pos >= 4:
            (size,) = _SIZE.unpack_from(buffer, pos)
            if size < 4:
                self.transport.close()
                self.conn._on_lost(KafkaConnectionError(f"a response frame of {size} bytes"))
                return
            if have - pos - 4 < size:
                if 4 + size > len(buffer):  # too large for it: read in place, in its own buffer
                    got = have - pos - 4
                    if len(self.large) < size:
                        self.large = bytearray(min(size, LARGE_AT_ONCE))
                    self.large[:got] = memoryview(buffer)[pos + 4:have]
                    self.frame_size, self.frame_have = size, got
                    pos = have
                break
            pos += 4 + size
            self.conn._on_frame(memoryview(buffer)[pos - size:pos].toreadonly())
        rest = have - pos
        if rest and pos:  # a frame's first bytes after whole frames (a copy: they may overlap)
            buffer[:rest] = buffer[pos:have]
        self.have = rest

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn._on_lost(exc or ConnectionError("closed by the broker"))
        if not self.lost.done():
            self.lost.set_result(None)
        self.resume_writing()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        waiter, self._drained = self._drained, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drained(self) -> None:
        """Wait until the socket's buffer has room again (or the connection is gone)."""
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await self._drained

