"""`exactly delete-records` and `exactly log-dirs`, as Kafka's kafka-delete-records.sh and
kafka-log-dirs.sh: the same options, the same JSON in and out, on Exactly's own Admin client.

delete-records reads Kafka's offset JSON file (KIP-107):
  {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}
an offset of -1 meaning the partition's high watermark.
"""

from __future__ import annotations

import json

import click

from exactly.cli.common import (
    admin_call,
    connection_options,
    fail,
    open_admin,
)


def read_offset_json(path: str) -> dict[tuple[str, int], int]:
    """kafka-delete-records.sh's --offset-json-file as {(topic, partition): offset}; exit 2 with
    what is wrong in the file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}", 2)
    except json.JSONDecodeError as exc:
        fail(f"{path} is not JSON: {exc}", 2)
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        fail(f'{path}: expected {{"partitions": [{{"topic": T, "partition": P, "offset": O}}, '
             '...], "version": 1}', 2)
    out: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(entries):
        ok = (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
              and type(entry.get("partition")) is int and type(entry.get("offset")) is int
              and entry["partition"] >= 0 and entry["offset"] >= -1)
        if not ok:
            fail(f"{path}: partitions[{i}] needs a topic (string), a partition (>= 0) and an "
                 f"offset (>= 0, or -1 for the high watermark), got {json.dumps(entry)}", 2)
        key = (entry["topic"], entry["partition"])
        if key in out:
            fail(f"{path}: {key[0]}-{key[1]} appears more than once", 2)
        out[key] = entry["offset"]
    return out


@click.command("delete-records")
@click.option("--offset-json-file", required=True, type=click.Path(dir_okay=False),
              metavar="FILE", help='Which partitions to cut and where: {"partitions": [{"topic": '
              '"t", "partition": 0, "offset": 10}], "version": 1}; offset -1 is the high '
              "watermark.")
@connection_options
def delete_records(offset_json_file: str, bootstrap: str, command_config: str | None,
                   timeout_ms: int) -> None:
    """Delete the records before the given offsets (the log start offset moves up), as
    kafka-delete-records.sh."""
    from exactly.client import KafkaError

    wanted = read_offset_json(offset_json_file)
    with open_admin(bootstrap, command_config, "exactly-delete-records", timeout_ms) as admin:
        click.echo("Executing records delete operation")
        done = admin_call("delete records", lambda: admin.delete_records(wanted, partial=True))
    click.echo("Records delete operation completed:")
    failed = False
    for topic, partition in sorted(wanted):
        result = done.get((topic, partition))
        if isinstance(result, KafkaError) or result is None:
            failed = True
            click.echo(f"partition: {topic}-{partition}\terror: {result or 'no answer'}")
        else:
            click.echo(f"partition: {topic}-{partition}\tlow_watermark: {result}")
    if failed:
        raise SystemExit(1)


def _ids(text: str | None, option: str) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise click.BadParameter("give at least one name", param_hint=option)
    return items


@click.command("log-dirs")
@click.option("--describe", is_flag=True, required=True,
              help="Describe the log directories (the only action, as in kafka-log-dirs.sh).")
@click.option("--topic-list", default=None, metavar="T1,T2",
              help="Only these topics' partitions (default: all).")
@click.option("--broker-list", default=None, metavar="ID1,ID2",
              help="Only these brokers (default: all).")
@connection_options
def log_dirs(describe: bool, topic_list: str | None, broker_list: str | None, bootstrap: str,
             command_config: str | None, timeout_ms: int) -> None:
    """Print each broker's log directories with their partitions' sizes as JSON, as
    kafka-log-dirs.sh --describe."""
    topics = _ids(topic_list, "--topic-list")
    brokers = _ids(broker_list, "--broker-list")
    if brokers is not None and not all(b.isdigit() for b in brokers):
        raise click.BadParameter(f"{broker_list!r} is not a list of broker ids",
                                 param_hint="--broker-list")
    with open_admin(bootstrap, command_config, "exactly-log-dirs", timeout_ms) as admin:
        click.echo("Querying brokers for log directories information")
        found = admin_call("describe log dirs", lambda: admin.describe_log_dirs(topics))
    if brokers is not None:
        unknown = sorted(set(map(int, brokers)) - set(found))
        if unknown:
            fail(f"no broker with id {', '.join(map(str, unknown))}; the cluster has "
                 f"{', '.join(map(str, sorted(found)))}")
        found = {b: dirs for b, dirs in found.items() if str(b) in brokers}
    from exactly.protocol.errors import error_name

    click.echo(f"Received log directory information from brokers {','.join(map(str, found))}")
    click.echo(json.dumps({"brokers": [
        {"broker": broker, "logDirs": [
            {"partitions": [{"partition": f"{tp.topic}-{tp.partition}", "size": r.size,
                             "offsetLag": r.offset_lag, "isFuture": r.is_future}
                            for tp, r in sorted(d.replicas.items())],
             "error": None if d.error == 0 else error_name(d.error), "logDir": d.path}
            for d in dirs]}
        for broker, dirs in found.items()], "version": 1}, separators=(",", ":")))
