"""Share groups (KIP-932): the share-partition state machine, share-group membership, share
sessions and the durable share-group state in `__share_group_state`."""

from exactly.share.config import SHARE_KEYS, ShareConfig, check_share_keys, share_config
from exactly.share.coordinator import ShareCoordinator

__all__ = ["SHARE_KEYS", "ShareConfig", "ShareCoordinator", "check_share_keys", "share_config"]
