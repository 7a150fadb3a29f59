"""The API-versions table of the broker, in one place, and the kio classes for each version."""

from __future__ import annotations

import dataclasses
from functools import cache
from types import ModuleType
from typing import Any, Literal

from kio.index import KioIndexError, load_payload_module
from kio.schema.index import api_key_map
from kio.static.constants import EntityType

from exactly.protocol import drafts


class ApiKey:
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21  # KIP-107
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33  # the legacy, non-incremental one
    ALTER_REPLICA_LOG_DIRS = 34  # KIP-113
    DESCRIBE_LOG_DIRS = 35  # KIP-113
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43  # KIP-460
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45  # KIP-455
    LIST_PARTITION_REASSIGNMENTS = 46  # KIP-455
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55  # KIP-595
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68  # KIP-848
    CONSUMER_GROUP_DESCRIBE = 69  # KIP-848
    LIST_CONFIG_RESOURCES = 74  # KIP-1142
    DESCRIBE_TOPIC_PARTITIONS = 75  # KIP-966
    SHARE_GROUP_HEARTBEAT = 76  # KIP-932
    SHARE_GROUP_DESCRIBE = 77  # KIP-932
    SHARE_FETCH = 78  # KIP-932
    SHARE_ACKNOWLEDGE = 79  # KIP-932
    DESCRIBE_SHARE_GROUP_OFFSETS = 90  # KIP-932
    ALTER_SHARE_GROUP_OFFSETS = 91  # KIP-932
    DELETE_SHARE_GROUP_OFFSETS = 92  # KIP-932
    TXN_HEARTBEAT = 1309  # KIP-1309, a draft: provisional key (exactly.protocol.drafts)
    TXN_SHARE_ACKNOWLEDGE = 1289  # KIP-1289, a draft: provisional key (exactly.protocol.drafts)


# What the broker advertises in ApiVersions: (min, max) per API key. A handler must exist for each.
SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 11),  # v11: KIP-1023's earliest pending upload (-6)
    ApiKey.METADATA: (0, 13),  # v13: a top-level error code (KIP-1102)
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 5),  # v5: KIP-1242 (drafts/api_versions_v5.py until kio has it)
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 7),  # v7: KIP-1309's session timeout (a draft)
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (1, 2),
    ApiKey.TXN_OFFSET_COMMIT: (0, 6),  # v6: KIP-1319's topic ids (drafts/txn_offset_commit_v6.py)
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),  # KIP-113, as Kafka 4.0 (no v0)
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),  # no v0, as Kafka; v5: KIP-1066's IsCordoned (never)
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # KIP-455; v1: KIP-860
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),  # KIP-455
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),  # v2: KIP-1073's fenced brokers (one, never fenced)
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),  # KIP-1142
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),  # KIP-966
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 1),  # librdkafka 2.16 sends v1; v2 (KIP-1222's renew) not yet
    ApiKey.SHARE_ACKNOWLEDGE: (1, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.TXN_HEARTBEAT: (0, 0),
    ApiKey.TXN_SHARE_ACKNOWLEDGE: (0, 0),  # KIP-1289, a draft
}


# Advertised lower than served: Kafka 4.x advertises Produce from v0 (KAFKA-18659: librdkafka
# looks for v0 to pick its message format) and closes the connection on a v0-v2 request, as
# here: a version below SUPPORTED's is answered as any unsupported one.
ADVERTISED_MIN: dict[int, int] = {ApiKey.PRODUCE: 0}


def advertised() -> dict[int, tuple[int, int]]:
    """The ApiVersions table: SUPPORTED, with ADVERTISED_MIN's lower bounds."""
    return {key: (ADVERTISED_MIN.get(key, lo), hi) for key, (lo, hi) in SUPPORTED.items()}


def api_name(api_key: int) -> str:
    return api_key_map.get(api_key) or drafts.DRAFT_API_NAMES.get(api_key, f"unknown({api_key})")


def is_supported(api_key: int, version: int) -> bool:
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]


# kio's classes first; for an API or version kio does not have, the hand-written schema of a
# draft KIP (exactly.protocol.drafts), if there is one.


@cache
def request_class(api_key: int, version: int) -> type:
    return _entity_class(api_key, version, EntityType.request)


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    try:
        return load_payload_module(api_key, version, EntityType.response)
    except KioIndexError:
        draft = drafts.payload_module(api_key, version)
        if draft is None:
            raise
        return draft


@cache
def response_class(api_key: int, version: int) -> type:
    return _entity_class(api_key, version, EntityType.response)


def _entity_class(api_key: int, version: int,
                  entity_type: Literal[EntityType.request, EntityType.response]) -> type:
    try:
        return _payload_class(load_payload_module(api_key, version, entity_type))
    except KioIndexError:
        draft = drafts.payload_class(api_key, version, entity_type)
        if draft is None:
            raise
        return draft


def _payload_class(module: ModuleType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) in (
            EntityType.request,
            EntityType.response,
        ) and value.__module__ == module.__name__:
            return value
    raise LookupError(f"no payload class in {module.__name__}")


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, /, **values: Any) -> Any:
    """Instantiate a kio entity, ignoring fields this version does not have.

    Handlers describe a response once for all versions; each version keeps the fields it knows.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)
