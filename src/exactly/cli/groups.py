"""`exactly consumer-groups`: list, describe (members, offsets and lag, state), reset offsets,
delete groups and delete offsets, shaped like Kafka's kafka-consumer-groups.sh: one command, one
action flag, Kafka's option names and output columns. Built on Exactly's own Admin client
(ListGroups, DescribeGroups or ConsumerGroupDescribe for KIP-848 groups, OffsetFetch,
OffsetCommit, ListOffsets, DeleteGroups, OffsetDelete of KIP-496), so it works against Exactly
and against Apache Kafka.

Offsets are reset as Kafka's tool resets them: an admin OffsetCommit, which the coordinator
takes only while the group has no members, and new offsets clamped to [log start, log end]."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click

from exactly.cli.common import (
    admin_call,
    connection_options,
    fail,
    open_admin,
    print_table,
)

if TYPE_CHECKING:
    from exactly.client.admin import Admin, ConsumerGroupDescription, OffsetSpec
    from exactly.protocol.structs import TopicPartition

ACTIONS = ("list_", "describe", "reset_offsets", "delete", "delete_offsets")
RESET_SPECS = ("to_earliest", "to_latest", "to_current", "to_offset", "to_datetime", "shift_by")
PROGRESS_ABOVE = 100  # partitions: a reset of more says what it is doing on stderr
CLAMP_WARNINGS = 10  # clamped offsets named one by one; more are counted
INACTIVE_STATES = ("Empty", "Dead")  # where Kafka's tool lets offsets be reset


def _flag(name: str) -> str:
    return "--" + name.rstrip("_").replace("_", "-")


@click.command("consumer-groups")
@connection_options
@click.option("--list", "list_", is_flag=True, help="List the consumer groups.")
@click.option("--describe", is_flag=True,
              help="Describe groups: offsets and lag (the default), --members or --state.")
@click.option("--reset-offsets", is_flag=True,
              help="Reset the groups' offsets (inactive groups only); a dry run unless --execute.")
@click.option("--delete", is_flag=True, help="Delete groups (empty ones) and their offsets.")
@click.option("--delete-offsets", is_flag=True,
              help="Delete one group's committed offsets of --topic partitions.")
@click.option("--group", "groups", multiple=True, metavar="GROUP",
              help="The group to act on. Repeatable (not with --delete-offsets).")
@click.option("--all-groups", is_flag=True, help="Every consumer group (--describe, "
              "--reset-offsets, --delete).")
@click.option("--members", is_flag=True, help="With --describe: the members.")
@click.option("--offsets", is_flag=True, help="With --describe: offsets and lag (the default).")
@click.option("--verbose", is_flag=True, help="With --describe --members: assignments too.")
@click.option("--state", is_flag=False, flag_value="", default=None, metavar="[STATE,...]",
              help="With --describe: the groups' state. With --list: show states, or only "
              "groups in these states (comma-separated, e.g. Stable,Empty).")
@click.option("--type", "type_", is_flag=False, flag_value="", default=None,
              metavar="[TYPE,...]", help="With --list: show types, or only groups of these "
              "types (classic, consumer).")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,P]",
              help="With --reset-offsets or --delete-offsets: a topic, or some of its "
              "partitions. Repeatable.")
@click.option("--all-topics", is_flag=True,
              help="With --reset-offsets: every partition the group has an offset for.")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-current", is_flag=True, help="Reset to the committed offset (the log end "
              "where there is none).")
@click.option("--to-offset", type=click.IntRange(min=0), default=None, metavar="N",
              help="Reset to offset N (clamped to the partition's offsets).")
@click.option("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss",
              help="Reset to the first offset at or after this time; a zone as Z or ±HH:MM, "
              "else local time.")
@click.option("--shift-by", type=int, default=None, metavar="N",
              help="Move each committed offset by N (negative: back), clamped.")
@click.option("--dry-run", is_flag=True, help="Only print the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
def consumer_groups(bootstrap: str, command_config: str | None, timeout_ms: int,
                    groups: tuple[str, ...], all_groups: bool, topics: tuple[str, ...],
                    **options: Any) -> None:
    """List, describe, reset the offsets of, and delete consumer groups (as
    kafka-consumer-groups.sh)."""
    actions = [a for a in ACTIONS if options[a]]
    if len(actions) != 1:
        raise click.UsageError("give exactly one action: --list, --describe, --reset-offsets, "
                               "--delete or --delete-offsets")
    action = actions[0]
    _check_options(action, groups, all_groups, topics, options)
    with open_admin(bootstrap, command_config, "exactly-consumer-groups", timeout_ms) as admin:
        if action == "list_":
            _list(admin, options["state"], options["type_"])
            return
        wanted = list(groups) if not all_groups else [
            g.group_id for g in admin_call("list consumer groups", admin.list_consumer_groups)]
        if action == "describe":
            _describe(admin, wanted, options)
        elif action == "reset_offsets":
            for i, group in enumerate(wanted):
                if i:
                    click.echo()
                _reset(admin, group, topics, options)
        elif action == "delete":
            _delete(admin, wanted)
        else:
            _delete_offsets(admin, wanted[0], topics)


def _check_options(action: str, groups: Sequence[str], all_groups: bool, topics: Sequence[str],
                   options: dict[str, Any]) -> None:
    """Kafka's rules for which options go with which action, said as usage errors."""
    def only_with(names: Iterable[str], allowed: Iterable[str]) -> None:
        for name in names:
            if action not in allowed and options.get(name) not in (None, False, ()):
                raise click.UsageError(f"{_flag(name)} goes with "
                                       f"{' or '.join(_flag(a) for a in allowed)}")

    only_with(("members", "offsets", "verbose"), ("describe",))
    only_with(("state",), ("describe", "list_"))
    only_with(("type_",), ("list_",))
    only_with(("all_topics", "dry_run", "execute") + RESET_SPECS, ("reset_offsets",))
    if action == "list_":
        if groups or all_groups or topics:
            raise click.UsageError("--list takes no --group, --all-groups or --topic")
        return
    if groups and all_groups:
        raise click.UsageError("give --group or --all-groups, not both")
    if not groups and not all_groups:
        raise click.UsageError(f"{_flag(action)} needs --group GROUP (or --all-groups)")
    if topics and action not in ("reset_offsets", "delete_offsets"):
        raise click.UsageError("--topic goes with --reset-offsets or --delete-offsets")
    if action == "describe":
        views = [v for v in ("members", "offsets") if options[v]] + (
            ["state"] if options["state"] is not None else [])
        if len(views) > 1:
            raise click.UsageError("give one of --members, --offsets, --state")
        if options["state"]:
            raise click.UsageError("--describe --state takes no value (filter states with --list)")
        if options["verbose"] and not options["members"]:
            raise click.UsageError("--verbose goes with --describe --members")
    elif action == "reset_offsets":
        specs = [s for s in RESET_SPECS if options[s] not in (None, False)]
        if len(specs) != 1:
            raise click.UsageError("--reset-offsets needs exactly one of "
                                   + ", ".join(_flag(s) for s in RESET_SPECS))
        if bool(topics) == options["all_topics"]:
            raise click.UsageError("--reset-offsets needs --topic TOPIC[:P,P] or --all-topics "
                                   "(one of them)")
        if options["dry_run"] and options["execute"]:
            raise click.UsageError("give --dry-run or --execute, not both")
    elif action == "delete_offsets":
        if all_groups or len(groups) != 1:
            raise click.UsageError("--delete-offsets takes exactly one --group")
        if not topics:
            raise click.UsageError("--delete-offsets needs --topic TOPIC[:P,P]")


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _list(admin: Admin, state: str | None, type_: str | None) -> None:
    listing = admin_call("list consumer groups", lambda: admin.list_consumer_groups(
        states=_split(state), types=_split(type_)))
    if state is None and type_ is None:
        for g in listing:
            click.echo(g.group_id)
        return
    headers = ["GROUP"] + (["TYPE"] if type_ is not None else []) + (
        ["STATE"] if state is not None else [])
    print_table(headers, ([g.group_id] + ([g.type] if type_ is not None else [])
                          + ([g.state] if state is not None else []) for g in listing))


