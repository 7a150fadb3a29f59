"""`exactly console`: the web console (exactly.webconsole) under uvicorn, reading the cluster at
--bootstrap-server with the --command-config settings.

Starlette, uvicorn and Jinja2 are the `console` extra; without them the command says how to
install it. The socket is bound here, before uvicorn starts, so that `--listen HOST:0` can print
the port it got.
"""

from __future__ import annotations

import importlib.util
import socket

import click

from exactly.cli.common import (
    TimeoutType,
    bootstrap_option,
    client_settings,
    command_config_option,
    fail,
)

NEEDED = ("starlette", "uvicorn", "jinja2")


def _bind(listen: str) -> socket.socket:
    host, sep, port = listen.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"{listen!r} is not HOST:PORT (port 0 picks a free port), "
                                 "e.g. 127.0.0.1:8080", param_hint="--listen")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(128)
    except OSError as exc:
        fail(f"cannot listen on {listen}: {exc.strerror or exc}; give another --listen HOST:PORT")
    return sock


@click.command("console")
@bootstrap_option
@command_config_option
@click.option("--listen", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT",
              help="Where to serve the console (port 0 picks a free port). It has no TLS of its "
              "own: keep it on localhost or behind a TLS proxy when users log in.")
@click.option("--timeout", "timeout_ms", type=TimeoutType(), default=10_000, show_default=True,
              metavar="MS", help="How long each read of the cluster waits for the broker, in ms.")
@click.option("--refresh", "refresh_s", type=click.FloatRange(min=0.5), default=3.0,
              show_default=True, metavar="SECONDS", help="How often the pages refresh.")
@click.option("--session-idle", "idle_s", type=click.FloatRange(min=10), default=1800.0,
              show_default=True, metavar="SECONDS",
              help="A login is forgotten after this long without a request.")
def console(bootstrap: str, command_config: str | None, listen: str, timeout_ms: int,
            refresh_s: float, idle_s: float) -> None:
    """Serve the web console: topics and partitions, transactions (in-doubt 2PC ones first),
    consumer groups, producers; force-terminate and abort behind a confirmation. On a SASL
    listener (--command-config with security.protocol SASL_*) users log in to act, with their
    own credentials, so the broker's ACLs decide."""
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        fail("exactly console needs the console extra: pip install 'exactly[console]' "
             f"(missing: {', '.join(missing)})")
    import uvicorn

    from exactly.webconsole.app import ConsoleConfig, create_app

    settings = client_settings(bootstrap, command_config, "exactly-console")
    settings["request.timeout.ms"] = timeout_ms
    settings["socket.connection.setup.timeout.ms"] = timeout_ms
    app = create_app(ConsoleConfig(settings, refresh_s=refresh_s, idle_timeout_s=idle_s))
    sock = _bind(listen)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"Exactly console on http://{shown}:{port} (cluster {bootstrap}); Ctrl-C stops it",
               err=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="on"))
    server.run(sockets=[sock])
