"""ApiVersions (v0–v4): the versions table and the finalized features."""

from __future__ import annotations

from typing import Any

from exactly.protocol.apis import SUPPORTED, ApiKey, build, response_module
from exactly.protocol.errors import ErrorCode
from exactly.server.context import RequestContext
from exactly.server.handlers.common import NO_THROTTLE

# Features this broker supports, as (min, max) levels, and the levels finalized for the cluster.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {}
FINALIZED_FEATURES: dict[str, int] = {}
FINALIZED_FEATURES_EPOCH = 0


def api_versions_response(version: int, *, error_unsupported: bool = False) -> Any:
    module = response_module(ApiKey.API_VERSIONS, version)
    return build(
        module.ApiVersionsResponse,
        error_code=ErrorCode.unsupported_version if error_unsupported else ErrorCode.none,
        api_keys=tuple(
            build(module.ApiVersion, api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(SUPPORTED.items())
        ),
        throttle_time=NO_THROTTLE,
        supported_features=tuple(
            build(module.SupportedFeatureKey, name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in SUPPORTED_FEATURES.items()
        ),
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=tuple(
            build(module.FinalizedFeatureKey, name=name, max_version_level=level,
                  min_version_level=level)
            for name, level in FINALIZED_FEATURES.items()
        ),
    )


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(ctx.api_version)


HANDLERS = {ApiKey.API_VERSIONS: handle_api_versions}