# -- describe ---------------------------------------------------------------------------------

def _description(admin: Admin, group: str) -> ConsumerGroupDescription | None:
    """The group's description; None if it does not exist."""
    from exactly.client import KafkaError
    from exactly.protocol.errors import ErrorCode

    def call() -> ConsumerGroupDescription | None:
        try:
            return admin.describe_consumer_groups([group])[group]
        except KafkaError as exc:
            if exc.code == ErrorCode.group_id_not_found:
                return None
            raise

    return admin_call(f"describe consumer group {group!r}", call)


def _describe(admin: Admin, groups: Sequence[str], options: dict[str, Any]) -> None:
    for i, group in enumerate(groups):
        desc = _description(admin, group)
        if desc is None:
            fail(f"Consumer group '{group}' does not exist.")
        if i:
            click.echo()
        if desc.state in ("PreparingRebalance", "CompletingRebalance", "Assigning",
                          "Reconciling"):
            click.echo(f"Warning: Consumer group '{group}' is rebalancing.", err=True)
        elif not desc.members and options["state"] is None:
            click.echo(f"Consumer group '{group}' has no active members.", err=True)
        if options["state"] is not None:
            c = desc.coordinator
            print_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                        [(group, f"{c.host}:{c.port} ({c.node_id})", desc.partition_assignor or None,
                          desc.state, len(desc.members))])
        elif options["members"]:
            _describe_members(desc, options["verbose"])
        else:
            _describe_offsets(admin, desc)


