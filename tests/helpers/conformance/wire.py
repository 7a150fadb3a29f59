"""Plain values in and out of kio's typed entities, for the conformance corpus.

`entity(cls, {...})` builds a request from nested dicts and lists (ints where kio wants
timedeltas or timestamps: milliseconds); `plain(response)` turns an answer back into dicts,
lists, ints and strings, so two brokers' answers compare as data and print as JSON.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import types
import typing
import uuid
from functools import cache
from typing import Any

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    hint = _strip_optional(hint)
    if typing.get_origin(hint) is tuple:
        (item, *_rest) = typing.get_args(hint)
        return tuple(_value(item, v) for v in value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return entity(hint, value)  # type: ignore[arg-type]
    if isinstance(hint, type):
        if issubclass(hint, datetime.timedelta) and isinstance(value, int):
            return datetime.timedelta(milliseconds=value)
        if issubclass(hint, datetime.datetime) and isinstance(value, int):
            return EPOCH + datetime.timedelta(milliseconds=value)
        if issubclass(hint, uuid.UUID) and isinstance(value, str):
            return uuid.UUID(value)
        parse = getattr(hint, "parse", None)
        if parse is not None and not isinstance(value, hint):
            return parse(value)
    return value


def entity(cls: type, values: dict[str, Any]) -> Any:
    """cls(**values), each nested dict/list made into the entity or tuple its field wants."""
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise TypeError(f"{cls.__module__}.{cls.__name__} has no field(s) {sorted(unknown)}; "
                        f"it has {sorted(names)}")
    return cls(**{k: _value(hints[k], v) for k, v in values.items()})


def plain(value: Any) -> Any:
    """A kio entity (or anything inside one) as JSON-able data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, bool):
        return value
    if isinstance(value, datetime.timedelta):
        return round(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return round((value - EPOCH) / datetime.timedelta(milliseconds=1))
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value
