"""Request handlers, one module per API family; HANDLERS maps every advertised API key."""

from __future__ import annotations

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

HANDLERS: dict[int, Handler] = {}
for _module in (api_versions, metadata, produce, fetch, list_offsets, topics, configs, groups, txn,
                acls, sasl, share, share_admin, share_txn, log_admin, replicas,
                topic_partitions):
    HANDLERS.update(_module.HANDLERS)

_missing = set(SUPPORTED) - set(HANDLERS)
assert not _missing, f"advertised APIs without a handler: {sorted(_missing)}"
