"""The `exactly` command."""

from __future__ import annotations

import re

import click

from exactly import __version__
from exactly.cli.acls import acls
from exactly.cli.common import fail, parse_pairs
from exactly.cli.configs import configs
from exactly.cli.console import consume, produce
from exactly.cli.groups import consumer_groups
from exactly.cli.log import log_files
from exactly.cli.records import delete_records, log_dirs
from exactly.cli.topics import topics
from exactly.cli.transactions import transactions
from exactly.cli.users import users
from exactly.cli.webconsole import console

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


cli.add_command(topics)
cli.add_command(produce)
cli.add_command(consume)
cli.add_command(transactions)
cli.add_command(acls)
cli.add_command(users)
cli.add_command(log_files)
cli.add_command(console)
cli.add_command(consumer_groups)
cli.add_command(configs)
cli.add_command(delete_records)
cli.add_command(log_dirs)


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
