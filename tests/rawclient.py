"""A raw Kafka-protocol connection for tests that need to send exact bytes, good or bad."""

from __future__ import annotations

import socket
import struct
from typing import Any

from exactly.protocol.apis import request_class
from exactly.protocol.framing import RequestHeader, decode_response, encode_request


class RawConnection:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, api_key: int, version: int, request: Any, client_id: str | None = "raw") -> bytes:
        self.correlation_id += 1
        return encode_request(RequestHeader(api_key, version, self.correlation_id, client_id), request)

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        request = request_class(api_key, version)(**fields)
        self.send_bytes(self.frame(api_key, version, request))
        return self.read_response(api_key, version)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def read_response(self, api_key: int, version: int) -> Any:
        correlation_id, response = decode_response(api_key, version, self.read_frame())
        assert correlation_id == self.correlation_id
        return response

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closed the connection (EOF or reset) within the timeout."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return data == b""

    def _read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)
