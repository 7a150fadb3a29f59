"""Admin: topics, configs, the cluster, consumer groups, records and log directories, ACLs and
SCRAM credentials, and Kafka's transaction tools (KIP-664, KIP-939), as Kafka's Admin client
offers them. `AsyncAdmin` is the asyncio client; `Admin` runs the same calls on the client's
loop thread.

One module per API family, each a class over the shared connection machinery (base.py), and
`AsyncAdmin` all of them:

- topics.py: create, delete, grow and describe topics; describe the cluster.
- configs.py: describe and alter the configs of topics, groups and brokers (KIP-226).
- groups.py: consumer groups and their offsets (KIP-848, KIP-496).
- records.py: delete records (KIP-107), describe log directories (KIP-113), list offsets.
- transactions.py: list, describe and abort transactions, describe producers, force-terminate a
  transactional id (KIP-664, KIP-939).
- security.py: ACLs and SCRAM credentials (KIP-554).

A call that fails for some of its items raises AdminError (a KafkaError carrying the first
failure's code) once the whole request is answered, with every failure in `errors`. The values
the calls take and return are the client's plain values (exactly.client.types), importable from
here as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from exactly.client.admin.configs import ConfigsAdmin
from exactly.client.admin.groups import GroupsAdmin
from exactly.client.admin.records import RecordsAdmin
from exactly.client.admin.security import SecurityAdmin
from exactly.client.admin.topics import TopicsAdmin
from exactly.client.admin.transactions import TransactionsAdmin
from exactly.client.blocking import Blocking
from exactly.client.config import ClientConfig
from exactly.client.errors import AdminError
from exactly.client.types import (
    AclBinding,
    AclBindingFilter,
    BrokerInfo,
    ClusterDescription,
    ConfigEntry,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListOffsetsResultInfo,
    LogDirDescription,
    MemberDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    PartitionInfo,
    ProducerState,
    ReplicaLogInfo,
    ScramCredentialInfo,
    ScramMechanism,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from exactly.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.protocol.structs import TopicPartition

__all__ = [
    "AclBinding", "AclBindingFilter", "AclOperation", "AclPermissionType", "Admin", "AdminError",
    "AsyncAdmin", "BrokerInfo", "ClusterDescription", "ConfigEntry", "ConsumerGroupDescription",
    "ConsumerGroupListing", "ListOffsetsResultInfo", "LogDirDescription", "MemberDescription",
    "NewTopic", "OffsetAndMetadata", "OffsetSpec", "PartitionInfo", "PatternType",
    "ProducerState", "ReplicaLogInfo", "ResourceType", "ScramCredentialInfo", "ScramMechanism",
    "TopicDescription", "TopicPartition", "TransactionDescription", "TransactionListing",
    "UserScramCredentialDeletion", "UserScramCredentialUpsertion",
]


class AsyncAdmin(TopicsAdmin, ConfigsAdmin, GroupsAdmin, RecordsAdmin, TransactionsAdmin,
                 SecurityAdmin):
    """The asyncio admin client. `AsyncAdmin(config)` with at least bootstrap.servers."""


class Admin(Blocking[AsyncAdmin]):
    """The blocking admin client: AsyncAdmin's calls, run on the client's own loop thread."""

    def __init__(self, config: ClientConfig | Mapping[str, Any]) -> None:
        self._start(AsyncAdmin(config))
        self.config = self.aio.config

    def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False) -> None:
        self._run(self.aio.create_topics(list(topics), validate_only=validate_only))

    def delete_topics(self, names: Iterable[str]) -> None:
        self._run(self.aio.delete_topics(list(names)))

    def create_partitions(self, new_totals: Mapping[str, int], *, validate_only: bool = False) -> None:
        self._run(self.aio.create_partitions(new_totals, validate_only=validate_only))

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._run(self.aio.list_topics(include_internal=include_internal))

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        return self._run(self.aio.describe_topics(list(names)))

    def describe_configs(self, topic: str) -> dict[str, ConfigEntry]:
        return self._run(self.aio.describe_configs(topic))

    def alter_topic_configs(self, topic: str, *, set: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), validate_only: bool = False) -> None:
        self._run(self.aio.alter_topic_configs(topic, set=set, delete=list(delete),
                                                       validate_only=validate_only))

    def describe_group_configs(self, group_id: str) -> dict[str, ConfigEntry]:
        return self._run(self.aio.describe_group_configs(group_id))

    def alter_group_configs(self, group_id: str, *, set: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), validate_only: bool = False) -> None:
        self._run(self.aio.alter_group_configs(group_id, set=set, delete=list(delete),
                                                       validate_only=validate_only))

    def describe_broker_configs(self, broker_id: int | None = None) -> dict[str, ConfigEntry]:
        return self._run(self.aio.describe_broker_configs(broker_id))

    def alter_broker_configs(self, broker_id: int | None = None, *,
                             set: Mapping[str, str] | None = None, delete: Iterable[str] = (),
                             validate_only: bool = False) -> None:
        self._run(self.aio.alter_broker_configs(broker_id, set=set, delete=list(delete),
                                                        validate_only=validate_only))

    def describe_cluster(self) -> ClusterDescription:
        return self._run(self.aio.describe_cluster())

    def list_transactions(self, *, states: Iterable[str] | None = None,
                          producer_ids: Iterable[int] | None = None,
                          running_longer_than_ms: int | None = None) -> list[TransactionListing]:
        return self._run(self.aio.list_transactions(
            states=None if states is None else list(states),
            producer_ids=None if producer_ids is None else list(producer_ids),
            running_longer_than_ms=running_longer_than_ms))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        return self._run(self.aio.describe_transactions(list(transactional_ids)))

    def describe_producers(self, partitions: Iterable[tuple[str, int]]
                           ) -> dict[TopicPartition, list[ProducerState]]:
        return self._run(self.aio.describe_producers(list(partitions)))

    def delete_records(self, before: Mapping[tuple[str, int], int], *, partial: bool = False
                       ) -> dict[TopicPartition, Any]:
        return self._run(self.aio.delete_records(dict(before), partial=partial))

    def describe_log_dirs(self, topics: Iterable[str] | None = None
                          ) -> dict[int, list[LogDirDescription]]:
        return self._run(self.aio.describe_log_dirs(None if topics is None else list(topics)))

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        self._run(self.aio.abort_transaction(topic, partition, producer_id, producer_epoch,
                                                     coordinator_epoch))

    def force_terminate_transaction(self, transactional_id: str) -> None:
        self._run(self.aio.force_terminate_transaction(transactional_id))

    def list_consumer_groups(self, *, states: Iterable[str] | None = None,
                             types: Iterable[str] | None = None) -> list[ConsumerGroupListing]:
        return self._run(self.aio.list_consumer_groups(states=states, types=types))

    def describe_consumer_groups(self, group_ids: Iterable[str]
                                 ) -> dict[str, ConsumerGroupDescription]:
        return self._run(self.aio.describe_consumer_groups(list(group_ids)))

    def list_consumer_group_offsets(self, group_id: str,
                                    partitions: Iterable[tuple[str, int]] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._run(self.aio.list_consumer_group_offsets(
            group_id, None if partitions is None else list(partitions)))

    def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata]
    ) -> None:
        self._run(self.aio.alter_consumer_group_offsets(group_id, offsets))

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        self._run(self.aio.delete_consumer_groups(list(group_ids)))

    def delete_consumer_group_offsets(self, group_id: str,
                                      partitions: Iterable[tuple[str, int]]) -> None:
        self._run(self.aio.delete_consumer_group_offsets(group_id, list(partitions)))

    def list_offsets(self, specs: Mapping[tuple[str, int], OffsetSpec], *,
                     isolation_level: str = "read_uncommitted"
                     ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        return self._run(self.aio.list_offsets(specs, isolation_level=isolation_level))

    def create_acls(self, acls: Iterable[AclBinding]) -> None:
        self._run(self.aio.create_acls(list(acls)))

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        return self._run(self.aio.describe_acls(acl_filter))

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        return self._run(self.aio.delete_acls(list(filters)))

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                        ) -> dict[str, list[ScramCredentialInfo]]:
        return self._run(self.aio.describe_user_scram_credentials(
            None if users is None else list(users)))

    def alter_user_scram_credentials(
            self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> None:
        self._run(self.aio.alter_user_scram_credentials(list(alterations)))

    def close(self) -> None:
        self._close(self.aio.close())
