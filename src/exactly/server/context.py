"""What a request handler gets: the broker, the request header, and a way to build its response.

A handler is `async def handle(ctx: RequestContext, request) -> response`, where `request` is the
kio entity of `ctx.api_version` and the response is the kio entity of the same version. Handlers
are registered per API key in `exactly.server.handlers.HANDLERS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from exactly.protocol.apis import build, response_class, response_module

if TYPE_CHECKING:
    from exactly.server.broker import Broker


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str

    @property
    def response_class(self) -> type:
        return response_class(self.api_key, self.api_version)

    @property
    def response_module(self) -> ModuleType:
        return response_module(self.api_key, self.api_version)

    def response(self, **fields: Any) -> Any:
        """The response entity of this version; fields the version lacks are dropped."""
        return build(self.response_class, **fields)

    def nested(self, entity: str, /, **fields: Any) -> Any:
        """A nested entity of this version's response, e.g. ctx.nested("MetadataResponseTopic", ...)."""
        return build(getattr(self.response_module, entity), **fields)


Handler = Callable[[RequestContext, Any], Awaitable[Any]]
