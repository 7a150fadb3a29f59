"""What a request handler gets: the broker's services, the request header, the connection's
authentication, and a way to build its response.

A handler is `async def handle(ctx: RequestContext, request) -> response`, where `request` is the
kio entity of `ctx.api_version` and the response is the kio entity of the same version (or its
encoded bytes, from the hand-written encoders of `exactly.protocol.fast_responses`; None for a
Produce with acks=0). `exactly.protocol.requests` names each API's request type. Handlers are
registered per API key in `exactly.server.handlers.HANDLERS`.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Never, TypeAlias

from kio.static.protocol import ResponsePayload

from exactly.protocol.apis import build, response_class, response_module
from exactly.server.acl.model import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType

if TYPE_CHECKING:
    from exactly.server.auth import AuthSession
    from exactly.server.services import Services


# Each connection's id, unique within the process (network.py takes one per connection).
next_connection_id: Callable[[], int] = itertools.count(1).__next__


@dataclass(slots=True)
class RequestContext:
    services: Services
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    session: AuthSession  # the connection's listener and SASL state
    principal: str = "User:ANONYMOUS"  # set by the connection once SASL/TLS authenticates
    # The connection's id (`next_connection_id`), for what lives as long as the connection (a
    # share session, KAFKA-19015); None outside a connection.
    connection_id: int | None = None

    @property
    def authorizing(self) -> bool:
        """Is an authorizer configured? Lets a handler skip work that only a check needs."""
        return self.services.authorizer is not None

    def authorize(self, operation: Operation, resource_type: ResourceType = ResourceType.CLUSTER,
                  name: str = CLUSTER_NAME) -> bool:
        """May this request's principal do `operation` on the resource? Always, without an
        authorizer. E.g. ctx.authorize(Operation.ALTER) for a cluster-wide change."""
        authorizer = self.services.authorizer
        return authorizer is None or authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name)

    def authorized(self, operation: Operation, resource_type: ResourceType,
                   names: Iterable[str]) -> set[str]:
        """The names among `names` this principal may do `operation` on."""
        return {n for n in set(names) if self.authorize(operation, resource_type, n)}

    def authorize_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """May this principal do `operation` on at least one resource of the type?"""
        authorizer = self.services.authorizer
        return authorizer is None or authorizer.authorize_any(
            self.principal, self.client_host, operation, resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field of the resource for this principal."""
        authorizer = self.services.authorizer
        if authorizer is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS.get(resource_type, ()))
        return int(authorizer.authorized_operations(self.principal, self.client_host,
                                                    resource_type, name))

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


# The request's type depends on the API key, which a table of handlers cannot tell mypy: each
# handler declares its own (a union of kio's classes from exactly.protocol.requests), and `Never`
# here admits every handler while letting the caller pass only what it decoded, typed Any.
Handler: TypeAlias = Callable[[RequestContext, Never], Awaitable[ResponsePayload | bytes | None]]
