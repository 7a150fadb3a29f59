"""`exactly configs`: describe and alter the configs of topics, brokers and groups, shaped like
Kafka's kafka-configs.sh (the same options; its output lines).

Topics' configs are their overrides, brokers' the dynamic configs of KIP-226 (one broker's, or
the cluster-wide default with `--entity-default`/`--broker-defaults`), groups' those of KIP-848
and KIP-932 (share groups). `--describe` prints the dynamic values only, as Kafka does, and every
config with `--all`; `--alter` sends one IncrementalAlterConfigs (KIP-339) with `--add-config`'s
SETs and `--delete-config`'s DELETEs. The broker checks keys and values; its refusal is printed
and the command exits 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from exactly.cli.common import (
    admin_call,
    connection_options,
    fail,
    open_admin,
)

ENTITY_TYPES = ("topics", "brokers", "groups")

# The source of a dynamic value, per entity type: what `--describe` without --all shows.
_DYNAMIC_SOURCE = {"topics": "TOPIC_CONFIG", "brokers": "DYNAMIC_BROKER_CONFIG",
                   "groups": "GROUP_CONFIG"}
_DEFAULT_SOURCE = "DYNAMIC_DEFAULT_BROKER_CONFIG"
# Kafka's tool prints the Java client's ConfigSource names.
_JAVA_SOURCE = {"TOPIC_CONFIG": "DYNAMIC_TOPIC_CONFIG", "GROUP_CONFIG": "DYNAMIC_GROUP_CONFIG"}

_ADD_CONFIG_FORMAT = ('Invalid entity config: all configs to be added must be in the format '
                      '"key=val" or "key=[val1,val2]".')


@dataclass(frozen=True, slots=True)
class Entity:
    """What the command acts on: a topic, a broker (name None: the cluster-wide default) or a
    group."""

    type: str
    name: str | None

    @property
    def broker_id(self) -> int | None:
        return None if self.name is None else int(self.name)

    @property
    def resource_name(self) -> str:
        """The ConfigResource's name: "" for the brokers' default."""
        return "" if self.name is None else self.name

    @property
    def in_errors(self) -> str:
        """How the admin client's errors name it (so that admin_call does not say it twice)."""
        return "the brokers' cluster-wide default" if self.name is None else repr(self.name)

    @property
    def dynamic_source(self) -> str:
        return _DEFAULT_SOURCE if self.name is None else _DYNAMIC_SOURCE[self.type]


def split_outside_brackets(text: str, separator: str) -> list[str]:
    """`text` cut at each `separator` that is not inside [...], as kafka-configs.sh reads
    --add-config (k1=v1,k2=[a,b])."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's --add-config: "k1=v1,k2=[v1,v2]" -> {k1: v1, k2: "v1,v2"}. A value
    holding a comma or an '=' goes in brackets; the brackets are dropped, as Kafka drops them."""
    out: dict[str, str] = {}
    for item in split_outside_brackets(text, ","):
        pair = split_outside_brackets(item, "=")
        if len(pair) != 2 or not pair[0].strip():
            raise click.BadParameter(f"{item!r}: {_ADD_CONFIG_FORMAT}", param_hint="--add-config")
        out[pair[0].strip()] = pair[1].replace("[", "").replace("]", "").strip()
    return out


def _entity(entity_type: str | None, entity_name: str | None, entity_default: bool,
            topic: str | None, broker: str | None, group: str | None,
            broker_defaults: bool) -> tuple[str, str | None, bool]:
    """(type, name, default) from --entity-type/--entity-name/--entity-default or one of
    Kafka's shortcuts (--topic, --broker, --group, --broker-defaults)."""
    shortcuts: list[tuple[str, str | None]] = [
        (t, n) for t, n in (("topics", topic), ("brokers", broker), ("groups", group))
        if n is not None]
    if broker_defaults:
        shortcuts.append(("brokers", None))
    if shortcuts and (entity_type or entity_name is not None or entity_default):
        raise click.UsageError("give --entity-type/--entity-name or a shortcut (--topic, --broker, "
                               "--group, --broker-defaults), not both")
    if len(shortcuts) > 1:
        raise click.UsageError("give one entity: one of --topic, --broker, --group, "
                               "--broker-defaults")
    if shortcuts:
        ((kind, name),) = shortcuts
        return kind, name, name is None
    if entity_type is None:
        raise click.UsageError("give --entity-type (topics, brokers, groups) or --topic, "
                               "--broker, --group, --broker-defaults")
    if entity_default and entity_name is not None:
        raise click.UsageError("give --entity-name or --entity-default, not both")
    if entity_default and entity_type != "brokers":
        raise click.UsageError(f"--entity-default is for brokers, not {entity_type}")
    return entity_type, entity_name, entity_default


