"""ApiVersions v5 (KIP-1242, in Apache Kafka 4.4's ApiVersionsRequest.json), which kio 0.6.5 does
not have yet: written here in kio's style until kio ships it.

v5 adds to the request the cluster id and node id the client means to reach (null and -1 when
it does not know them). A broker that is not that node of that cluster answers
REBOOTSTRAP_REQUIRED with no table, so that the client looks for its cluster again; one of the two
without the other is INVALID_REQUEST. The response is v4's.
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

API_KEY = 18

__all__ = ["API_KEY", "ApiVersion", "ApiVersionsRequest", "ApiVersionsResponse",
           "FinalizedFeatureKey", "SupportedFeatureKey"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersion:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    api_key: i16 = field(metadata={"kafka_type": "int16"})
    """The API index."""
    min_version: i16 = field(metadata={"kafka_type": "int16"})
    """The minimum supported version, inclusive."""
    max_version: i16 = field(metadata={"kafka_type": "int16"})
    """The maximum supported version, inclusive."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SupportedFeatureKey:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of the feature."""
    min_version: i16 = field(metadata={"kafka_type": "int16"})
    """The minimum supported version for the feature."""
    max_version: i16 = field(metadata={"kafka_type": "int16"})
    """The maximum supported version for the feature."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalizedFeatureKey:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The name of the feature."""
    max_version_level: i16 = field(metadata={"kafka_type": "int16"})
    """The cluster-wide finalized max version level for the feature."""
    min_version_level: i16 = field(metadata={"kafka_type": "int16"})
    """The cluster-wide finalized min version level for the feature."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    client_software_name: str = field(metadata={"kafka_type": "string"})
    """The name of the client."""
    client_software_version: str = field(metadata={"kafka_type": "string"})
    """The version of the client."""
    cluster_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    """The cluster id the client means to reach, or null."""
    node_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    """The node id the client means to reach, or -1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The top-level error code."""
    api_keys: tuple[ApiVersion, ...]
    """The APIs supported by the broker."""
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The time the request was throttled for, in ms, or zero."""
    supported_features: tuple[SupportedFeatureKey, ...] = field(
        metadata={"tag": 0}, default=())
    """Features supported by the broker."""
    finalized_features_epoch: i64 = field(
        metadata={"kafka_type": "int64", "tag": 1}, default=i64(-1))
    """The epoch of the finalized features, -1 if unknown."""
    finalized_features: tuple[FinalizedFeatureKey, ...] = field(
        metadata={"tag": 2}, default=())
    """The cluster-wide finalized features."""
    zk_migration_ready: bool = field(metadata={"kafka_type": "bool", "tag": 3}, default=False)
    """Set by a KRaft controller ready for a ZooKeeper migration; never here."""
