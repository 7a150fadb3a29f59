"""ApiVersions (v0–v5): the versions table and the finalized features."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from exactly.protocol.apis import ApiKey, advertised, build, response_module
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import encode_response_body
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import ApiVersionsRequest

# Features this broker supports, as (min, max) levels (KIP-584), and what it finalizes (broker.py):
# `transaction.version` from the configuration (KIP-890); `group.version` 1, the consumer group
# protocol of KIP-848; `share.version` 1, the share groups of KIP-932 (ShareFetch v1: level 2 is
# Kafka 4.4's). Kafka's metadata.version and kraft.version describe its KRaft metadata log and
# quorum, eligible.leader.replicas.version its replication (KIP-966), streams.version the streams
# groups of KIP-1071: a single node without KRaft or streams groups has none of them.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "transaction.version": (0, 2), "group.version": (0, 1), "share.version": (0, 1)}
FIXED_FEATURES: dict[str, int] = {"group.version": 1, "share.version": 1}
FINALIZED_FEATURES_EPOCH = 1


def api_versions_response(version: int, finalized: Mapping[str, int], *,
                          error_unsupported: bool = False) -> ResponsePayload:
    module = response_module(ApiKey.API_VERSIONS, version)
    if not hasattr(module, "SupportedFeatureKey"):  # v0–v2 carry no features
        return build(module.ApiVersionsResponse,
                     error_code=ErrorCode.unsupported_version if error_unsupported else ErrorCode.none,
                     api_keys=_api_keys(module), throttle_time=NO_THROTTLE)
    return build(
        module.ApiVersionsResponse,
        error_code=ErrorCode.unsupported_version if error_unsupported else ErrorCode.none,
        api_keys=_api_keys(module),
        throttle_time=NO_THROTTLE,
        supported_features=tuple(
            build(module.SupportedFeatureKey, name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in SUPPORTED_FEATURES.items()
            # v3 clients fail on a minimum of 0 (KAFKA-17011): Kafka leaves those out below v4
            if lo > 0 or version >= 4
        ),
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=tuple(
            build(module.FinalizedFeatureKey, name=name, max_version_level=level,
                  min_version_level=level)
            for name, level in finalized.items()
            if level > 0  # Kafka leaves level-0 features out of the finalized set
        ),
    )


def _api_keys(module: Any) -> tuple[Any, ...]:
    return tuple(build(module.ApiVersion, api_key=key, min_version=lo, max_version=hi)
                 for key, (lo, hi) in sorted(advertised().items()))


@functools.lru_cache(maxsize=32)
def _encoded(version: int, finalized: tuple[tuple[str, int], ...]) -> bytes:
    """The answer's body for this version and these finalized features, encoded once: it is the
    same for every connection, each of which starts with it, and building and encoding the
    versions table costs the broker about 0.2 ms."""
    return encode_response_body(api_versions_response(version, dict(finalized)))


def _refusal(version: int, error: ErrorCode) -> ResponsePayload:
    """An error answer, without the table or features, as Kafka sends it."""
    module = response_module(ApiKey.API_VERSIONS, version)
    return build(module.ApiVersionsResponse, error_code=error, api_keys=(),
                 throttle_time=NO_THROTTLE)


# KIP-511: what a client may call itself and its version; Kafka answers INVALID_REQUEST (and no
# table) to a request that names itself otherwise.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


async def handle_api_versions(ctx: RequestContext,
                              request: ApiVersionsRequest) -> bytes | ResponsePayload:
    if ctx.api_version >= 3 and not (
            _SOFTWARE.fullmatch(getattr(request, "client_software_name", ""))
            and _SOFTWARE.fullmatch(getattr(request, "client_software_version", ""))):
        return _refusal(ctx.api_version, ErrorCode.invalid_request)
    if ctx.api_version >= 5:
        # KIP-1242: the node the client means to reach, both or neither; another node, or a
        # node of another cluster, sends the client back to its bootstrap servers.
        cluster_id = getattr(request, "cluster_id", None)
        node_id = getattr(request, "node_id", -1)
        if (cluster_id is None) != (node_id == -1):
            return _refusal(ctx.api_version, ErrorCode.invalid_request)
        identity = ctx.services.identity
        if cluster_id is not None and (cluster_id, node_id) != (identity.cluster_id,
                                                               identity.node_id):
            return _refusal(ctx.api_version, ErrorCode.rebootstrap_required)
    finalized = ctx.services.identity.finalized_features
    return _encoded(ctx.api_version, tuple(sorted(finalized.items())))


HANDLERS: dict[int, Handler] = {ApiKey.API_VERSIONS: handle_api_versions}
