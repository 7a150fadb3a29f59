"""Message schemas of draft KIPs that kio (Kafka's released schemas) does not have yet, written by
hand in kio's style so kio's generic readers and writers encode them.

Each draft API or version lives in a module of its own that cites its KIP and the draft schema it
follows. `exactly.protocol.apis` falls back to this registry when kio has no class for an API key
and version (`payload_class`, `payload_module`, `api_name`), so the framing, the handlers'
`ctx.response`/`ctx.nested` and the client's `make_request` work for them as for any kio entity.

A draft's API key is provisional: Kafka assigns the number when the KIP is adopted. Until then
the KIP's own number is used as the key (1309 for KIP-1309's TxnHeartbeat): far above Kafka's
keys, so no released broker or client can take it for one of its own APIs.
"""

from __future__ import annotations

from types import ModuleType

from kio.static.constants import EntityType

from exactly.protocol.drafts import (
    api_versions_v5,
    init_producer_id,
    txn_heartbeat,
    txn_offset_commit_v6,
    txn_share_acknowledge,
)

# API key -> name (kio's api_key_map style), for the APIs that are drafts as a whole.
DRAFT_API_NAMES: dict[int, str] = {
    txn_heartbeat.API_KEY: "txn_heartbeat",
    txn_share_acknowledge.API_KEY: "txn_share_acknowledge",
}

# (API key, version) -> the module holding that version's request and response classes.
_MODULES: dict[tuple[int, int], ModuleType] = {
    (txn_heartbeat.API_KEY, 0): txn_heartbeat,
    (init_producer_id.API_KEY, 7): init_producer_id,
    # Not a draft: KIP-1242's ApiVersions v5, released in Kafka 4.4, which kio lacks.
    (api_versions_v5.API_KEY, 5): api_versions_v5,
    (txn_share_acknowledge.API_KEY, 0): txn_share_acknowledge,
    # Not a draft: KIP-1319's TxnOffsetCommit v6 (topic ids), released in Kafka 4.4, which kio
    # lacks.
    (txn_offset_commit_v6.API_KEY, 6): txn_offset_commit_v6,
}


def payload_module(api_key: int, version: int) -> ModuleType | None:
    """The draft module of this API version (its request, response and nested classes), or None."""
    return _MODULES.get((api_key, version))


def payload_class(api_key: int, version: int, entity_type: EntityType) -> type | None:
    """The draft request or response class of this API version, or None if there is no draft."""
    module = payload_module(api_key, version)
    if module is None:
        return None
    for value in vars(module).values():
        if (isinstance(value, type) and value.__module__ == module.__name__
                and getattr(value, "__type__", None) is entity_type
                and getattr(value, "__version__", None) == version):
            return value
    return None
