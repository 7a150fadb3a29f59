"""Declaring broker config keys: the `Key` type, `ConfigError` and the value parsers.

Each package declares the broker keys of what it implements, next to its code, as Kafka's
`TransactionLogConfig` and `GroupCoordinatorConfig` do: `log.*` in exactly/log/config.py, the
transaction keys in exactly/txn/config.py, `group.*` and `offsets.*` in exactly/groups/config.py,
`sasl.*`/`ssl.*` in exactly/server/auth/config.py, the authorizer's in
exactly/server/acl/config.py. exactly/server/config.py gathers them into the broker's config.

Like Kafka's `ConfigDef`, this module sits below every layer and imports nothing of exactly, so
any package can declare keys without depending on the server.

A parser takes the text of a value (already stripped) and returns the typed value, or raises
`ValueError` saying what is allowed; the broker's config turns that into a `ConfigError` naming
the key, the value and where it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
MINUTE_MS = 60_000  # for keys given in minutes or hours, as Kafka's are
HOUR_MS = 3_600_000


class ConfigError(ValueError):
    """A broker configuration that cannot be used. The message is meant for the operator."""


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    type: str  # INT, SHORT, LONG, BOOLEAN, STRING, LIST: what DescribeConfigs reports
    default: Any  # the typed default; None: unset (derived from another key, or optional)
    parse: Callable[[str], Any]
    doc: str
    aliases: tuple[str, ...] = ()
    sensitive: bool = False  # DescribeConfigs hides the value, as Kafka hides PASSWORD keys

    def typed_default(self) -> Any:
        # List defaults are written as text, the way a user would write them.
        if self.type == "LIST" and isinstance(self.default, str):
            return self.parse(self.default)
        return self.default


# -- value parsers ---------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")


def _whole_number(
    lo: int, hi: int, minimum: int | None, maximum: int | None
) -> Callable[[str], int]:
    low = lo if minimum is None else max(lo, minimum)
    high = hi if maximum is None else min(hi, maximum)

    def parse(text: str) -> int:
        if not _INT_RE.fullmatch(text):
            raise ValueError(f"must be a whole number from {low} to {high}")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be a whole number from {low} to {high}")
        return value

    return parse


def int_range(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """A Java int (32 bits) from `minimum` to `maximum`, both included."""
    return _whole_number(INT_MIN, INT_MAX, minimum, maximum)


def long_range(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """A Java long (64 bits) from `minimum` to `maximum`, both included."""
    return _whole_number(LONG_MIN, LONG_MAX, minimum, maximum)


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError("must be true or false")


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """One of `choices`, spelled exactly."""

    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def parse_optional_str(text: str) -> str | None:
    """Any text; empty is None (unset)."""
    return text or None


def split_list(text: str) -> tuple[str, ...]:
    """A comma-separated list, items stripped, empty items dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def render(value: Any) -> str | None:
    """A typed value as the text a properties file (and DescribeConfigs) holds."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return java_double(value)
    return str(value)


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (and Kafka's DescribeConfigs shows it):
    0.5, 1.0E7, 1.7976931348623157E308 (scientific from 10^7 up and below 10^-3)."""
    import decimal
    import math

    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    power = exponent + len(mantissa) - 1
    return (f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}")
