"""The admin client's configs: describe and incrementally alter (IncrementalAlterConfigs) the
configs of a topic, a group (resource type GROUP, KIP-848/KIP-932) and a broker, or the brokers'
cluster-wide dynamic default (KIP-226). A broker's own configs are asked of that broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exactly.client.admin.base import AdminBase, item_error, raise_failures
from exactly.client.cluster import make_request, request_module
from exactly.client.types import ConfigEntry
from exactly.protocol.apis import ApiKey, build

_TOPIC_RESOURCE, _GROUP_RESOURCE = 2, 32  # ConfigResource types
_BROKER_RESOURCE = 4  # a broker's id, or "" for the cluster-wide default (KIP-226)
_SET, _DELETE = 0, 1
_CONFIG_SOURCES = {1: "TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                   4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
                   8: "GROUP_CONFIG"}


def _resource_text(name: str) -> str:
    """A config resource's name in an error; "" is the brokers' cluster-wide default."""
    return repr(name) if name else "the brokers' cluster-wide default"


class ConfigsAdmin(AdminBase):
    """Configs of topics, groups and brokers."""

    async def describe_configs(self, topic: str) -> dict[str, ConfigEntry]:
        return await self._describe_configs(_TOPIC_RESOURCE, topic)

    async def describe_group_configs(self, group_id: str) -> dict[str, ConfigEntry]:
        """The group's configs (resource type GROUP, KIP-848/KIP-932), e.g. share groups'
        `share.auto.offset.reset`."""
        return await self._describe_configs(_GROUP_RESOURCE, group_id)

    async def _describe_configs(self, resource_type: int, name: str,
                                node: int | None = None) -> dict[str, ConfigEntry]:
        """`node`: the broker to ask (a broker's own configs are its to tell); None for any."""
        conn = await (self.cluster.any_connection() if node is None
                      else self.cluster.connection(node))
        module = request_module(conn, ApiKey.DESCRIBE_CONFIGS)
        resource = build(module.DescribeConfigsResource, resource_type=resource_type,
                         resource_name=name, configuration_keys=None)
        response = await conn.send(make_request(conn, ApiKey.DESCRIBE_CONFIGS, resources=(resource,),
                                                include_synonyms=False, include_documentation=False))
        (result,) = response.results
        if (e := item_error(f"describe configs of {_resource_text(name)}", result.error_code,
                             result.error_message)) is not None:
            raise_failures({name: e})
        return {c.name: ConfigEntry(c.name, c.value, _CONFIG_SOURCES.get(c.config_source, "UNKNOWN"),
                                    c.read_only, c.config_source == 5, c.is_sensitive)
                for c in result.configs}

    async def alter_topic_configs(self, topic: str, *, set: Mapping[str, str] | None = None,
                                  delete: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: set some keys, return others to their defaults."""
        await self._alter_configs(_TOPIC_RESOURCE, topic, set, delete, validate_only)

    async def alter_group_configs(self, group_id: str, *, set: Mapping[str, str] | None = None,
                                  delete: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs of a group (resource type GROUP), e.g.
        set={"share.auto.offset.reset": "earliest"} for a share group."""
        await self._alter_configs(_GROUP_RESOURCE, group_id, set, delete, validate_only)

    async def describe_broker_configs(self, broker_id: int | None = None) -> dict[str, ConfigEntry]:
        """A broker's configs, each with its source (dynamic, static, default), asked of that
        broker; with `broker_id` None, the cluster-wide dynamic defaults (KIP-226)."""
        if broker_id is None:
            return await self._describe_configs(_BROKER_RESOURCE, "")
        return await self._describe_configs(_BROKER_RESOURCE, str(broker_id), broker_id)

    async def alter_broker_configs(self, broker_id: int | None = None, *,
                                   set: Mapping[str, str] | None = None,
                                   delete: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs of a broker's dynamic configs (KIP-226), or of the
        cluster-wide default with `broker_id` None. The broker refuses keys it cannot change
        at run time."""
        if broker_id is None:
            await self._alter_configs(_BROKER_RESOURCE, "", set, delete, validate_only)
        else:
            await self._alter_configs(_BROKER_RESOURCE, str(broker_id), set, delete,
                                      validate_only, broker_id)

    async def _alter_configs(self, resource_type: int, name: str, set: Mapping[str, str] | None,
                             delete: Iterable[str], validate_only: bool,
                             node: int | None = None) -> None:
        conn = await (self.cluster.any_connection() if node is None
                      else self.cluster.connection(node))
        module = request_module(conn, ApiKey.INCREMENTAL_ALTER_CONFIGS)
        changes = [build(module.AlterableConfig, name=k, config_operation=_SET, value=str(v))
                   for k, v in (set or {}).items()]
        changes += [build(module.AlterableConfig, name=k, config_operation=_DELETE, value=None)
                    for k in delete]
        resource = build(module.AlterConfigsResource, resource_type=resource_type,
                         resource_name=name, configs=tuple(changes))
        response = await conn.send(make_request(conn, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                                resources=(resource,), validate_only=validate_only))
        (result,) = response.responses
        if (e := item_error(f"alter configs of {_resource_text(name)}", result.error_code,
                             result.error_message)) is not None:
            raise_failures({name: e})
