"""The asyncio network server: frames in, handlers, frames out in request order.

A connection is an `asyncio.BufferedProtocol`: the transport reads into the connection's own
buffer (small while the client sends little, so an idle connection costs a few KiB; 64 KiB once
a read fills it; small again after TRIM_AFTER_SECONDS of silence), and a frame too large for it
(a Produce request of a megabyte) is read straight into a second buffer the connection keeps for
such frames: the kernel copies its bytes there, and the decoder copies what the request keeps,
nothing else does. After a large frame the next read takes the 4 bytes of the next frame's size
alone, so that a large frame following a large one lands in that buffer from its first byte
(else what of it was read into the receive buffer, up to 64 KiB, is copied over).

Requests on one connection are pipelined: each is handed to its handler as soon as it is read,
and responses are written in the order the requests arrived. A handler runs inline until it
finishes or first waits (most finish: their answer is written at once, without a task); one that
waits goes on as a task, whose last step writes the answer if it is next in line: not a loop turn
later from a done callback, and before a task the handler started takes its first step (EndTxn's
markers go after its answer, which the client waits for). Handlers start in arrival order, so a
handler that changes state before its first `await` (Produce appends that way) keeps the
client's order. Reading pauses while
MAX_IN_FLIGHT answers are waiting, the unsent answers exceed MAX_WRITE_BUFFER, or the requests
waiting for answers hold too many bytes (request_memory.py, `queued.max.request.bytes`).

Fairness: a connection takes at most FRAMES_PER_TURN requests, or TURN_SECONDS of handling, per
turn; then it stops reading and waits in `Turns`, a queue that gives each waiting connection its
next turn in order, at most ROUND_SECONDS of them per pass of the event loop. One client
pipelining thousands of requests cannot make the others wait for all of them, and eight such
clients cannot make a pass of the loop long: what another client's request waits for between
its steps (an fsync round's answer, a handler resuming) comes after at most one round.

Zero-copy fetch: on a listener without TLS, a Fetch answer's records are ranges of
segment files (`FileRecords`). The answer is encoded (by fetch_encoding.py's writer, which
writes what kio writes) into a buffer that keeps those ranges apart (`encode_file_frame`): the
framing around them (sizes, headers, per-partition fields) is bytes, the records stay in the
files; a range under COPY_BELOW is read into the bytes instead, which costs fewer syscalls than
sending it from its file. When such a `FileFrame` reaches the head of the answers and the
transport has nothing unsent, the connection writes it itself on a duplicate of the socket's
descriptor (one per connection, kept until it closes), bytes with send() and ranges with
os.sendfile(), waiting for the socket to take
more when it is full; the answers after it wait their turn, and reading
pauses meanwhile (back-pressure, as for a full write buffer). With bytes still unsent in the
transport (which owns the socket), the frame is read from its files and written as bytes
instead: the answers stay in order either way. A file range holds its own descriptor from the
moment it is encoded, so a segment deleted meanwhile (retention, DeleteRecords) still sends the
bytes that were read. The bytes sent with sendfile are counted (`exactly_fetch_sendfile_bytes`,
metrics.py): both paths give the same bytes, so the count is how one tells which was taken.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.serial import entity_writer

from exactly import failpoints
from exactly.log.segment import FileRecords
from exactly.protocol import framing
from exactly.protocol.apis import SUPPORTED, ApiKey, api_name, is_supported, response_class
from exactly.protocol.framing import MalformedRequest
from exactly.protocol.produce_request import decode_produce_in_place
from exactly.server.auth import AuthSession, ListenerRuntime
from exactly.server.auth.session import SaslFailure
from exactly.server.auth.tls import principal_of
from exactly.server.connection_limits import ConnectionLimits
from exactly.server.context import Handler, RequestContext, next_connection_id
from exactly.server.fetch_encoding import fast_path, write_fetch_response
from exactly.server.handlers import HANDLERS, on_connection_closed
from exactly.server.handlers.api_versions import api_versions_response
from exactly.server.handlers.fetch import ZERO_COPY_LISTENERS
from exactly.server.metrics import (
    connection_closed,
    connection_opened,
    connection_refused,
    count_errors,
    sent_from_file,
    timed,
)
from exactly.server.request_memory import PER_CONNECTION
from exactly.server.startup import listen_error

if TYPE_CHECKING:
    from exactly.server.services import Services

log = logging.getLogger("exactly.server")

MAX_IN_FLIGHT = 64  # answers waiting per connection; reading pauses beyond this
MAX_WRITE_BUFFER = 4 * 1024 * 1024  # bytes not yet sent; reading pauses beyond this
RECEIVE_BUFFER = 64 * 1024  # sizes and frames up to this are read here; larger ones in place
FIRST_RECEIVE_BUFFER = 2 * 1024  # a new or long-silent connection's buffer: grows when filled
TRIM_AFTER_SECONDS = 30.0  # a connection silent this long gives its buffers back
LARGE_KEPT = 16 * 1024 * 1024  # a connection keeps its buffer for large frames up to this size
# A large frame's buffer starts at this (or the connection's kept buffer) and doubles as bytes
# arrive: what a frame claims is never allocated before it is sent.
LARGE_FIRST = 64 * 1024
FRAMES_PER_TURN = 8  # requests a connection takes per turn, at most
TURN_SECONDS = 0.0002  # and handling time per turn, at most (a costly request is one turn)
ROUND_SECONDS = 0.001  # turns of waiting connections per pass of the event loop, at most
# A fetched range smaller than this is copied into the answer's bytes: sendfile pays off for
# large ranges, and a small one would cost three syscalls (dup, sendfile, close) for one pread.
COPY_BELOW = 16 * 1024


@dataclass(slots=True)
class FileFrame:
    """A response frame whose parts are bytes and file ranges (fd, position, size), in order.
    It owns the descriptors: close() once it is sent or dropped."""

    parts: deque[bytes | bytearray | memoryview | tuple[int, int, int]] = field(default_factory=deque)
    size: int = 0  # of the whole frame, as encoded

    def __len__(self) -> int:
        return self.size

    def materialize(self) -> bytes:
        """The frame as bytes, read from the files (for when it cannot be sent from them)."""
        out = bytearray()
        for part in self.parts:
            if isinstance(part, tuple):
                fd, position, size = part
                data = os.pread(fd, size, position)
                if len(data) != size:
                    raise OSError(f"segment file ended {size - len(data)} bytes early")
                out += data
            else:
                out += part
        return bytes(out)

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, tuple):
                os.close(part[0])
        self.parts.clear()


Frame = bytes | FileFrame | None  # None: a request answered by no response (Produce with acks=0)


class _SplicingBuffer:
    """What kio's encoder writes into: bytes are gathered, a FileRecords becomes a file range of
    the frame (kio wrote its length, from len(), just before)."""

    def __init__(self, head: bytes) -> None:
        self.frame = FileFrame()
        self.size = 0
        self._bytes = bytearray(head)

    def write(self, data: Any) -> int:
        if isinstance(data, FileRecords) and data.size < COPY_BELOW:
            records = data.read()  # one pread, where a range costs a dup, sendfile and close
            if len(records) != data.size:  # kio wrote their length already
                raise OSError(f"segment file ended {data.size - len(records)} bytes early")
            self._bytes += records
        elif isinstance(data, FileRecords):
            self._end_bytes()
            # The segment's own descriptor is valid now only: the frame keeps one of its own.
            self.frame.parts.append((data.open_duplicate(), data.position, data.size))
            self.size += data.size
        else:
            self._bytes += data
        return len(data)

    def _end_bytes(self) -> None:
        if self._bytes:
            self.frame.parts.append(self._bytes)
            self.size += len(self._bytes)
            self._bytes = bytearray()

    def finish(self) -> bytes | FileFrame:
        self._end_bytes()
        parts = self.frame.parts
        first = parts[0]
        assert isinstance(first, bytearray)
        framing.SIZE.pack_into(first, 0, self.size - 4)
        if len(parts) == 1:
            return bytes(first)
        self.frame.size = self.size
        return self.frame


def encode_file_frame(api_version: int, correlation_id: int, response: Any) -> bytes | FileFrame:
    """A Fetch response frame, its FileRecords kept as file ranges (bytes when it has none):
    byte for byte what framing.encode_response gives for the same records as bytes."""
    flexible = bool(vars(response_class(ApiKey.FETCH, api_version))["__flexible__"])
    buffer = _SplicingBuffer(b"\0\0\0\0" + framing.SIZE.pack(correlation_id)
                             + (b"\0" if flexible else b""))  # response header v1: no tags
    try:
        if fast_path(response):  # what the broker answers: no tagged fields set
            write_fetch_response(buffer, api_version, response)
        else:
            entity_writer(type(response))(buffer, response)  # type: ignore[arg-type]  # kio calls write() only
    except BaseException:
        buffer.frame.close()
        raise
    return buffer.finish()


class Turns:
    """The connections waiting for their next turn, served in order, one round per pass of the
    event loop: each at most once a round, and no more of them than ROUND_SECONDS allows (one at
    least). A connection that still has requests goes to the back of the queue."""

    def __init__(self) -> None:
        self._queue: deque[Connection] = deque()
        self._scheduled = False

    def wait(self, conn: Connection) -> None:
        self._queue.append(conn)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._round)

    def _round(self) -> None:
        self._scheduled = False
        queue, ends = self._queue, time.perf_counter() + ROUND_SECONDS
        for _ in range(len(queue)):  # those that wait again now are next round's
            queue.popleft().next_turn()
            if time.perf_counter() > ends:
                break
        if queue and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._round)


class Connection(asyncio.BufferedProtocol):
    def __init__(self, services: Services, listener: ListenerRuntime,
                 connections: set[Connection], limits: ConnectionLimits, turns: Turns) -> None:
        self.services = services
        self.connection_id = next_connection_id()  # what handlers tie to it: share sessions
        self.turns = turns
        self.listener = listener
        self.connections = connections  # the broker's open connections, closed when it stops
        self.limits = limits
        self.memory = limits.memory
        self._held = 0  # bytes of this connection's requests waiting for their answers
        self.admitted = False  # counted by the limits (a refused one is closed at once)
        self.last_active = time.monotonic()  # the last request received (the idle sweep)
        self.max_request_bytes: int = services.config["socket.request.max.bytes"]
        # Before a SASL listener's client has authenticated, frames may be no larger (Kafka's
        # sasl.server.max.receive.size): a stranger cannot make the broker read 100 MB.
        self.max_unauthenticated_bytes: int = services.config["sasl.server.max.receive.size"]
        self.transport: Any = None
        self.peer = self.client_host = ""
        self.session: AuthSession | None = None
        # Answers not written yet, in request order; the head may still be in the works.
        self._pending: deque[asyncio.Future[Frame]] = deque()
        self._failed = False
        self._closing = False  # no more requests are read; closed once the answers are out
        self._paused = False  # reading paused: too many answers waiting, or too much unsent
        self._yielding = False  # reading paused until the loop's next turn: others go first
        self._write_paused = False
        # Fetch answers go from the segment files to the socket (zero copy) without TLS.
        self._zero_copy = listener.name in ZERO_COPY_LISTENERS
        # Looked up once: checking the environment on every request costs 1% of a produce.
        self._encode_failpoint = "network.before_encode" in failpoints.active()
        # The FileFrame being sent on a duplicate of the socket (None: none is): the answers
        # after it wait, and reading pauses while the socket is full.
        self._sending: FileFrame | None = None
        # That duplicate: made for the first file answer, closed with the connection.
        self._socket: socket.socket | None = None
        self._buffer = bytearray(FIRST_RECEIVE_BUFFER)
        self._have = 0  # bytes of self._buffer received and not yet taken as frames
        self._filled = False  # the last read filled the buffer: the next one gets a larger one
        # A large frame is read in place into self._large, kept for the next one: a fresh
        # megabyte per Produce request would cost page faults and zeroing every time. It grows
        # (into a new, larger buffer) as the frame's bytes arrive.
        self._large = bytearray()
        # A Produce read into self._large is decoded in place (its records are views of the
        # buffer, produce_request.py): a handler that suspends keeps that buffer, the next frame
        # is read into a spare one, and the lent one becomes the spare when the handler is done.
        self._spare: bytearray | None = None
        self._frame_size: int | None = None  # the size of the large frame being read
        self._size_alone = False  # the last frame was large: read the next one's size alone
        self._frame_have = 0
        self._eof = False  # the client sent everything it will send
        # Requests are timed and counted (metrics.timed -> observe_request) only when the broker
        # serves metrics (metrics.listen).
        self._timed: Any = timed if services.config["metrics.listen"] else None

    # -- asyncio.BufferedProtocol -------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=MAX_WRITE_BUFFER)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_host = peer[0] if isinstance(peer, tuple) else ""
        if not self.limits.admit(self.client_host):
            connection_refused(self.listener.name)
            self._closing = True
            transport.abort()
            return
        self.admitted = True
        connection_opened(self.listener.name)
        config, listener = self.services.config, self.listener
        # On an SSL listener the client certificate names the principal; with SASL, SASL does.
        tls_principal = (principal_of(transport.get_extra_info("peercert"))
                         if listener.name == "SSL" else None)
        self.session = AuthSession(listener, mechanisms=config["sasl.enabled.mechanisms"],
                                   plain_users=config.plain_users,
                                   scram_store=self.services.credentials,
                                   tls_principal=tls_principal)
        self.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        # Handlers still in the works finish; their answers have nowhere to go.
        self._closing = True
        self._end_file_send()
        if self._socket is not None:  # the peer sees the connection closed once this goes too
            self._socket.close()
            self._socket = None
        self.connections.discard(self)
        if self.admitted:
            self.admitted = False
            self.limits.release(self.client_host)
            connection_closed(self.listener.name)
        on_connection_closed(self.services, self.connection_id)  # its share sessions end

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_size is not None:
            if self._frame_have == len(self._large):
                self._grow_large(min(self._frame_size, 2 * len(self._large)))
            return memoryview(self._large)[self._frame_have:self._frame_size]
        # Resized here only: during buffer_updated the transport still holds a view of it.
        buffer, have = self._buffer, self._have
        if have == 0 and self._size_alone:  # a large frame's bytes then go to self._large only
            return memoryview(buffer)[:framing.SIZE.size]
        if have == len(buffer):  # full of frames waiting for room: make more
            buffer.extend(bytes(len(buffer)))
        elif self._filled and len(buffer) < RECEIVE_BUFFER:  # a busy client: read more at once
            buffer.extend(bytes(RECEIVE_BUFFER - len(buffer)))
        elif len(buffer) > RECEIVE_BUFFER and have <= RECEIVE_BUFFER // 2:
            del buffer[RECEIVE_BUFFER:]
        self._filled = False
        return memoryview(buffer)[have:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self._frame_size is None:
            self._have += nbytes
            self._filled = self._have == len(self._buffer)
            self._take_frames()
            return
        self._frame_have += nbytes
        if self._frame_have == self._frame_size:
            frame = memoryview(self._large)[:self._frame_size].toreadonly()
            self._frame_size = None
            # Decoding copies what the request keeps (kio makes bytes of a records field), or,
            # for a Produce, views it in place and lends the buffer if the handler suspends
            # (_lend_large): either way self._large is free again once the frame is dispatched.
            proceed = self._dispatch(frame, in_place=True)
            try:
                frame.release()
            except BufferError:  # something holds on to the frame: leave the buffer to it
                self._large = bytearray()
            if len(self._large) > LARGE_KEPT:
                self._large = bytearray()
            if not proceed:
                self._stop_reading()
                return
            self._check_room()

    def eof_received(self) -> bool:
        self._eof = True
        self._end_of_input()
        return True  # keep writing the answers still in the works, then close

    def _end_of_input(self) -> None:
        """After EOF, once every complete frame received has been dispatched (reading may be
        paused with some still waiting): a partial frame left is malformed; stop reading."""
        if self._paused or self._closing or self._yielding:
            return
        if self._frame_size is not None:
            self._malformed(f"connection closed after {self._frame_have} of {self._frame_size} "
                            "frame bytes")
        elif 0 < self._have < 4:
            self._malformed(f"connection closed inside a frame size ({self._have} bytes)")
        elif self._have:
            (size,) = framing.SIZE.unpack_from(self._buffer)
            self._malformed(f"connection closed after {self._have - 4} of {size} frame bytes")
        self._stop_reading()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._check_room()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._check_room()

    # -- frames ------------------------------------------------------------------------------

    def _take_frames(self) -> None:
        """Dispatch the complete frames in the receive buffer, in order, a turn's worth."""
        buffer, have, pos = self._buffer, self._have, 0
        taken, turn_ends = 0, time.perf_counter() + TURN_SECONDS
        while not self._closing and not self._paused and have - pos >= 4:
            if taken == FRAMES_PER_TURN or (taken and time.perf_counter() > turn_ends):
                self._yield_turn()
                break
            (size,) = framing.SIZE.unpack_from(buffer, pos)
            if self.session is not None and not self.session.authenticated:
                max_bytes, key = self.max_unauthenticated_bytes, "sasl.server.max.receive.size"
            else:
                max_bytes, key = self.max_request_bytes, "socket.request.max.bytes"
            if size < 0 or size > max_bytes:
                # Refused before reading the body, as the key promises.
                self._malformed(f"frame size {size} outside 0..{max_bytes} ({key})")
                self._stop_reading()
                return
            end = pos + 4 + size
            if end > have:
                if 4 + size > len(buffer):
                    # Too large for the receive buffer: read the rest of it in place.
                    self._size_alone = True
                    got = have - pos - 4
                    if len(self._large) < min(size, max(got, LARGE_FIRST)):
                        self._large = bytearray(min(size, max(got, LARGE_FIRST)))
                    self._large[:got] = memoryview(buffer)[pos + 4:have]
                    self._frame_size, self._frame_have = size, got
                    pos = have
                break
            frame = bytes(memoryview(buffer)[pos + 4:end])
            pos = end
            taken += 1
            self._size_alone = False
            if not self._dispatch(frame):
                self._stop_reading()
                return
            self._check_room()
        if pos:
            rest = have - pos
            if rest:
                buffer[:rest] = memoryview(buffer)[pos:have]
            self._have = rest

    def _yield_turn(self) -> None:
        """Stop reading until the next turn, when the other connections have had theirs."""
        self._yielding = True
        self.transport.pause_reading()
        self.turns.wait(self)

    def next_turn(self) -> None:
        self._yielding = False
        if self._closing or self._paused:  # _check_room resumes once there is room
            return
        if not self._eof:
            self.transport.resume_reading()
        self._take_frames()
        if self._eof:
            self._end_of_input()

    def _lend_large(self, future: asyncio.Future[Frame]) -> None:
        """The suspended handler of `future` holds views of self._large: the next frames are read
        into another buffer, and this one is taken back once the handler is done."""
        lent = self._large
        spare = self._spare
        self._large = spare if spare is not None and len(spare) >= len(lent) else bytearray(len(lent))
        self._spare = None
        future.add_done_callback(functools.partial(self._take_back, lent))

    def _take_back(self, lent: bytearray, _future: asyncio.Future[Frame]) -> None:
        if len(lent) <= LARGE_KEPT and (self._spare is None or len(self._spare) < len(lent)):
            self._spare = lent

    def _grow_large(self, capacity: int) -> None:
        """A larger buffer for the frame being read, with what arrived so far. A new one, not a
        resize: the transport may still hold a view of the old one."""
        grown = bytearray(capacity)
        grown[:self._frame_have] = memoryview(self._large)[:self._frame_have]
        self._large = grown

    def _check_room(self) -> None:
        """Pause reading while too many answers wait, too much is unsent or too many bytes of
        requests are held; resume after."""
        full = (len(self._pending) >= MAX_IN_FLIGHT or self._write_paused
                or self._sending is not None or self._held >= PER_CONNECTION)
        if not full and self.memory.exhausted:
            full = True
            self.memory.wait(self._check_room)
        if full and not self._paused:
            self._paused = True
            if not self._closing:
                self.transport.pause_reading()
        elif not full and self._paused:
            self._paused = False
            if not self._closing and not self._yielding:  # else the next turn resumes
                if not self._eof:
                    self.transport.resume_reading()
                self._take_frames()  # the frames that arrived before the pause
                if self._eof:
                    self._end_of_input()

    def _stop_reading(self) -> None:
        """No more requests from this connection: close it once the answers are written."""
        if not self._closing:
            self._closing = True
            if not self._paused and not self.transport.is_closing():
                self.transport.pause_reading()
        self._close_if_done()

    def _close_if_done(self) -> None:
        if (self._closing and not self._pending and self._sending is None
                and not self.transport.is_closing()):
            self.transport.close()

    @property
    def is_quiet(self) -> bool:
        """No answer waits to be computed or sent: closing it loses nothing."""
        return not self._pending and self._sending is None

    def trim(self) -> None:
        """Give the buffers back (the connection has been silent): they grow again if it talks."""
        if self._have == 0 and self._frame_size is None:
            self._buffer = bytearray(FIRST_RECEIVE_BUFFER)
            self._large = bytearray()
            self._spare = None
            self._size_alone = False

    def close(self) -> None:
        """The broker is stopping, or the connection was idle too long."""
        self._closing = True
        self.transport.close()

    def _dispatch(self, frame: bytes | memoryview, *, in_place: bool = False) -> bool:
        """Start the request's handler; False when the connection must be closed. `in_place`:
        `frame` views self._large, and a Produce's records may view it too (no copy)."""
        session = self.session
        assert session is not None  # made with the connection
        if session.raw_tokens_expected():
            return self._raw_sasl_token(frame)
        try:
            fixed = framing.peek_header(frame)
        except MalformedRequest as exc:
            self._malformed(str(exc))
            return False
        api_key, api_version, correlation_id = fixed
        if not session.authenticated and not session.allows_before_auth(api_key):
            # As Kafka: anything but ApiVersions/SaslHandshake/SaslAuthenticate before
            # authentication closes the connection.
            log.warning("closing connection %s on %s listener: %s before SASL authentication",
                        self.peer, session.listener.name, api_name(api_key))
            return False
        if not is_supported(api_key, api_version):
            if api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 with the supported range so the client can pick a version.
                # A version newer than ours has the header of our newest (v2, with tagged
                # fields): a frame without it is malformed, and closed, as by Kafka.
                try:
                    framing.parse_header(frame, api_version > SUPPORTED[api_key][1], fixed)
                except MalformedRequest as exc:
                    self._malformed(str(exc))
                    return False
                response = api_versions_response(0, self.services.identity.finalized_features,
                                                 error_unsupported=True)
                if self._timed is not None:  # metrics.listen: errors by API and code
                    count_errors(api_key, 0, response)
                self._answer(framing.encode_response(api_key, 0, correlation_id, response))
                return True
            self._malformed(
                f"unsupported API {api_name(api_key)} (key {api_key}) version {api_version}; "
                f"supported: {SUPPORTED.get(api_key, 'none')}"
            )
            return False
        in_place = in_place and api_key == ApiKey.PRODUCE
        try:
            if in_place:
                assert isinstance(frame, memoryview)
                header, request = decode_produce_in_place(frame, fixed)
            else:
                header, request = framing.decode_request(frame, fixed)
        except MalformedRequest as exc:
            self._malformed(f"{exc} (frame starts {bytes(frame[:256]).hex()})")
            return False
        ctx = RequestContext(self.services, api_key, api_version, correlation_id,
                             header.client_id, self.client_host, session=session,
                             principal=session.principal, connection_id=self.connection_id)
        coro = self._run(ctx, HANDLERS[api_key], request, len(frame) + 4)
        try:
            waiting_on = coro.send(None)
        except StopIteration as done:
            self._answer(done.value)
            # a failed authentication, or a refused acks=0 Produce
            return not session.close_after_response
        except Exception:  # noqa: BLE001 - logged by _run; the client can't match a lost answer
            return False
        future = asyncio.ensure_future(_resume_handler(coro, waiting_on, self._answered))
        if in_place:
            self._lend_large(future)
        self._pending.append(future)
        size = len(frame) + 4  # held by the waiting handler (its decoded request) until done
        self._held += size
        self.memory.take(size)
        future.add_done_callback(functools.partial(self._release, size))
        future.add_done_callback(self._on_done)
        return True

    async def _run(self, ctx: RequestContext, handler: Handler, request: Any,
                   bytes_in: int) -> Frame:
        """The request handled and its answer encoded (timed when metrics are on). A failure
        anywhere in that closes the connection: it is logged here, the one place that sees
        them all (the client cannot match a lost answer)."""
        try:
            handling = self._handle(ctx, handler, request)
            if self._timed is not None:
                handling = self._timed(ctx.api_key, bytes_in, handling)
            return await handling
        except Exception:
            log.exception("handling %s v%d failed; closing connection %s",
                          api_name(ctx.api_key), ctx.api_version, self.peer)
            raise

    async def _handle(self, ctx: RequestContext, handler: Handler, request: Any) -> Frame:
        response = await handler(ctx, request)
        if self._encode_failpoint:
            failpoints.hit("network.before_encode")
        if response is None:  # acks=0 produce: no response at all
            return None
        if self._timed is not None:  # metrics.listen: errors by API and code
            count_errors(ctx.api_key, ctx.api_version, response)
        if ctx.api_key == ApiKey.FETCH and self._zero_copy:
            return encode_file_frame(ctx.api_version, ctx.correlation_id, response)
        return framing.encode_response(ctx.api_key, ctx.api_version, ctx.correlation_id, response)

    def _answer(self, frame: Frame) -> None:
        if not self._pending and self._sending is None:
            if frame is not None:
                self._write(frame)
            return
        ready: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        ready.set_result(frame)  # after the earlier answers, which are still in the works
        self._pending.append(ready)

    def _answered(self, frame: Frame) -> Frame:
        """A suspended handler's answer, from its task's last step: written at once when it is
        next in line (None then), else returned as the task's result, for `_write_ready`."""
        pending = self._pending
        if not pending or pending[0] is not asyncio.current_task() or self._sending is not None:
            return frame
        pending.popleft()
        if frame is not None:
            self._write(frame)
        self._write_ready()
        return None

    def _release(self, size: int, _future: asyncio.Future[Frame]) -> None:
        self._held -= size
        self.memory.give(size)

    def _on_done(self, future: asyncio.Future[Frame]) -> None:
        if self._failed and not future.cancelled() and future.exception() is None:
            _drop(future.result())  # no longer queued: the connection failed
        if self.session is not None and self.session.close_after_response:
            self._stop_reading()  # a refused acks=0 Produce that had to wait
        self._write_ready()
        self._check_room()
        self._close_if_done()

    def _write_ready(self) -> None:
        """Write the answers at the head of the queue that are done, in order."""
        while self._pending and self._pending[0].done() and self._sending is None:
            future = self._pending.popleft()
            if future.cancelled() or future.exception() is not None:
                # The handler failed (logged by _run): close, as the answer can never come.
                self._failed = self._closing = True
                for rest in self._pending:  # answers done but never to be sent: their files
                    if rest.done() and not rest.cancelled() and rest.exception() is None:
                        _drop(rest.result())
                self._pending.clear()
                self.transport.abort()
                return
            frame = future.result()
            if frame is not None:
                self._write(frame)

    def _write(self, frame: bytes | FileFrame) -> None:
        """Send one answer: bytes through the transport; a FileFrame from its files when
        nothing is unsent before it, else through the transport as bytes."""
        if self.transport.is_closing():
            _drop(frame)
            return
        if isinstance(frame, bytes):
            self.transport.write(frame)
            return
        if self.transport.get_write_buffer_size():
            try:
                data = frame.materialize()
            except OSError as exc:
                self._file_send_failed(exc)
                return
            finally:
                frame.close()
            self.transport.write(data)
            return
        if self._socket is None:  # the first file answer: the duplicate serves the rest too
            fd = self.transport.get_extra_info("socket").fileno()
            self._socket = socket.socket(fileno=os.dup(fd))
            self._socket.setblocking(False)
        self._sending = frame
        self._send_file_frame()

    def _send_file_frame(self, resumed: bool = False) -> None:
        """Send what the socket takes of the FileFrame being sent; when it is full, go on once
        it takes more (`resumed`: called back then). Once the frame is out, the answers after
        it follow."""
        frame, sock = self._sending, self._socket
        assert frame is not None and sock is not None
        parts = frame.parts
        try:
            while parts:
                part = parts[0]
                if isinstance(part, tuple):
                    fd, position, size = part
                    sent = os.sendfile(sock.fileno(), fd, position, size)
                    if sent == 0:
                        raise OSError(f"segment file ended {size} bytes early")
                    sent_from_file(sent)
                    if sent < size:
                        parts[0] = (fd, position + sent, size - sent)
                        continue
                    os.close(fd)
                else:
                    # MSG_MORE: the framing goes out with the records that follow it.
                    sent = sock.send(part, socket.MSG_MORE if len(parts) > 1 else 0)
                    if sent < len(part):
                        parts[0] = memoryview(part)[sent:]
                        continue
                parts.popleft()
        except BlockingIOError:
            asyncio.get_running_loop().add_writer(sock.fileno(), self._send_file_frame, True)
            return
        except OSError as exc:
            self._file_send_failed(exc)
            return
        self._end_file_send()
        if resumed:  # else the caller goes on with the answers after it
            self._write_ready()
            self._check_room()
            self._close_if_done()

    def _file_send_failed(self, exc: OSError) -> None:
        """A file frame could not be sent whole: the client cannot use the rest of the
        connection's bytes, so it is closed."""
        if not self._closing:
            log.warning("closing connection %s: sending a fetch answer failed: %s", self.peer, exc)
        self._end_file_send()
        self._failed = self._closing = True
        for future in self._pending:
            if future.done() and not future.cancelled() and future.exception() is None:
                _drop(future.result())
        self._pending.clear()
        self.transport.abort()

    def _end_file_send(self) -> None:
        """Forget the file frame being sent, if any: its descriptors, and the wait for the
        socket to take more."""
        if self._sending is not None:
            self._sending.close()
            self._sending = None
            assert self._socket is not None
            asyncio.get_running_loop().remove_writer(self._socket.fileno())

    def _raw_sasl_token(self, frame: bytes | memoryview) -> bool:
        """After SaslHandshake v0, the SASL tokens come unwrapped, size-prefixed (as old Kafka
        clients send them); a failure just closes the connection."""
        assert self.session is not None
        try:
            token = self.session.authenticate(bytes(frame))
        except SaslFailure as exc:
            log.warning("closing connection %s: %s", self.peer, exc)
            return False
        self._answer(framing.SIZE.pack(len(token)) + token)
        return True

    def _malformed(self, reason: str) -> None:
        log.warning("closing connection %s: malformed request: %s", self.peer, reason)