def _assignment_text(partitions: Iterable[TopicPartition]) -> str | None:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(map(str, sorted(ps)))})"
                    for t, ps in sorted(by_topic.items())) or None


def _describe_members(desc: ConsumerGroupDescription, verbose: bool) -> None:
    if not verbose:
        print_table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"),
                    ((desc.group_id, m.member_id, m.host, m.client_id, len(m.assignment))
                     for m in desc.members))
        return
    print_table(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                 "ASSIGNMENT"),
                ((desc.group_id, m.member_id, m.group_instance_id, m.host, m.client_id,
                  len(m.assignment), _assignment_text(m.assignment)) for m in desc.members))


def _describe_offsets(admin: Admin, desc: ConsumerGroupDescription) -> None:
    """Kafka's default view: every partition the group has an offset for or a member owns."""
    from exactly.client.admin import OffsetSpec

    group = desc.group_id
    committed = admin_call(f"list offsets of consumer group {group!r}",
                           lambda: admin.list_consumer_group_offsets(group))
    owner = {tp: m for m in desc.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner))
    ends = admin_call("list log end offsets", lambda: admin.list_offsets(
        dict.fromkeys(partitions, OffsetSpec.latest())))
    rows = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = ends[tp].offset
        member = owner.get(tp)
        rows.append((group, tp.topic, tp.partition, current, end,
                     None if current is None else max(end - current, 0),
                     member.member_id if member else None, member.host if member else None,
                     member.client_id if member else None))
    print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID", "HOST", "CLIENT-ID"), rows)


# -- reset ------------------------------------------------------------------------------------

def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime, YYYY-MM-DDTHH:mm:SS.sss with an optional zone (Z, ±HH:MM), as ms
    since the epoch; without a zone, local time (as Kafka's tool reads it)."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not YYYY-MM-DDTHH:mm:SS.sss, optionally with a "
                                 "zone (Z or ±HH:MM), e.g. 2026-01-31T09:30:00.000Z",
                                 param_hint="--to-datetime") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time
    return round(when.timestamp() * 1000)


