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

A session also ends with the connection that opened it (KAFKA-19015): the connection that sent
its epoch 0, the last one if it was re-opened (KAFKA-19950: a re-open on another connection
moves it there, and the first connection's close leaves it alone). Requests with other epochs
may come on any connection and move nothing. (Kafka 4.4 remembers only the last session opened
on a connection; here a connection that opened the sessions of several members ends them all,
as none of them could outlive it otherwise.) `connection_closed` returns the sessions it ended:
the coordinator releases what their members hold, as for epoch -1.
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
SessionKey = tuple[str, str]  # (group id, member id)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: list[SessionPartition] = field(default_factory=list)
    # The connection that opened (or last re-opened) the session; None: tied to none.
    connection_id: int | None = None

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
        self.sessions: dict[SessionKey, ShareSession] = {}
        self._owned: dict[int, set[SessionKey]] = {}  # connection id -> the sessions it owns

    def open(self, group_id: str, member_id: str, partitions: Iterable[SessionPartition],
             connection_id: int | None = None) -> ShareSession | ErrorCode:
        """A new session (epoch 0), replacing the member's older one, owned by `connection_id`."""
        key = (group_id, member_id)
        if key not in self.sessions and len(self.sessions) >= self.max_sessions:
            return ErrorCode.share_session_limit_reached
        self.close(group_id, member_id)
        session = ShareSession(group_id, member_id, connection_id=connection_id)
        session.update(partitions, ())
        self.sessions[key] = session
        if connection_id is not None:
            self._owned.setdefault(connection_id, set()).add(key)
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

    def is_open(self, session: ShareSession) -> bool:
        """Is `session` still the member's session (not closed, not replaced by a re-open)?"""
        return self.sessions.get((session.group_id, session.member_id)) is session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        key = (group_id, member_id)
        session = self.sessions.pop(key, None)
        if session is not None and session.connection_id is not None:
            owned = self._owned.get(session.connection_id)
            if owned is not None:
                owned.discard(key)
                if not owned:
                    del self._owned[session.connection_id]
        return session

    def close_group(self, group_id: str) -> None:
        for key in [k for k in self.sessions if k[0] == group_id]:
            self.close(*key)

    def connection_closed(self, connection_id: int) -> list[ShareSession]:
        """The connection is gone: the sessions it owns are closed, and returned."""
        keys = self._owned.pop(connection_id, set())
        return [self.sessions.pop(key) for key in sorted(keys)]

    def clear(self) -> None:
        """Every session ends (the broker stops)."""
        self.sessions.clear()
        self._owned.clear()
