"""InitProducerId (v0–v5) for idempotent producers: a fresh producer id with epoch 0.

A producer without a transactional id gets a new id on every call, as in Kafka; transactional
ids come with the transaction coordinator in a later release.
"""

from __future__ import annotations

from typing import Any

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.context import RequestContext
from exactly.server.handlers.common import NO_THROTTLE


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.transactional_id_authorization_failed,
                            producer_id=-1, producer_epoch=-1)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        producer_id=ctx.broker.producer_ids.generate(), producer_epoch=0)


HANDLERS = {ApiKey.INIT_PRODUCER_ID: handle_init_producer_id}
