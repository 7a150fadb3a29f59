"""The broker's log levels as a config resource: BROKER_LOGGER (KIP-412), what
`kafka-configs.sh --entity-type broker-loggers` describes and alters.

The loggers are the broker's own Python loggers (`root` and the `exactly.*` ones); levels take
Kafka's (log4j) names. As in Kafka, a change lasts until the broker stops (it is not stored), and
deleting a logger's level makes it inherit its parent's again; the root logger's cannot be deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from exactly.protocol.errors import ErrorCode

ROOT = "root"
LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
_NAMES = {number: name for name, number in LEVELS.items()}


class LoggerConfigError(Exception):
    """A refused change; nothing changed. `error_code` is Kafka's answer."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


def logger_names() -> list[str]:
    """`root`, then the broker's loggers that exist, sorted."""
    return [ROOT] + sorted(name for name in logging.root.manager.loggerDict
                           if name == "exactly" or name.startswith("exactly."))


def level_name(level: int) -> str:
    """Kafka's name of a level (the nearest at or below it)."""
    return _NAMES[max(number for number in _NAMES if number <= max(level, LEVELS["TRACE"]))]


def describe() -> list[tuple[str, str | None, str, bool, bool]]:
    """(logger, effective level, source, read_only, sensitive) of every logger."""
    return [(name, level_name(_logger(name).getEffectiveLevel()),
             "DYNAMIC_BROKER_LOGGER_CONFIG", False, False) for name in logger_names()]


def alter(set: Mapping[str, str], delete: Iterable[str], *, validate_only: bool) -> None:
    """Set levels and delete them (back to the parent's); all checked before any applies."""
    delete = list(delete)
    known = frozenset(logger_names())
    for name in [*set, *delete]:
        if name not in known:
            raise LoggerConfigError(ErrorCode.invalid_config, f"Logger {name} does not exist!")
    for name, level in set.items():
        if level.upper() not in LEVELS:
            raise LoggerConfigError(ErrorCode.invalid_config,
                                    f"Cannot set the log level of {name} to {level} as it is not "
                                    f"a supported log level. Valid levels: {', '.join(LEVELS)}")
    if ROOT in delete:
        raise LoggerConfigError(ErrorCode.invalid_request,
                                "Removing the log level of the root logger is not allowed")
    if validate_only:
        return
    for name, level in set.items():
        _logger(name).setLevel(LEVELS[level.upper()])
    for name in delete:
        _logger(name).setLevel(logging.NOTSET)
