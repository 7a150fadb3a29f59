"""The admin client's consumer groups, as Kafka's Admin shapes them: list (ListGroups),
describe (DescribeGroups for classic groups, ConsumerGroupDescribe for KIP-848 ones), their
committed offsets (OffsetFetch), alter them as an admin commit that only an empty group takes,
and delete groups and offsets (KIP-496). Each request goes to the group's coordinator, found
again while it moves or loads (`AdminBase._group_request`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from exactly.client.admin.base import AdminBase, item_error, raise_failures
from exactly.client.assignors import ProtocolError, decode_assignment
from exactly.client.cluster import COORDINATOR_GROUP, make_request
from exactly.client.connection import BrokerConnection
from exactly.client.errors import KafkaConnectionError, KafkaError, UnsupportedVersionError
from exactly.client.group import CommitFailedError, GroupCoordinatorClient
from exactly.client.types import (
    BrokerInfo,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    MemberDescription,
    OffsetAndMetadata,
    by_topic,
)
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition


def _assigned(assignment: Any) -> list[TopicPartition]:
    """A ConsumerGroupDescribe assignment as sorted (topic, partition)s."""
    return sorted(TopicPartition(t.topic_name, p) for t in assignment.topic_partitions
                  for p in t.partitions)


def _first_result_error(response: Any) -> int:
    return int(response.results[0].error_code)


class GroupsAdmin(AdminBase):
    """Consumer groups (as Kafka's Admin: listConsumerGroups, describeConsumerGroups, ...)."""

    async def list_consumer_groups(self, *, states: Iterable[str] | None = None,
                                   types: Iterable[str] | None = None) -> list[ConsumerGroupListing]:
        """The consumer groups of every broker (ListGroups): classic ones and KIP-848 "consumer"
        ones; share groups are not consumer groups. `states` (Stable, Empty, ...) needs
        ListGroups v4+, `types` (classic, consumer) v5+ (KIP-848); both match any case."""
        states, types = list(states or ()), list(types or ())
        out: list[ConsumerGroupListing] = []
        for conn in await self._brokers():
            version = conn.version(ApiKey.LIST_GROUPS)
            for asked, needs in ((states, 4), (types, 5)):
                if asked and version < needs:
                    raise UnsupportedVersionError(
                        f"broker {conn.host}:{conn.port} speaks ListGroups v{version}; filtering "
                        f"by {'state' if asked is states else 'type'} needs v{needs}: list "
                        "without the filter")
            response = await conn.send(make_request(conn, ApiKey.LIST_GROUPS,
                                                    states_filter=tuple(states),
                                                    types_filter=tuple(types)))
            if (e := item_error(f"list consumer groups on broker {conn.node_id}",
                                 response.error_code)):
                raise e
            out.extend(ConsumerGroupListing(g.group_id, getattr(g, "group_state", ""),
                                            getattr(g, "group_type", "") or "classic",
                                            g.protocol_type)
                       for g in response.groups if g.protocol_type in ("consumer", ""))
        return sorted(out, key=lambda g: g.group_id)

    async def describe_consumer_groups(self, group_ids: Iterable[str]
                                       ) -> dict[str, ConsumerGroupDescription]:
        """Each group as its coordinator describes it: ConsumerGroupDescribe for a KIP-848
        group, DescribeGroups for a classic one, as Kafka's Admin does. A group that does not
        exist fails with GROUP_ID_NOT_FOUND."""
        out: dict[str, ConsumerGroupDescription] = {}
        failures: dict[str, KafkaError] = {}
        for group_id in dict.fromkeys(group_ids):
            try:
                out[group_id] = await self._describe_consumer_group(group_id)
            except KafkaError as exc:
                if isinstance(exc, KafkaConnectionError):
                    raise
                failures[group_id] = exc
        raise_failures(failures)
        return out

    async def _describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        what = f"describe consumer group {group_id!r}"
        conn = await self.cluster.coordinator(COORDINATOR_GROUP, group_id)
        if conn.supports(ApiKey.CONSUMER_GROUP_DESCRIBE):
            conn, response = await self._group_request(
                group_id, what, ApiKey.CONSUMER_GROUP_DESCRIBE, lambda r: r.groups[0].error_code,
                group_ids=(group_id,), include_authorized_operations=False)
            (g,) = response.groups
            if g.error_code == ErrorCode.none:
                return ConsumerGroupDescription(
                    group_id, "consumer", g.group_state, "consumer", g.assignor_name,
                    [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                       _assigned(m.assignment), _assigned(m.target_assignment),
                                       m.member_epoch) for m in g.members],
                    _answered_by(conn), g.group_epoch, g.assignment_epoch)
            if g.error_code != ErrorCode.group_id_not_found:  # not found: maybe a classic one
                raise item_error(what, g.error_code, g.error_message) or KafkaError(what)
        conn, response = await self._group_request(
            group_id, what, ApiKey.DESCRIBE_GROUPS, lambda r: r.groups[0].error_code,
            groups=(group_id,), include_authorized_operations=False)
        (d,) = response.groups
        if (e := item_error(what, d.error_code, getattr(d, "error_message", None))):
            raise e
        if d.group_state == "Dead":
            raise KafkaError(f"consumer group {group_id!r} does not exist",
                             ErrorCode.group_id_not_found)
        if d.protocol_type not in ("consumer", ""):
            raise KafkaError(f"{what}: it is a group of protocol type {d.protocol_type!r}, not "
                             "a consumer group", ErrorCode.group_id_not_found)
        members = []
        for m in d.members:
            try:
                assigned = decode_assignment(m.member_assignment).partitions
            except ProtocolError:  # a client's own bytes: shown as no assignment
                assigned = {}
            members.append(MemberDescription(
                m.member_id, getattr(m, "group_instance_id", None), m.client_id, m.client_host,
                sorted(TopicPartition(t, p) for t, ps in assigned.items() for p in ps)))
        return ConsumerGroupDescription(group_id, "classic", d.group_state, d.protocol_type,
                                        d.protocol_data, members,
                                        _answered_by(conn))

    async def list_consumer_group_offsets(
            self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (OffsetFetch): all of them, or those of `partitions`;
        a partition with no committed offset is left out."""
        what = f"list offsets of consumer group {group_id!r}"
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        if wanted == []:
            return {}

        def topics(module: Any) -> dict[str, Any]:
            return {"topics": None if wanted is None else tuple(
                build(module.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                for t, ps in by_topic(wanted).items())}

        _conn, response = await self._group_request(
            group_id, what, ApiKey.OFFSET_FETCH, lambda r: getattr(r, "error_code", 0), topics,
            group_id=group_id, require_stable=False)
        if (e := item_error(what, getattr(response, "error_code", 0))):
            raise e
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        failures: dict[TopicPartition, KafkaError] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if (e := item_error(f"{what} on {tp.topic}-{tp.partition}", p.error_code)):
                    failures[tp] = e
                elif p.committed_offset >= 0:
                    epoch = getattr(p, "committed_leader_epoch", -1)
                    out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata,
                                                epoch if epoch >= 0 else None)
        raise_failures(failures)
        return out

    async def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata]
    ) -> None:
        """Commit `offsets` for the group as Kafka's Admin does (OffsetCommit with generation
        -1 and no member id), which the coordinator accepts only while the group has no
        members: stop its consumers first."""
        committed = {TopicPartition(*tp): o.offset if isinstance(o, OffsetAndMetadata) else int(o)
                     for tp, o in offsets.items()}
        if not committed:
            return
        coordinator = GroupCoordinatorClient(self.cluster, self.config, group_id)
        try:
            await coordinator.commit(committed)
        except CommitFailedError as exc:
            raise KafkaError(
                f"alter offsets of consumer group {group_id!r}: {exc.name}: the group has "
                "active members, and offsets can only be altered while it has none; stop its "
                "consumers and try again", exc.code) from None
        finally:
            await coordinator.close()

    async def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """DeleteGroups: each group must be empty (NON_EMPTY_GROUP otherwise); its committed
        offsets go with it."""
        failures: dict[str, KafkaError] = {}
        for group_id in dict.fromkeys(group_ids):
            what = f"delete consumer group {group_id!r}"
            _conn, response = await self._group_request(
                group_id, what, ApiKey.DELETE_GROUPS, _first_result_error,
                groups_names=(group_id,))
            if (e := item_error(what, _first_result_error(response))):
                failures[group_id] = e
        raise_failures(failures)

    async def delete_consumer_group_offsets(self, group_id: str,
                                            partitions: Iterable[tuple[str, int]]) -> None:
        """OffsetDelete (KIP-496): forget the group's committed offsets of `partitions`. Refused
        per partition (GROUP_SUBSCRIBED_TO_TOPIC) while a member is subscribed to its topic."""
        what = f"delete offsets of consumer group {group_id!r}"
        wanted = list(dict.fromkeys(partitions))

        def topics(module: Any) -> dict[str, Any]:
            return {"topics": tuple(
                build(module.OffsetDeleteRequestTopic, name=t, partitions=tuple(
                    build(module.OffsetDeleteRequestPartition, partition_index=p) for p in ps))
                for t, ps in by_topic(wanted).items())}

        _conn, response = await self._group_request(
            group_id, what, ApiKey.OFFSET_DELETE, lambda r: r.error_code, topics,
            group_id=group_id)
        if (e := item_error(what, response.error_code)):
            raise e
        raise_failures({TopicPartition(t.name, p.partition_index): e
                         for t in response.topics for p in t.partitions
                         if (e := item_error(f"{what} on {t.name}-{p.partition_index}",
                                              p.error_code))})


def _answered_by(conn: BrokerConnection) -> BrokerInfo:
    """The broker a connection goes to (node id -1 when it is not known: a bootstrap one)."""
    return BrokerInfo(-1 if conn.node_id is None else conn.node_id, conn.host, conn.port)
