"""Share sessions (KIP-932): what a share consumer fetches from this broker, kept between
ShareFetch requests so that each request names only what changed (Kafka's `ShareSessionCache`).

Theory of operation
-------------------

A session belongs to one member of one group. ShareSessionEpoch 0 opens it (replacing an older
one of that member), naming its partitions; each later request carries the epoch the broker
expects next (1, 2, ...; after 2^31-1 comes 1 again), adds the partitions it names and drops its
forgotten ones; -1 closes it. A wrong epoch is INVALID_SHARE_SESSION_EPOCH, a request for a
session that does not exist is SHARE_SESSION_NOT_FOUND, and opening one more session than
`group.share.max.share.sessions` is SHARE_SESSION_LIMIT_REACHED.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from exactly.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

SessionPartition = tuple[uuid.UUID, int]  # (topic id, partition)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: list[SessionPartition] = field(default_factory=list)

    def update(self, added: Iterable[SessionPartition],
               forgotten: Iterable[SessionPartition]) -> None:
        gone = set(forgotten)
        kept = [p for p in self.partitions if p not in gone]
        for p in added:
            if p not in kept and p not in gone:
                kept.append(p)
        self.partitions = kept


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str,
             partitions: Iterable[SessionPartition]) -> ShareSession | ErrorCode:
        key = (group_id, member_id)
        if key not in self.sessions and len(self.sessions) >= self.max_sessions:
            return ErrorCode.share_session_limit_reached
        session = ShareSession(group_id, member_id)
        session.update(partitions, ())
        self.sessions[key] = session
        return session

    def get(self, group_id: str, member_id: str, epoch: int) -> ShareSession | ErrorCode:
        """The session for a request with epoch > 0 (or -1), its epoch moved on."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.share_session_not_found
        if epoch == FINAL_EPOCH:
            return session
        if epoch != session.next_epoch:
            return ErrorCode.invalid_share_session_epoch
        session.next_epoch = 1 if epoch >= _MAX_EPOCH else epoch + 1
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def close_group(self, group_id: str) -> None:
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]
