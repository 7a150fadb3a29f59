"""Kafka's primitive encodings, defined once: varints, big-endian integers, strings and bytes,
their compact (flexible-version) forms and tagged fields.

Three shapes of the same rules serve three kinds of caller:

- `write_uvarint` / `write_varint` / `varint_bytes` append to a bytearray (encoders on hot paths);
- `read_uvarint` / `read_varint` decode at a position and return the next one;
- `Writer` and `Reader` chain fields for the internal topics' record formats
  (`__transaction_state`, `__consumer_offsets`) and the consumer protocol's embedded bytes.

A decoder that runs out of bytes or meets an over-long varint raises `error`, which a caller
passes as its own exception type (MalformedRequest, RecordBatchError, a codec's error), so the
message names the layer that was reading.
"""

from __future__ import annotations

import struct

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U32 = struct.Struct(">I")

_MASK64 = 0xFFFFFFFFFFFFFFFF


class Truncated(ValueError):
    """The default error of the decoders: the input ends early or a varint is too long."""


# -- varints ----------------------------------------------------------------------------------


def write_uvarint(out: bytearray, value: int) -> None:
    """Append an unsigned varint (lengths of compact strings and arrays, tags)."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zigzag varint (the fields of a record)."""
    value = ((value << 1) ^ (value >> 63)) & _MASK64
    while value >= 0x80:  # write_uvarint's loop, inline: a record's encoding calls this often
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_compact_string(out: bytearray, value: str) -> None:
    """Append a compact string: its UTF-8 length + 1 as an unsigned varint, then the bytes."""
    raw = value.encode()
    write_uvarint(out, len(raw) + 1)
    out += raw


def write_string(out: bytearray, value: str, flexible: bool) -> None:
    """Append a string: compact in a flexible version, else an int16 length and the bytes."""
    raw = value.encode()
    if flexible:
        write_uvarint(out, len(raw) + 1)
    else:
        out += I16.pack(len(raw))
    out += raw


def write_nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
    else:
        write_string(out, value, flexible)


def write_array_length(out: bytearray, length: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, length + 1)
    else:
        out += I32.pack(length)


def varint_bytes(value: int) -> bytes:
    """A zigzag varint as bytes."""
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int, *, max_bytes: int = 10,
                 error: type[Exception] = Truncated) -> tuple[int, int]:
    """The unsigned varint at `pos` and the position after it. Kafka's varints are at most 5
    bytes (int) or 10 bytes (long): `max_bytes` says which."""
    result = shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise error("the input ends inside a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise error(f"varint longer than {max_bytes} bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int, *,
                error: type[Exception] = Truncated) -> tuple[int, int]:
    """The zigzag varint at `pos` and the position after it."""
    raw, pos = read_uvarint(buf, pos, error=error)
    return (raw >> 1) ^ -(raw & 1), pos


# -- chained writing and reading ----------------------------------------------------------------


class Writer:
    """Fields appended in order: `Writer().i16(1).string("group").out`."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def i8(self, v: int) -> Writer:
        self.out += I8.pack(v)
        return self

    def i16(self, v: int) -> Writer:
        self.out += I16.pack(v)
        return self

    def i32(self, v: int) -> Writer:
        self.out += I32.pack(v)
        return self

    def i64(self, v: int) -> Writer:
        self.out += I64.pack(v)
        return self

    def string(self, v: str | None) -> Writer:
        """INT16 length, then UTF-8; None is length -1."""
        if v is None:
            return self.i16(-1)
        raw = v.encode()
        self.out += I16.pack(len(raw))
        self.out += raw
        return self

    def bytes_(self, v: bytes | None) -> Writer:
        """INT32 length, then the bytes; None is length -1."""
        if v is None:
            return self.i32(-1)
        self.out += I32.pack(len(v))
        self.out += v
        return self


class Reader:
    """Fields read in order from `data`; running out raises `error` (default Truncated)."""

    __slots__ = ("data", "error", "pos")

    def __init__(self, data: bytes, error: type[Exception] = Truncated) -> None:
        self.data = data
        self.pos = 0
        self.error = error

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.error(f"record ends early: wanted {n} bytes at {self.pos} of "
                             f"{len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def _fixed(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise self.error(f"record ends early: wanted {s.size} bytes at {self.pos} of "
                             f"{len(self.data)}")
        (v,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(v)

    def i8(self) -> int:
        return self._fixed(I8)

    def i16(self) -> int:
        return self._fixed(I16)

    def i32(self) -> int:
        return self._fixed(I32)

    def i64(self) -> int:
        return self._fixed(I64)

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos, error=self.error)
        return value

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise self.error("null string where a string is required")
        return value

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n).decode()

    def required_compact_string(self) -> str:
        value = self.compact_string()
        if value is None:
            raise self.error("null compact string where a string is required")
        return value

    def tagged_fields(self) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields
