"""ApiVersions (v0–v4): the versions table and the finalized features."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from exactly.protocol.apis import SUPPORTED, ApiKey, build, response_module
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import encode_response_body
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import ApiVersionsRequest

# Features this broker supports, as (min, max) levels (KIP-584). What is finalized comes from the
# configuration: `transaction.version` (KIP-890).
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {"transaction.version": (0, 2)}
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
                 for key, (lo, hi) in sorted(SUPPORTED.items()))


@functools.lru_cache(maxsize=32)
def _encoded(version: int, finalized: tuple[tuple[str, int], ...]) -> bytes:
    """The answer's body for this version and these finalized features, encoded once: it is the
    same for every connection, each of which starts with it, and building and encoding the
    versions table costs the broker about 0.2 ms."""
    return encode_response_body(api_versions_response(version, dict(finalized)))


async def handle_api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> bytes:
    finalized = ctx.services.identity.finalized_features
    return _encoded(ctx.api_version, tuple(sorted(finalized.items())))


HANDLERS: dict[int, Handler] = {ApiKey.API_VERSIONS: handle_api_versions}
