"""The share coordinator without a network: membership and the simple assignor, the records
of __share_group_state in Kafka's layout, snapshots every N updates, and the replay after a
restart (time as a number, a real log on disk)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from exactly.log import LogManager
from exactly.log.config import LogConfig
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import iter_keys_values
from exactly.share.codec import (
    SNAPSHOT_KEY,
    UPDATE_KEY,
    ShareSnapshot,
    ShareUpdate,
    StateKey,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_snapshot,
    encode_state_key,
    encode_update,
)
from exactly.share.config import ShareConfig
from exactly.share.coordinator import ShareCoordinator
from exactly.share.group import simple_assignment
from exactly.share.partition import AckBatch, LogBatch, RecordState, StateBatch
from exactly.share.state_store import SHARE_STATE_TOPIC

T0 = 1_000_000
TID = uuid.UUID(int=7)
CONFIG = ShareConfig(state_topic_num_partitions=3, updates_per_snapshot=3,
                     session_timeout_ms=1000, min_session_timeout_ms=1000,
                     record_lock_duration_ms=500, min_record_lock_duration_ms=100)


class Env:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.logs = LogManager(path, LogConfig(flush_policy="os"))
        self.logs.create_topic("q", 2)
        self.coordinator = ShareCoordinator(self.logs, CONFIG, now_ms=T0)

    def restart(self) -> ShareCoordinator:
        self.logs.close()
        self.logs = LogManager(self.path, LogConfig(flush_policy="os"))
        self.coordinator = ShareCoordinator(self.logs, CONFIG, now_ms=T0)
        return self.coordinator

    def state_records(self) -> list[tuple[int, bytes | None]]:
        """(key type, value) of every record of __share_group_state, in order per partition."""
        out = []
        for partition in range(CONFIG.state_topic_num_partitions):
            plog = self.logs.get_log(SHARE_STATE_TOPIC, partition)
            from exactly.protocol.records import iter_batches
            for batch in iter_batches(plog.read(0, 1 << 20)):
                for _, key, value in iter_keys_values(batch):
                    assert key is not None
                    decoded = decode_key(key)
                    out.append((decoded.kind if isinstance(decoded, StateKey) else 100, value))
        return out


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data")
    yield e
    e.logs.close()


def test_snapshot_and_update_values_round_trip_in_kafkas_layout() -> None:
    key = StateKey(UPDATE_KEY, "g", TID, 3)
    raw = encode_state_key(key)
    # INT16 key version 1, STRING group id, UUID, INT32 partition
    assert raw == b"\x00\x01" + b"\x00\x01g" + TID.bytes + b"\x00\x00\x00\x03"
    assert decode_key(raw) == key
    batches = (StateBatch(5, 9, RecordState.ACKNOWLEDGED, 1),
               StateBatch(10, 10, RecordState.AVAILABLE, 3))
    snap = ShareSnapshot(2, 1, 0, 5, T0, T0 + 1, batches)
    assert decode_snapshot(encode_snapshot(snap)) == snap
    update = ShareUpdate(2, 0, -1, batches)
    assert decode_update(encode_update(update)) == update
    assert encode_update(update)[:2] == b"\x00\x00"  # value version 0


def test_simple_assignor_shares_partitions_when_members_outnumber_them() -> None:
    def lookup(topic: str) -> tuple[uuid.UUID, int] | None:
        return {"two": (TID, 2)}.get(topic)
    three = simple_assignment({"a": ("two",), "b": ("two",), "c": ("two",)}, lookup)
    assert three == {"a": {TID: (0,)}, "b": {TID: (1,)}, "c": {TID: (0,)}}
    one = simple_assignment({"a": ("two", "missing")}, lookup)
    assert one == {"a": {TID: (0, 1)}}


def test_membership_epochs_leave_and_session_timeout(env: Env) -> None:
    c = env.coordinator
    tid = env.logs.topic("q").topic_id  # type: ignore[union-attr]

    def hb(member: str, epoch: int, now: int, topics: tuple[str, ...] | None = ("q",)):  # type: ignore[no-untyped-def]
        return c.heartbeat(group_id="g", member_id=member, member_epoch=epoch,
                           subscribed=topics, rack_id=None, client_id="c", client_host="h",
                           now_ms=now)[0]
    # As Kafka 4.4: a new group is at epoch 1, the first join takes it to 2.
    a = hb("a", 0, T0)
    assert (a.error, a.member_epoch, a.assignment) == (ErrorCode.none, 2, {tid: (0, 1)})
    b = hb("b", 0, T0)
    assert b.member_epoch == 3 and b.assignment == {tid: (1,)}
    # a's next heartbeat carries its epoch (2) and moves it to the group epoch
    a = hb("a", 2, T0 + 100, None)
    assert a.member_epoch == 3 and a.assignment == {tid: (0,)}
    assert hb("a", 2, T0 + 100, None).error is ErrorCode.fenced_member_epoch
    # a member that holds records and misses its session timeout is removed; records released
    sp, _ = c.share_partition("g", tid, 0, env.logs.get_log("q", 0), T0)
    sp.acquire("b", [LogBatch(0, 0)], max_records=1, now_ms=T0)
    hb("a", 3, T0 + 900, None)
    c.tick(T0 + 1001)
    assert set(c.groups["g"].members) == {"a"}
    assert sp.acquired_by("b") == [] and sp.records[0].state is RecordState.AVAILABLE
    a = hb("a", 3, T0 + 1100, None)  # the member learns the new epoch and assignment
    assert (a.member_epoch, a.assignment) == (4, {tid: (0, 1)})
    assert hb("a", -1, T0 + 1200).member_epoch == -1
    assert c.groups["g"].members == {}


def test_state_written_as_updates_and_snapshots_and_replayed(env: Env) -> None:
    c = env.coordinator
    tid = env.logs.topic("q").topic_id  # type: ignore[union-attr]
    plog = env.logs.get_log("q", 0)
    sp, init = c.share_partition("g", tid, 0, plog, T0)
    assert init is not None and sp.start_offset == 0  # latest: the (empty) log's end
    sp.acquire("m", [LogBatch(0, 9)], max_records=10, now_ms=T0)
    acks = [(0, 1, 1), (3, 3, 3), (2, 2, 2), (5, 6, 1)]  # accept, reject, release, accept
    for first, last, kind in acks:
        code, _ = c.acknowledge("g", "m", tid, 0, [AckBatch(first, last, (kind,))], T0)
        assert code is ErrorCode.none
    # a snapshot at initialization, then updates; the third update is a snapshot instead
    kinds = [k for k, _ in env.state_records() if k != 100]
    assert kinds == [SNAPSHOT_KEY, UPDATE_KEY, UPDATE_KEY, SNAPSHOT_KEY, UPDATE_KEY]
    # 4 and 7-9 stay acquired (never written): after a restart they are available again
    c = env.restart()
    sp, init = c.share_partition("g", tid, 0, env.logs.get_log("q", 0), T0)
    assert init is None
    assert sp.start_offset == 2
    assert [(o, sp.records[o].state, sp.records[o].delivery_count) for o in sorted(sp.records)] \
        == [(2, RecordState.AVAILABLE, 1), (3, RecordState.ARCHIVED, 1),
            (4, RecordState.AVAILABLE, 0), (5, RecordState.ACKNOWLEDGED, 1),
            (6, RecordState.ACKNOWLEDGED, 1)]
    got = sp.acquire("n", [LogBatch(0, 9)], max_records=10, now_ms=T0)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [
        (2, 2, 2), (4, 4, 1), (7, 9, 1)]


def test_deleted_group_leaves_nothing_after_restart(env: Env) -> None:
    c = env.coordinator
    tid = env.logs.topic("q").topic_id  # type: ignore[union-attr]
    c.alter_configs("g", {"share.delivery.count.limit": "3"}, [], T0)
    c.share_partition("g", tid, 1, env.logs.get_log("q", 1), T0)
    assert c.delete_group("g", T0)[0] is ErrorCode.none
    assert c.delete_group("g", T0)[0] is ErrorCode.group_id_not_found
    c = env.restart()
    assert not c.is_share_group("g") and c.start_offset("g", tid, 1) is None


@pytest.mark.parametrize(("reset", "start"), [
    ("latest", 3), ("earliest", 0), ("by_duration:PT1H", 1), ("by_duration:P1D", 0),
    ("by_duration:PT1M", 3)])
def test_auto_offset_reset_places_a_new_share_partition(env: Env, reset: str, start: int) -> None:
    from exactly.protocol.records import Record, build_batch
    plog = env.logs.get_log("q", 0)
    hour = 3_600_000
    for ts in (T0 - 2 * hour, T0 - 30 * 60_000, T0 - 10 * 60_000):
        plog.append(build_batch([Record(None, b"v")], timestamp=ts), now_ms=ts)
    c = env.coordinator
    c.alter_configs("g", {"share.auto.offset.reset": reset}, [], T0)
    tid = env.logs.topic("q").topic_id  # type: ignore[union-attr]
    sp, init = c.share_partition("g", tid, 0, plog, T0)
    assert init is not None and sp.start_offset == start
    assert env.restart().start_offset("g", tid, 0) == start  # the placement is durable


def test_share_sessions_end_with_the_connection_that_owns_them(env: Env) -> None:
    """KAFKA-19015: a session ends with the connection that opened it, releasing what its member
    holds on the session's partitions (as epoch -1 does, Kafka's releaseSession); KAFKA-19950:
    one re-opened on another connection is that one's."""
    c = env.coordinator
    tid = env.logs.topic("q").topic_id  # type: ignore[union-attr]
    sp, _ = c.share_partition("g", tid, 0, env.logs.get_log("q", 0), T0)
    other, _ = c.share_partition("g", tid, 1, env.logs.get_log("q", 1), T0)
    c.sessions.open("g", "m", [(tid, 0)], connection_id=1)
    sp.acquire("m", [LogBatch(0, 2)], max_records=3, now_ms=T0)
    other.acquire("m", [LogBatch(0, 0)], max_records=1, now_ms=T0)  # not a session partition
    c.sessions.open("g", "m", [(tid, 0)], connection_id=2)  # re-opened on connection 2
    assert c.connection_closed(1, T0) == [] and sp.acquired_by("m") == [0, 1, 2]
    c.sessions.open("g", "n", [], connection_id=2)
    assert len(c.connection_closed(2, T0)) == 1  # both sessions end, one release written
    assert c.sessions.sessions == {}
    assert [(sp.records[o].state, sp.records[o].delivery_count) for o in range(3)] == [
        (RecordState.AVAILABLE, 1)] * 3
    assert other.acquired_by("m") == [0]  # left to its lock, as by Kafka
    # closed with epoch -1, re-opened on connection 4: connection 3's close changes nothing
    c.sessions.open("g", "m", [(tid, 0)], connection_id=3)
    sp.acquire("m", [LogBatch(0, 2)], max_records=3, now_ms=T0)
    assert len(c.close_session("g", "m", T0)) == 1 and sp.acquired_by("m") == []
    session = c.sessions.open("g", "m", [(tid, 0)], connection_id=4)
    assert c.connection_closed(3, T0) == [] and c.sessions.is_open(session)  # type: ignore[arg-type]
    # the broker stops: the sessions end, releasing nothing (acquisitions are not durable)
    sp.acquire("m", [LogBatch(0, 2)], max_records=3, now_ms=T0)
    c.stop()
    assert c.connection_closed(4, T0) == [] and sp.acquired_by("m") == [0, 1, 2]
