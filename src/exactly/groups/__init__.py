"""The classic consumer-group coordinator: a sans-IO state machine kept in `__consumer_offsets`."""

from exactly.groups.config import GroupConfig
from exactly.groups.coordinator import GroupCoordinator
from exactly.groups.group import GroupState, JoinMember, JoinResult, SyncResult
from exactly.groups.metadata_manager import (
    CommitResult,
    GroupDescription,
    GroupListing,
    MemberDescription,
    OffsetToCommit,
)
from exactly.groups.store import OFFSETS_TOPIC

__all__ = [
    "OFFSETS_TOPIC",
    "CommitResult",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "GroupState",
    "JoinMember",
    "JoinResult",
    "MemberDescription",
    "OffsetToCommit",
    "SyncResult",
]
