"""`exactly log ...`: the files of a data directory, read without a broker (issue 14).

    exactly log verify --data-dir D          check every batch, index and checkpoint file
    exactly log dump FILE... [--print-data-log]   print batches and records, index entries,
                                             as Kafka's kafka-dump-log.sh

The work is in exactly.log.verify and exactly.log.dump; this module parses arguments, prints,
and sets the exit status: 0 when clean, 1 when problems were found, 2 for bad arguments.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from exactly.cli.common import fail


@click.group("log")
def log_files() -> None:
    """Check and print a data directory's log files (no broker needed)."""


@log_files.command()
@click.option("--data-dir", required=True, metavar="DIR",
              help="The broker's data directory (log.dirs).")
def verify(data_dir: str) -> None:
    """Check every batch (CRC, sizes, offsets, records), index and checkpoint file.

    Each problem is printed with its file and where in it; the exit status is 0 when none was
    found, 1 when some were."""
    from exactly.log.verify import verify_data_dir

    directory = Path(data_dir)
    if not directory.is_dir():
        fail(f"data directory {directory} "
             f"{'is not a directory' if directory.exists() else 'does not exist'}", 2)
    pid = _running_broker(directory)
    if pid is not None:
        click.echo(f"note: a broker (pid {pid}) is running on {directory}; its active segments "
                   "may change while verified", err=True)
    try:
        report = verify_data_dir(directory)
    except OSError as exc:
        fail(f"cannot read {exc.filename or directory}: {exc.strerror or exc}")
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    for problem in report.problems:
        click.echo(str(problem))
    click.echo(f"Verified {directory}: {report.summary()}")
    sys.exit(1 if report.problems else 0)


def _running_broker(directory: Path) -> int | None:
    """The pid of a live broker on `directory`: the one its `.lock` names. Reading the pid
    leaves the lock alone, so a broker starting meanwhile is never refused because of us."""
    from exactly.server.data_dir import LOCK_FILE

    try:
        text = (directory / LOCK_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.isdigit():  # a broker that stopped cleanly emptied it
        return None
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:  # killed (kill -9 leaves its pid behind)
        return None
    except PermissionError:  # alive, another user's
        pass
    return int(text)


@log_files.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--print-data-log", is_flag=True,
              help="Print each record with its key, value and headers.")
@click.option("--deep-iteration", is_flag=True,
              help="Print a line per record (offset, timestamp, sizes, marker), without data.")
def dump(files: tuple[str, ...], print_data_log: bool, deep_iteration: bool) -> None:
    """Print a .log file's batches (and records), an index's entries, a .txnindex's aborted
    transactions, or a checkpoint file's offsets, as kafka-dump-log.sh."""
    from exactly.log.dump import UnknownFileError, dump_file

    for name in files:
        try:
            for line in dump_file(Path(name), print_data=print_data_log, deep=deep_iteration):
                click.echo(line)
        except (UnknownFileError, FileNotFoundError) as exc:
            fail(str(exc), 2)
        except OSError as exc:
            fail(f"cannot read {name}: {exc.strerror or exc}")
