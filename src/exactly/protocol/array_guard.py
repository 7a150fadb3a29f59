"""A check of every array length in a request body before kio decodes it.

kio's native reader reserves room for an array's elements as soon as it reads the array's length,
before reading any element: a Metadata v12 body of five bytes claiming 4,294,967,294 topics makes
it ask for 34 GB, and the allocation failure aborts the whole broker process (Rust's out-of-memory
handler, which no `except` can catch). Apache Kafka refuses such a frame and closes the connection
(InvalidRequestException in its generated readers: "Tried to allocate a collection of size N, but
there are only M bytes remaining"); so does Exactly, by walking the body with this module first.

Each element of an array takes at least one byte, so an array may not claim more elements than
there are bytes left in the frame. Past that, Apache Kafka 4.4's generated readers have absolute
caps (MessageUtil.MAX_ARRAY_LENGTH and MAX_TAGGED_FIELD_COUNT, checked after the remaining-bytes
check): an array (legacy or compact, nullable or not, keyed collections included, in the body or
inside a tagged field) of more than 1,000,000 elements, and a tagged-field section of more than
10,000 fields (every struct's, and the request header's: framing.py), are refused with Kafka's
messages, even where the elements would fit in the frame (a million empty strings are a million
bytes). Such a request gets the connection closed, as Kafka's InvalidRequestException does.

The walk reads only lengths: strings, bytes and records are skipped by their sizes, and
fixed-size fields by their widths, so it costs a few steps per array element whatever the request
holds (a Produce's records are one step). It follows kio's schema of the request class: the
`kafka_type` of each field, nested entities, and the tagged fields of flexible versions
(KIP-482), whose values are walked inside their own sizes.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from functools import cache
from types import NoneType, UnionType
from typing import Any

from exactly.protocol.primitives import read_uvarint

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "error_code": 2, "uint16": 2, "int32": 4,
          "uint32": 4, "timedelta_i32": 4, "float64": 8, "int64": 8, "uint64": 8,
          "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Apache Kafka's MessageUtil.MAX_ARRAY_LENGTH and MAX_TAGGED_FIELD_COUNT.
MAX_ARRAY_LENGTH = 1_000_000
MAX_TAGGED_FIELD_COUNT = 10_000


def too_many_elements(count: int) -> str:
    """Kafka's message for an array over MAX_ARRAY_LENGTH."""
    return (f"Tried to read a collection of size {count}, which exceeds the maximum allowed size "
            f"of {MAX_ARRAY_LENGTH}.")


def check_tagged_field_count(count: int, remaining: int) -> str | None:
    """Kafka's checks of a tagged-field section's count, before any field is read: the error
    message, or None if the count is allowed."""
    if count > remaining:
        return f"Tried to read {count} tagged fields, but there are only {remaining} bytes remaining."
    if count > MAX_TAGGED_FIELD_COUNT:
        return (f"Tried to read {count} tagged fields, which exceeds the maximum allowed count of "
                f"{MAX_TAGGED_FIELD_COUNT}.")
    return None


class ArrayTooLong(ValueError):
    """An array claims more elements than the frame has bytes left, or a field runs past it."""


# A step of the walk: ("fixed", width), ("sized", legacy length) for a string, bytes or records,
# ("entity", class), ("array", inner step).
_Step = tuple[str, Any]