def _scope(admin: Admin, topics: Sequence[str]) -> list[TopicPartition]:
    """--topic T / T:p,p as partitions; a topic without partitions named means all of them."""
    from exactly.protocol.structs import TopicPartition

    whole: list[str] = []
    out: list[TopicPartition] = []
    for spec in topics:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise click.BadParameter(f"{spec!r} is not TOPIC or TOPIC:P,P", param_hint="--topic")
        if not sep:
            whole.append(topic)
            continue
        try:
            out.extend(TopicPartition(topic, int(p)) for p in parts.split(","))
        except ValueError:
            raise click.BadParameter(f"{spec!r}: partitions are numbers, as TOPIC:0,1,2",
                                     param_hint="--topic") from None
    if whole:
        described = admin_call("describe topics", lambda: admin.describe_topics(whole))
        out.extend(TopicPartition(t, p.partition) for t in whole for p in described[t].partitions)
    return sorted(set(out))


def _progress(count: int, message: str) -> None:
    if count > PROGRESS_ABOVE:
        click.echo(message, err=True)


def _reset(admin: Admin, group: str, topics: Sequence[str], options: dict[str, Any]) -> None:
    from exactly.client.admin import OffsetSpec

    desc = _description(admin, group)
    state = "Dead" if desc is None else desc.state
    if state not in INACTIVE_STATES:
        fail(f"Assignments can only be reset if the group '{group}' is inactive, but the "
             f"current state is {state}.")
    committed = {tp: o.offset for tp, o in admin_call(
        f"list offsets of consumer group {group!r}",
        lambda: admin.list_consumer_group_offsets(group)).items()}
    partitions = sorted(committed) if options["all_topics"] else _scope(admin, topics)
    _progress(len(partitions), f"group '{group}': finding new offsets of {len(partitions)} "
              "partitions...")

    def look_up(spec: OffsetSpec) -> dict[TopicPartition, int]:
        found = admin_call("list offsets", lambda: admin.list_offsets(
            dict.fromkeys(partitions, spec)))
        return {tp: r.offset for tp, r in found.items()}

    start, end = look_up(OffsetSpec.earliest()), look_up(OffsetSpec.latest())
    wanted = _wanted_offsets(partitions, committed, start, end, options, look_up)
    new: dict[tuple[str, int], int] = {}
    clamped: list[str] = []
    for tp in partitions:
        offset = min(max(wanted[tp], start[tp]), end[tp])  # as Kafka: within the log
        if offset != wanted[tp]:
            clamped.append(f"New offset ({wanted[tp]}) of {tp.topic}-{tp.partition} is "
                           f"{'lower than earliest' if offset > wanted[tp] else 'higher than latest'}"
                           f" offset; value will be set to {offset}.")
        new[tp] = offset
    for line in clamped[:CLAMP_WARNINGS]:
        click.echo(line, err=True)
    if len(clamped) > CLAMP_WARNINGS:
        click.echo(f"... and {len(clamped) - CLAMP_WARNINGS} more offsets set to their "
                   "partition's earliest or latest.", err=True)
    if options["execute"]:
        _progress(len(new), f"group '{group}': committing {len(new)} offsets...")
        admin_call(f"reset offsets of consumer group {group!r}",
                   lambda: admin.alter_consumer_group_offsets(group, new))
        _progress(len(new), f"group '{group}': done, {len(new)} offsets reset.")
    elif not options["dry_run"]:
        click.echo("WARN: No action will be performed as the --execute option is missing: "
                   "this was a dry run (add --dry-run to say so, --execute to reset).", err=True)
    print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                ((group, tp.topic, tp.partition, new[tp]) for tp in partitions))


