"""The client connection's reading side (connection._Frames): answers are read into a buffer the
connection keeps, a large one into a buffer of its size, whatever the reads' boundaries; and the
decoded answers do not change when the next ones are read over that buffer."""

from __future__ import annotations

import asyncio
import datetime
import tracemalloc
from collections.abc import Iterable
from typing import Any

from exactly.client import connection
from exactly.client.connection import BrokerConnection, _Frames
from exactly.protocol.apis import ApiKey, response_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import encode_response

FETCH_V12 = response_class(ApiKey.FETCH, 12)
_TOPIC = FETCH_V12.__dataclass_fields__["responses"].type.__args__[0]
_PARTITION = _TOPIC.__dataclass_fields__["partitions"].type.__args__[0]


def _fetch_answer(records: bytes) -> Any:
    partition = _PARTITION(partition_index=0, error_code=ErrorCode.none, high_watermark=len(records),
                           aborted_transactions=(), records=records)
    return FETCH_V12(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                     responses=(_TOPIC(topic="t", partitions=(partition,)),))


def _run(coro: Any) -> Any:
    """On the standard asyncio loop (the one whose reads were the issue), not uvloop."""
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(coro)


def _feed(frames: _Frames, chunks: Iterable[bytes]) -> None:
    """What a transport does: each chunk is read into the buffers get_buffer offers."""
    for chunk in chunks:
        while chunk:
            buf = frames.get_buffer(-1)
            n = min(len(buf), len(chunk))
            buf[:n] = chunk[:n]
            del buf
            frames.buffer_updated(n)
            chunk = chunk[n:]


async def _decode(answers: list[Any], splits: Iterable[list[bytes]]) -> list[list[Any]]:
    """The answers, pipelined on one connection and cut into the reads of each of `splits`, as
    the connection decodes them."""
    decoded = []
    for chunks in splits:
        conn = BrokerConnection("localhost", 9092, client_id="t", request_timeout_ms=1000)
        futures = []
        for correlation_id in range(1, len(answers) + 1):
            futures.append(asyncio.get_running_loop().create_future())
            conn._waiting[correlation_id] = (ApiKey.FETCH, 12, futures[-1], float("inf"))
        frames = _Frames(conn)
        _feed(frames, chunks)
        assert all(f.done() for f in futures) and not frames.have and frames.frame_size is None
        decoded.append([f.result() for f in futures])
    return decoded


def test_pipelined_answers_split_at_every_byte_boundary_decode_the_same(monkeypatch):
    # A small receive buffer, so that a few hundred bytes are a large answer, and one larger
    # than LARGE_AT_ONCE grows as its bytes arrive.
    monkeypatch.setattr(connection, "RECEIVE_BUFFER", 128)
    monkeypatch.setattr(connection, "LARGE_AT_ONCE", 256)
    answers = [_fetch_answer(b"first"), _fetch_answer(bytes(range(256)) * 2),
               _fetch_answer(b"third"), _fetch_answer(b"x" * 40), _fetch_answer(b"\xff" * 1500),
               _fetch_answer(b"last")]
    stream = b"".join(encode_response(ApiKey.FETCH, 12, i, a) for i, a in enumerate(answers, 1))
    splits = [[stream[:k], stream[k:]] for k in range(len(stream) + 1)]
    splits.append([stream[i:i + 1] for i in range(len(stream))])  # a byte per read
    for decoded in _run(_decode(answers, splits)):
        assert decoded == answers


def test_a_large_answer_buffer_is_not_kept_beyond_LARGE_KEPT():
    big = _fetch_answer(b"\x01" * (connection.LARGE_KEPT + 1))
    medium = _fetch_answer(b"\x02" * (2 * connection.RECEIVE_BUFFER))

    async def main() -> None:
        conn = BrokerConnection("localhost", 9092, client_id="t", request_timeout_ms=1000)
        frames = _Frames(conn)
        for correlation_id, answer in enumerate((big, medium, big), 1):
            future = asyncio.get_running_loop().create_future()
            conn._waiting[correlation_id] = (ApiKey.FETCH, 12, future, float("inf"))
            _feed(frames, [encode_response(ApiKey.FETCH, 12, correlation_id, answer)])
            assert future.result() == answer
            kept = len(frames.large)
            assert kept == 0 if answer is big else kept > connection.RECEIVE_BUFFER
            assert len(frames.buffer) == connection.RECEIVE_BUFFER

    _run(main())


def test_a_large_frame_size_is_not_allocated_before_its_bytes_arrive(monkeypatch):
    """An HTTP server's answer reads as a frame of 1.2 GB: its buffer grows as bytes arrive."""
    monkeypatch.setattr(connection, "LARGE_AT_ONCE", 256)

    async def main() -> None:
        frames = _Frames(BrokerConnection("localhost", 9092, client_id="t", request_timeout_ms=1))
        _feed(frames, [b"HTTP/1.1 400 Bad Request\r\n" * 4])
        assert frames.frame_size == int.from_bytes(b"HTTP", "big") and frames.frame_have == 100
        assert len(frames.large) == connection.LARGE_AT_ONCE
        _feed(frames, [b"x" * (connection.LARGE_AT_ONCE - 100)])
        frames.get_buffer(-1)
        assert len(frames.large) == 2 * connection.LARGE_AT_ONCE

    _run(main())


class _Answers:
    """A connection's stand-in: counts the frames it is handed."""

    def __init__(self) -> None:
        self.frames: asyncio.Queue[bytes] = asyncio.Queue()

    def _on_frame(self, frame: memoryview) -> None:
        self.frames.put_nowait(bytes(frame))

    def _on_lost(self, error: BaseException | None) -> None:
        pass


def test_answers_are_read_into_the_kept_buffer_not_a_fresh_bytes_object_per_read():
    """The standard loop's reads of a plain Protocol allocate max_size (256 KiB) per read, which
    glibc may serve with mmap + munmap each time (issue 19); a BufferedProtocol's do not."""
    answers = [encode_response(ApiKey.FETCH, 12, i, _fetch_answer(b"r" * i)) for i in range(50)]

    async def main() -> int:
        conn = _Answers()
        sent = asyncio.Queue()

        async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for answer in answers:  # one at a time: a read each
                writer.write(answer)
                await writer.drain()
                await sent.get()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, _ = await asyncio.get_running_loop().create_connection(
            lambda: _Frames(conn), "127.0.0.1", port)  # type: ignore[arg-type]
        tracemalloc.start()
        try:
            for answer in answers:
                assert await conn.frames.get() == answer[4:]
                sent.put_nowait(None)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            transport.close()
            server.close()
        return peak

    assert _run(main()) < 128 * 1024
