"""Request handlers, one module per API family; HANDLERS maps every advertised API key, and
`on_connection_closed` ends what the handlers keep for a connection once it is gone."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from exactly.protocol.apis import SUPPORTED
from exactly.server.context import Handler
from exactly.server.handlers import (
    acls,
    api_versions,
    configs,
    fetch,
    groups,
    list_offsets,
    log_admin,
    metadata,
    produce,
    replicas,
    sasl,
    share,
    share_admin,
    share_txn,
    topic_partitions,
    topics,
    txn,
)

if TYPE_CHECKING:
    from exactly.server.services import Services

log = logging.getLogger("exactly.server.handlers")

HANDLERS: dict[int, Handler] = {}
for _module in (api_versions, metadata, produce, fetch, list_offsets, topics, configs, groups, txn,
                acls, sasl, share, share_admin, share_txn, log_admin, replicas,
                topic_partitions):
    HANDLERS.update(_module.HANDLERS)

_missing = set(SUPPORTED) - set(HANDLERS)
assert not _missing, f"advertised APIs without a handler: {sorted(_missing)}"


def on_connection_closed(services: Services, connection_id: int) -> None:
    """A client connection is gone (network.py, once it is torn down): its share sessions end
    (KAFKA-19015). Never raises: the network's teardown goes on regardless."""
    try:
        share.connection_closed(services, connection_id)
    except Exception:
        log.exception("ending the share sessions of connection %d failed", connection_id)
