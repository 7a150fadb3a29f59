"""Small helpers shared by the commands."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import NoReturn

import click

DEFAULT_BOOTSTRAP = "localhost:9092"

bootstrap_option = click.option(
    "--bootstrap-server",
    "bootstrap",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    metavar="HOST:PORT",
    help="The broker to connect to.",
)


def parse_pairs(pairs: Iterable[str], option: str) -> dict[str, str]:
    """["k=v", ...] -> {k: v}, in order; a later pair wins."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=option)
        out[key.strip()] = value
    return out


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def kafka_error_text(exc: BaseException) -> str:
    """A KafkaException's message without the KafkaError(...) wrapping."""
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "str"):
        err = args[0]
        return f"{err.str()} ({err.name()})"
    return str(exc)