def _inner(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        if len(args) == 1:
            return args[0]
    return hint


def _step(kafka_type: str | None, hint: Any) -> _Step:
    optional = _inner(hint) is not hint
    hint = _inner(hint)
    if optional and dataclasses.is_dataclass(hint):
        # A nullable struct (e.g. DescribeTopicPartitions' cursor, KIP-966): an int8 first,
        # -1 for null, 1 before the struct.
        return ("nullable_entity", hint)
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return ("array", _step(kafka_type, item))
    if dataclasses.is_dataclass(hint):
        return ("entity", hint)
    if kafka_type in _FIXED:
        return ("fixed", _FIXED[kafka_type])
    if kafka_type == "string":
        return ("sized", _I16)  # the width of the length in the legacy encoding
    if kafka_type in ("bytes", "records"):
        return ("sized", _I32)
    raise TypeError(f"array_guard: no step for kafka_type {kafka_type!r} ({hint!r})")


@cache
def _plan(cls: type) -> tuple[list[_Step], dict[int, _Step], bool]:
    """The steps of the non-tagged fields in order, the tagged fields' steps by tag, and
    whether the entity is flexible."""
    hints = typing.get_type_hints(cls)
    steps: list[_Step] = []
    tagged: dict[int, _Step] = {}
    for f in dataclasses.fields(cls):
        step = _step(f.metadata.get("kafka_type"), hints[f.name])
        if "tag" in f.metadata:
            tagged[int(f.metadata["tag"])] = step
        elif step[0] == "fixed" and steps and steps[-1][0] == "fixed":
            steps[-1] = ("fixed", steps[-1][1] + step[1])  # one skip for a run of them
        else:
            steps.append(step)
    return steps, tagged, bool(vars(cls).get("__flexible__", False))


def check(cls: type, frame: bytes | bytearray | memoryview, pos: int) -> None:
    """Walk the body of a `cls` request starting at `pos`; ArrayTooLong if an array claims more
    elements than the bytes left, or the body runs past the frame."""
    try:
        _compiled(cls)(frame, pos, len(frame))
    except (IndexError, struct.error) as exc:
        raise ArrayTooLong(f"the body ends inside a field: {exc}") from None


# The walk of each request class is compiled to a function of straight-line code (what the plan
# says, unrolled), as the walk runs before every request is decoded: interpreting the plan step
# by step cost more than kio's decoding itself.


@cache
def _compiled(cls: type) -> Any:
    steps, _tagged, flexible = _plan(cls)
    lines = ["def walk(frame, pos, end):"]
    for step in steps:
        lines += _code(step, flexible, "    ", 0)
    lines.append("    if pos > end: raise ArrayTooLong('a field runs past the end of the frame')")
    if flexible:
        lines.append("    if pos < end and frame[pos] == 0: return pos + 1")
        lines.append("    return _entity_tags(CLS, frame, pos, end)")
    else:
        lines.append("    return pos")
    namespace: dict[str, Any] = {
        "ArrayTooLong": ArrayTooLong, "_uvarint": _uvarint, "_I16": _I16, "_I32": _I32,
        "_entity_tags": _entity_tags, "CLS": cls, "_compiled": _compiled,
        "MAX_ARRAY_LENGTH": MAX_ARRAY_LENGTH, "too_many_elements": too_many_elements}
    entities: dict[str, type] = {}
    _collect(steps, entities)
    namespace.update(entities)
    exec("\n".join(lines), namespace)  # noqa: S102  (code made here from kio's schema only)
    return namespace["walk"]


def _entity_name(cls: type) -> str:
    return f"E{id(cls)}"


def _collect(steps: list[_Step], into: dict[str, type]) -> None:
    for kind, arg in steps:
        while kind == "array":
            kind, arg = arg
        if kind in ("entity", "nullable_entity"):
            into[_entity_name(arg)] = arg


def _code(step: _Step, flexible: bool, indent: str, depth: int) -> list[str]:
    kind, arg = step
    if kind == "fixed":
        return [f"{indent}pos += {arg}"]
    if kind == "entity":
        return [f"{indent}pos = _compiled({_entity_name(arg)})(frame, pos, end)"]
    if kind == "nullable_entity":
        return [f"{indent}if frame[pos] == 0xff: pos += 1",
                f"{indent}else: pos = _compiled({_entity_name(arg)})(frame, pos + 1, end)"]
    n = f"n{depth}"
    if flexible:
        read = [f"{indent}{n} = frame[pos]",
                f"{indent}if {n} < 128: pos += 1",
                f"{indent}else: {n}, pos = _uvarint(frame, pos, end)",
                f"{indent}{n} -= 1"]  # compact: length + 1, 0 for null
    else:
        width = arg.size if kind == "sized" else 4
        read = [f"{indent}{n} = {'_I16' if width == 2 else '_I32'}.unpack_from(frame, pos)[0]",
                f"{indent}pos += {width}"]
    if kind == "sized":
        return [*read, f"{indent}if {n} > 0: pos += {n}"]
    inner_kind, inner_arg = arg
    out = [*read, (f"{indent}if {n} > end - pos: raise ArrayTooLong("
                   f"f'an array claims {{{n}}} elements with {{end - pos}} bytes left')"),
           f"{indent}if {n} > MAX_ARRAY_LENGTH: raise ArrayTooLong(too_many_elements({n}))"]
    if inner_kind == "fixed":
        return [*out, f"{indent}if {n} > 0: pos += {n} * {inner_arg}"]
    out.append(f"{indent}for _ in range({n}):")
    out += _code(arg, flexible, indent + "    ", depth + 1)
    return out


def _entity_tags(cls: type, frame: Any, pos: int, end: int) -> int:
    """The tagged-field section of a flexible entity, at `pos`: walked by the plan."""
    _steps, tagged, _flexible = _plan(cls)
    count, pos = _uvarint(frame, pos, end)
    error = check_tagged_field_count(count, end - pos)
    if error is not None:
        raise ArrayTooLong(error)
    for _ in range(count):
        tag, pos = _uvarint(frame, pos, end)
        size, pos = _uvarint(frame, pos, end)
        if size > end - pos:
            raise ArrayTooLong(f"tagged field {tag} of {size} bytes in {end - pos}")
        step = tagged.get(tag)
        if step is not None:
            _walk(step, True, frame, pos, pos + size)
        pos += size
    return pos


def _uvarint(frame: Any, pos: int, end: int) -> tuple[int, int]:
    if pos < end and frame[pos] < 0x80:  # nearly every length and count: one byte
        return frame[pos], pos + 1
    value, after = read_uvarint(frame, pos, max_bytes=5, error=ArrayTooLong)
    if after > end:
        raise ArrayTooLong("a varint runs past the end of its field")
    return value, after


def _entity(cls: type, frame: Any, pos: int, end: int) -> int:
    """The interpreted walk of an entity (inside tagged fields, which are rare)."""
    steps, _tagged, flexible = _plan(cls)
    for step in steps:
        pos = _walk(step, flexible, frame, pos, end)
    if pos > end:
        raise ArrayTooLong("a field runs past the end of the frame")
    if flexible:
        if pos < end and frame[pos] == 0:  # no tagged fields, as nearly always
            return pos + 1
        return _entity_tags(cls, frame, pos, end)
    return pos


def _walk(step: _Step, flexible: bool, frame: Any, pos: int, end: int) -> int:
    kind, arg = step
    if kind == "fixed":
        pos += arg
    elif kind == "sized":
        if flexible:
            n, pos = _uvarint(frame, pos, end)
            size = n - 1  # 0: null
        else:
            if pos + arg.size > end:
                raise ArrayTooLong("a length runs past the end of the frame")
            size = arg.unpack_from(frame, pos)[0]
            pos += arg.size
        if size > 0:
            pos += size
    elif kind == "entity":
        pos = _entity(arg, frame, pos, end)
    elif kind == "nullable_entity":
        pos = pos + 1 if frame[pos] == 0xff else _entity(arg, frame, pos + 1, end)
    else:  # array
        if flexible:
            n, pos = _uvarint(frame, pos, end)
            count = n - 1  # 0: null
        else:
            if pos + 4 > end:
                raise ArrayTooLong("an array length runs past the end of the frame")
            count = _I32.unpack_from(frame, pos)[0]
            pos += 4
        if count > end - pos:
            raise ArrayTooLong(f"an array claims {count} elements with {end - pos} bytes left")
        if count > MAX_ARRAY_LENGTH:
            raise ArrayTooLong(too_many_elements(count))
        for _ in range(max(0, count)):
            pos = _walk(arg, flexible, frame, pos, end)
    if pos > end:
        raise ArrayTooLong("a field runs past the end of the frame")
    return pos