def _wanted_offsets(partitions: Sequence[TopicPartition], committed: dict[TopicPartition, int],
                    start: dict[TopicPartition, int], end: dict[TopicPartition, int],
                    options: dict[str, Any],
                    look_up: Callable[[OffsetSpec], dict[TopicPartition, int]]
                    ) -> dict[TopicPartition, int]:
    """The offset each --to-* option asks for, before clamping."""
    from exactly.client.admin import OffsetSpec

    if options["to_earliest"]:
        return dict(start)
    if options["to_latest"]:
        return dict(end)
    if options["to_current"]:
        return {tp: committed.get(tp, end[tp]) for tp in partitions}
    if options["to_offset"] is not None:
        return dict.fromkeys(partitions, options["to_offset"])
    if options["to_datetime"] is not None:
        found = look_up(OffsetSpec.for_timestamp(parse_datetime(options["to_datetime"])))
        # No record at or after the time: the log end, as Kafka's tool does.
        return {tp: found[tp] if found[tp] >= 0 else end[tp] for tp in partitions}
    missing = [f"{tp.topic}-{tp.partition}" for tp in partitions if tp not in committed]
    if missing:
        fail(f"cannot shift the offsets of {', '.join(missing)}: the group has no committed "
             "offset there; reset them with --to-earliest, --to-latest or --to-offset first")
    return {tp: committed[tp] + options["shift_by"] for tp in partitions}


# -- delete -----------------------------------------------------------------------------------

_HINTS = {"NON_EMPTY_GROUP": "the group has active members: stop its consumers first",
          "GROUP_ID_NOT_FOUND": "no such group",
          "GROUP_SUBSCRIBED_TO_TOPIC": "a member of the group is subscribed to the topic: stop "
          "its consumers or change their subscription first"}


def _error_text(exc: Exception) -> str:
    from exactly.protocol.errors import error_name

    name = error_name(getattr(exc, "code", -1))
    return f"{name}: {_HINTS[name]}" if name in _HINTS else str(exc)


def _delete(admin: Admin, groups: Sequence[str]) -> None:
    from exactly.client import AdminError

    def call() -> dict[str, str]:
        try:
            admin.delete_consumer_groups(groups)
        except AdminError as exc:  # some groups refused: the others are deleted
            return {g: _error_text(e) for g, e in exc.errors.items()}
        return {}

    failed = admin_call("delete consumer groups", call)
    deleted = [g for g in groups if g not in failed]
    if deleted:
        click.echo("Deletion of requested consumer groups ("
                   + ", ".join(f"'{g}'" for g in deleted) + ") was successful.")
    if failed:
        click.echo("Deletion of some consumer groups failed:", err=True)
        for g, why in failed.items():
            click.echo(f"* Group '{g}' could not be deleted due to: {why}", err=True)
        raise SystemExit(1)


def _delete_offsets(admin: Admin, group: str, topics: Sequence[str]) -> None:
    from exactly.client import AdminError, KafkaError

    partitions = _scope(admin, topics)
    what = f"delete offsets of consumer group {group!r}"

    def call() -> dict[TopicPartition, str]:
        try:
            admin.delete_consumer_group_offsets(group, partitions)
        except AdminError as exc:  # refused for some partitions
            return {tp: _error_text(e) for tp, e in exc.errors.items()}
        except KafkaError as exc:  # refused for the group
            raise KafkaError(f"{what}: {_error_text(exc)}", exc.code) from None
        return {}

    failed = admin_call(what, call)
    if failed:
        click.echo(f"Request of deleting offsets of group '{group}' failed for some "
                   "partitions.", err=True)
    else:
        click.echo(f"Request succeeded for deleting offsets of group '{group}'.")
    print_table(("TOPIC", "PARTITION", "STATUS"),
                ((tp.topic, tp.partition, f"Error: {failed[tp]}" if tp in failed else "Successful")
                 for tp in partitions))
    if failed:
        raise SystemExit(1)