def _check_broker_id(name: str) -> None:
    if not name.strip().isdigit():
        raise click.BadParameter(f"{name!r} is not a broker id (an integer, such as 0)",
                                 param_hint="--entity-name/--broker")


def _all_entities(admin: Any, entity_type: str) -> list[Entity]:
    """Every topic or broker, for --describe without a name (as Kafka's tool lists them;
    groups are named one by one)."""
    if entity_type == "topics":
        names = admin_call("list topics", lambda: admin.list_topics(include_internal=True))
        return [Entity("topics", n) for n in names]
    cluster = admin_call("describe cluster", admin.describe_cluster)
    return [Entity("brokers", str(b.node_id)) for b in cluster.brokers]


def _describe(admin: Any, entity: Entity) -> dict[str, Any]:
    calls: dict[str, Callable[[], dict[str, Any]]] = {
        "topics": lambda: admin.describe_configs(entity.resource_name),
        "groups": lambda: admin.describe_group_configs(entity.resource_name),
        "brokers": lambda: admin.describe_broker_configs(entity.broker_id),
    }
    return admin_call(f"describe configs of {entity.in_errors}", calls[entity.type])


def _title(entity: Entity, describe_all: bool) -> str:
    """Kafka's heading of a describe."""
    if entity.name is None:
        return "Default configs for brokers in the cluster are:"
    scope = "All" if describe_all else "Dynamic"
    return f"{scope} configs for {entity.type[:-1]} {entity.name} are:"


def _line(entry: Any) -> str:
    """  k=v sensitive=false synonyms={SOURCE:k=v}, as kafka-configs.sh prints an entry. The
    broker sends no synonym list, so the entry's own source is the one synonym shown."""
    value = "null" if entry.value is None else entry.value
    source = _JAVA_SOURCE.get(entry.source, entry.source)
    return (f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} "
            f"synonyms={{{source}:{entry.name}={value}}}")


@click.command()
@click.option("--describe", "describe", is_flag=True, help="Print the entity's configs.")
@click.option("--alter", "alter", is_flag=True,
              help="Change the entity's configs (--add-config, --delete-config).")
@click.option("--entity-type", type=click.Choice(ENTITY_TYPES), default=None,
              help="What to act on: topics, brokers or groups.")
@click.option("--entity-name", default=None, metavar="NAME",
              help="The topic, the broker's id or the group. Without it, --describe lists "
              "every topic or broker.")
@click.option("--entity-default", is_flag=True,
              help="The cluster-wide default of the brokers' dynamic configs.")
@click.option("--topic", default=None, metavar="TOPIC",
              help="Short for --entity-type topics --entity-name TOPIC.")
@click.option("--broker", default=None, metavar="ID",
              help="Short for --entity-type brokers --entity-name ID.")
@click.option("--group", default=None, metavar="GROUP",
              help="Short for --entity-type groups --entity-name GROUP.")
@click.option("--broker-defaults", is_flag=True,
              help="Short for --entity-type brokers --entity-default.")
@click.option("--add-config", default=None, metavar="K1=V1,K2=[A,B]",
              help="Configs to set, comma-separated; a value with commas goes in [ ].")
