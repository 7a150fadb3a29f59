"""The `exactly` command."""

from __future__ import annotations

import importlib
import re
from typing import Any

import click

from exactly import __version__
from exactly.cli.common import fail, parse_pairs

_HOST_PORT = re.compile(r"(?P<host>\[[^\]]+\]|[^:\[\]]*):(?P<port>[0-9]{1,5})")


def listen_to_listeners(listen: str) -> str:
    """HOST:PORT (or [IPv6]:PORT) -> PLAINTEXT://HOST:PORT, for the listeners key."""
    m = _HOST_PORT.fullmatch(listen.strip())
    if m is None or int(m["port"]) > 65535:
        raise click.BadParameter(
            f"{listen!r} is not HOST:PORT (port 0 picks a free port), e.g. 127.0.0.1:9092",
            param_hint="--listen",
        )
    return f"PLAINTEXT://{m['host']}:{m['port']}"


# The admin and client commands, imported only when one of them runs (or help lists them): they
# import the whole client, 0.3 s that `exactly broker` does not need before its first answer.
LAZY_COMMANDS = {
    "acls": "exactly.cli.acls:acls",
    "configs": "exactly.cli.configs:configs",
    "console": "exactly.cli.webconsole:console",
    "consume": "exactly.cli.console:consume",
    "consumer-groups": "exactly.cli.groups:consumer_groups",
    "delete-records": "exactly.cli.records:delete_records",
    "log": "exactly.cli.log:log_files",
    "log-dirs": "exactly.cli.records:log_dirs",
    "produce": "exactly.cli.console:produce",
    "topics": "exactly.cli.topics:topics",
    "transactions": "exactly.cli.transactions:transactions",
    "users": "exactly.cli.users:users",
}


class LazyGroup(click.Group):
    """A group whose commands named in `lazy` are imported when first asked for (click's
    "lazily loading subcommands" pattern)."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, _, attr = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attr)
            assert isinstance(command, click.Command) and command.name == cmd_name, command
            self.add_command(command)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="exactly")
def cli() -> None:
    """Exactly: an exactly-once log speaking the Kafka protocol."""


@cli.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="A Kafka-style server.properties file.",
)
@click.option("--data-dir", default=None, metavar="DIR", help="Where data is kept (log.dirs).")
@click.option(
    "--listen",
    default=None,
    metavar="HOST:PORT",
    help="Where to accept clients (listeners=PLAINTEXT://HOST:PORT); port 0 picks one.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any broker config key, e.g. --set num.partitions=3. Repeatable.",
)
def broker(
    config_file: str | None, data_dir: str | None, listen: str | None, settings: tuple[str, ...]
) -> None:
    """Run a broker in the foreground until Ctrl-C or SIGTERM."""
    from exactly.server.config import BrokerConfig, ConfigError
    from exactly.server.data_dir import DataDirInUseError
    from exactly.server.startup import StartupError

    overrides = parse_pairs(settings, "--set")
    # The explicit options win over --set, which wins over the file.
    if data_dir is not None:
        overrides.pop("log.dir", None)
        overrides["log.dirs"] = data_dir
    if listen is not None:
        overrides["listeners"] = listen_to_listeners(listen)
    try:
        config = BrokerConfig.from_sources(config_file, overrides)
        from exactly.server.broker import run

        run(config)
    except ConfigError as exc:
        fail(str(exc), 2)
    except (DataDirInUseError, StartupError) as exc:
        fail(str(exc), 1)


# The demo parses its own arguments, --help included, so that `exactly demo --help` lists them.
@cli.command(
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.pass_context
def demo(ctx: click.Context) -> None:
    """The Spark pipeline, exactly-once through driver kills (see `exactly demo --help`)."""
    import importlib.util

    from exactly.demo.app import main as run_demo

    args = list(ctx.args)
    # --help is the demo's argparse help, which needs no pyspark; a run does.
    if not {"-h", "--help"} & set(args):
        missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
        if missing:
            fail(f"exactly demo needs {' and '.join(missing)}: pip install 'exactly[spark]'")
    raise SystemExit(run_demo(args))


def main() -> None:
    cli(prog_name="exactly")


if __name__ == "__main__":
    main()