def _drop(frame: Frame) -> None:
    """An answer that will not be sent: a FileFrame gives its descriptors back."""
    if isinstance(frame, FileFrame):
        frame.close()


async def _resume_handler(coro: Coroutine[Any, Any, Frame], waiting_on: Any,
                          answered: Callable[[Frame], Frame]) -> Frame:
    """Drive a handler that ran inline until it waited, as an asyncio Task would have, and hand
    its answer to `answered` in the same step."""
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
            return answered(done.value)


async def start_server(services: Services, connections: set[Connection], host: str, port: int,
                       listener: ListenerRuntime, limits: ConnectionLimits, turns: Turns,
                       ssl_context: ssl.SSLContext | None = None) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: Connection(services, listener, connections, limits,
                                                       turns),
                                    host, port,
                                    backlog=512, ssl=ssl_context,
                                    ssl_handshake_timeout=10 if ssl_context else None)


async def start_listeners(services: Services, connections: set[Connection],
                          limits: ConnectionLimits) -> list[tuple[asyncio.Server, ListenerRuntime]]:
    """Bind every configured listener (each on its own port, TLS ones with the broker's
    certificate) and work out what each advertises."""
    from exactly.server.auth.tls import TlsConfigError, server_context
    from exactly.server.config import ConfigError

    config = services.config
    ssl_context = None
    if any(lst.name in ("SSL", "SASL_SSL") for lst in config.listeners):
        try:
            ssl_context = server_context(config)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None
    started: list[tuple[asyncio.Server, ListenerRuntime]] = []
    turns = Turns()  # one queue for every listener's connections
    try:
        for lst in config.listeners:
            runtime = ListenerRuntime(lst.name, "", 0)
            tls = ssl_context if lst.name in ("SSL", "SASL_SSL") else None
            try:
                server = await start_server(services, connections, lst.host, lst.port, runtime,
                                            limits, turns, tls)
            except OSError as exc:
                raise listen_error("listeners", lst.host, lst.port, exc) from exc
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
