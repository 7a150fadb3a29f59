"""KIP-939's second producer id/epoch pair: the identity rules of a kept transaction.

InitProducerId with KeepPreparedTxn on an ongoing transaction leaves the transaction with its own
ProducerId/ProducerEpoch (its data was written with them; its markers go out with them, epoch +
1) and gives the client a newer identity, stored as NextProducerId/NextProducerEpoch. Every such
InitProducerId moves the client's identity on, so each earlier instance is fenced (the seed's
split-brain example); commit and abort come with the newest one. These are the rules of the
seed's "Persisted Data Format Changes" examples; the coordinator applies them.
"""

from __future__ import annotations

from collections.abc import Callable

from exactly.txn.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TxnMetadata,
    is_epoch_exhausted,
)


def keep_identity(meta: TxnMetadata, generate: Callable[[], int]) -> tuple[int, int]:
    """The client's next identity for InitProducerId(KeepPreparedTxn) on an ongoing `meta`."""
    if meta.is_kept:
        # Only commit/abort is ever sent with this identity, never data: it may reach
        # Short.MaxValue (the seed's example); past that the id rotates.
        pid, epoch = meta.next_producer_id, meta.next_producer_epoch
        rotate = epoch >= MAX_EPOCH
    else:
        # The transaction's own id: Short.MaxValue is kept for its markers.
        pid, epoch = meta.producer_id, meta.producer_epoch
        rotate = is_epoch_exhausted(epoch)
    return (generate(), 0) if rotate else (pid, epoch + 1)


def end_kept(new: TxnMetadata, bump_epoch: bool, generate: Callable[[], int]) -> None:
    """EndTxn of a kept transaction, sent with the client's NextProducerId/NextProducerEpoch;
    `new` becomes the PrepareX version (the caller transitions it).

    The markers go out with the kept transaction's id and epoch + 1. The client goes on with its
    own identity + 1 (transaction version 2: `bump_epoch`) or as it is (version 1), with a new id
    when its epoch is spent. PrevProducerId is the client's id where it differs from ProducerId,
    so that a retry of this EndTxn is recognised."""
    client_id, client_epoch = new.next_producer_id, new.next_producer_epoch
    # The markers' epoch: the kept transaction's + 1. It was begun at Short.MaxValue - 1 at most,
    # except by a version-1 client that kept the Short.MaxValue of an earlier KeepPreparedTxn (its
    # EndTxn answer carries no identity, so it cannot be rotated): those markers carry
    # Short.MaxValue again, which a partition takes, rather than an epoch no int16 holds.
    new.producer_epoch = min(new.producer_epoch + 1, MAX_EPOCH)
    if bump_epoch:
        if is_epoch_exhausted(client_epoch):
            new.next_producer_id, new.next_producer_epoch = generate(), 0
        else:
            new.next_producer_epoch = client_epoch + 1
        new.last_producer_id, new.last_producer_epoch = client_id, client_epoch
        new.client_transaction_version = 2
    else:
        new.last_producer_id, new.last_producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        new.client_transaction_version = 0
    new.prev_producer_id = client_id if client_id != new.producer_id else NO_PRODUCER_ID
