"""Helpers that drive the sans-IO coordinator with explicit time (imported by the tests)."""

from __future__ import annotations

from exactly.groups import GroupCoordinator, JoinResult, SyncResult
from exactly.protocol.errors import ErrorCode

T0 = 1_700_000_000_000
SESSION = 10_000
REBALANCE = 30_000
RANGE = [("range", b"range-meta")]


# -- driving the coordinator ---------------------------------------------------------------


def join(coord: GroupCoordinator, group: str, member_id: str = "", *, now: int,
         protocols: list[tuple[str, bytes]] | None = None, protocol_type: str = "consumer",
         session: int = SESSION, rebalance: int = REBALANCE, instance: str | None = None,
         client_id: str = "client", require_known: bool = True) -> list[JoinResult]:
    """Send a JoinGroup; the returned list receives the answer, now or later."""
    out: list[JoinResult] = []
    coord.join_group(group_id=group, member_id=member_id, group_instance_id=instance,
                     client_id=client_id, client_host="/127.0.0.1",
                     session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                     protocol_type=protocol_type, protocols=RANGE if protocols is None else protocols,
                     require_known_member_id=require_known, now_ms=now, respond=out.append)
    return out


def new_member(coord: GroupCoordinator, group: str, *, now: int, **kw: object) -> tuple[str, list[JoinResult]]:
    """The v4+ two-step join: MEMBER_ID_REQUIRED, then join again with the given id."""
    first = join(coord, group, now=now, **kw)  # type: ignore[arg-type]
    assert len(first) == 1 and first[0].error is ErrorCode.member_id_required, first
    member_id = first[0].member_id
    return member_id, join(coord, group, member_id, now=now, **kw)  # type: ignore[arg-type]


def sync(coord: GroupCoordinator, group: str, member_id: str, generation: int, *, now: int,
         assignments: dict[str, bytes] | None = None, instance: str | None = None,
         protocol_type: str | None = None, protocol_name: str | None = None) -> list[SyncResult]:
    out: list[SyncResult] = []
    coord.sync_group(group_id=group, generation_id=generation, member_id=member_id,
                     group_instance_id=instance, protocol_type=protocol_type,
                     protocol_name=protocol_name, assignments=assignments or {}, now_ms=now,
                     respond=out.append)
    return out


def heartbeat(coord: GroupCoordinator, group: str, member_id: str, generation: int, *,
              now: int, instance: str | None = None) -> ErrorCode:  
    return coord.heartbeat(group_id=group, member_id=member_id, group_instance_id=instance,
                           generation_id=generation, now_ms=now)