@click.option("--add-config-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="A properties file of configs to set.")
@click.option("--delete-config", default=None, metavar="K1,K2",
              help="Configs to remove (back to their default), comma-separated.")
@click.option("--all", "describe_all", is_flag=True,
              help="With --describe: every config, defaults included, not only the dynamic ones.")
@connection_options
def configs(describe: bool, alter: bool, entity_type: str | None, entity_name: str | None,
            entity_default: bool, topic: str | None, broker: str | None, group: str | None,
            broker_defaults: bool, add_config: str | None, add_config_file: str | None,
            delete_config: str | None, describe_all: bool, bootstrap: str,
            command_config: str | None, timeout_ms: int) -> None:
    """Describe or alter the configs of topics, brokers and groups (as kafka-configs.sh)."""
    if describe == alter:
        raise click.UsageError("give one of --describe and --alter")
    kind, name, default = _entity(entity_type, entity_name, entity_default, topic, broker, group,
                                  broker_defaults)
    if name is not None and kind == "brokers":
        _check_broker_id(name)
    if describe:
        if add_config or add_config_file or delete_config:
            raise click.UsageError("--add-config and --delete-config go with --alter")
        if kind == "groups" and name is None:
            raise click.UsageError("give the group: --group NAME (or --entity-name NAME)")
        _run_describe(kind, name, default, describe_all, bootstrap, command_config, timeout_ms)
        return
    if describe_all:
        raise click.UsageError("--all goes with --describe")
    if name is None and not default:
        raise click.UsageError(f"--alter needs the entity: --entity-name NAME"
                               f"{' or --entity-default' if kind == 'brokers' else ''}")
    to_set = parse_add_config(add_config) if add_config else {}
    if add_config_file is not None:
        to_set.update(_read_config_file(add_config_file))
    to_delete = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    if not to_set and not to_delete:
        raise click.UsageError("--alter needs --add-config, --add-config-file or --delete-config")
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise click.UsageError(f"{', '.join(both)} both added and deleted; give each key once")
    _run_alter(Entity(kind, name), to_set, to_delete, bootstrap, command_config, timeout_ms)


def _read_config_file(path: str) -> dict[str, str]:
    from exactly.server.config import ConfigError, read_properties_file

    try:
        return {k: v for k, (v, _where) in read_properties_file(path).items()}
    except ConfigError as exc:
        fail(str(exc), 2)


def _run_describe(kind: str, name: str | None, default: bool, describe_all: bool, bootstrap: str,
                  command_config: str | None, timeout_ms: int) -> None:
    with open_admin(bootstrap, command_config, "exactly-configs", timeout_ms) as admin:
        entities = ([Entity(kind, name)] if name is not None or default
                    else _all_entities(admin, kind))
        for entity in entities:
            entries = _describe(admin, entity)
            click.echo(_title(entity, describe_all))
            for e in sorted(entries.values(), key=lambda e: e.name):
                if describe_all or e.source == entity.dynamic_source:
                    click.echo(_line(e))


def _run_alter(entity: Entity, to_set: dict[str, str], to_delete: list[str], bootstrap: str,
               command_config: str | None, timeout_ms: int) -> None:
    with open_admin(bootstrap, command_config, "exactly-configs", timeout_ms) as admin:
        if to_delete:
            # As kafka-configs.sh: deleting a key that has no dynamic value is an error.
            current = {e.name for e in _describe(admin, entity).values()
                       if e.source == entity.dynamic_source}
            missing = [k for k in to_delete if k not in current]
            if missing:
                fail(f"Invalid config(s): {','.join(missing)} (not set on "
                     f"{_what(entity)}; `exactly configs --describe` shows what is)")
        calls: dict[str, Callable[[], None]] = {
            "topics": lambda: admin.alter_topic_configs(entity.resource_name, set=to_set,
                                                        delete=to_delete),
            "groups": lambda: admin.alter_group_configs(entity.resource_name, set=to_set,
                                                        delete=to_delete),
            "brokers": lambda: admin.alter_broker_configs(entity.broker_id, set=to_set,
                                                          delete=to_delete),
        }
        admin_call(f"alter configs of {entity.in_errors}", calls[entity.type])
    if entity.name is None:
        click.echo("Completed updating default config for brokers in the cluster.")
    else:
        click.echo(f"Completed updating config for {_what(entity)}.")


def _what(entity: Entity) -> str:
    return ("the brokers' default" if entity.name is None
            else f"{entity.type[:-1]} {entity.name}")
