"""Kafka error codes by name: kio's generated enum, re-exported so the rest of Exactly has one
place to import them from."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "error_name"]


def error_name(code: int) -> str:
    """Kafka's upper-case name of an error code, e.g. 47 -> INVALID_PRODUCER_EPOCH."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE({code})"
