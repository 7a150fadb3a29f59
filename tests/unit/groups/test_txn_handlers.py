"""TxnOffsetCommit (v0-6) and OffsetFetch's require_stable through the handlers: requests built
from kio's classes, answers encoded with kio's writers, the coordinator and its log real. The
transaction coordinator's answer is scripted here; the TCP tests cover the real one."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from exactly.groups import OFFSETS_TOPIC
from exactly.protocol.apis import SUPPORTED, ApiKey
from exactly.protocol.drafts import txn_offset_commit_v6 as v6
from tests.helpers.groups.group_helpers import T0
from tests.unit.groups.test_handlers import call, make_services, nested, request

TK = ApiKey.TXN_OFFSET_COMMIT
PID, EPOCH = 77, 3


class ScriptedTxn:
    """Answers verify_partitions / add_partitions with `error`, and records the calls."""

    def __init__(self) -> None:
        self.error = ErrorCode.none
        self.calls: list[tuple[Any, ...]] = []

    def verify_partitions(self, txn_id: str, pid: int, epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append(("verify", txn_id, pid, epoch, tuple(partitions)))
        return dict.fromkeys(partitions, self.error)

    def add_partitions(self, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
                       *, now_ms: int, client_transaction_version: int = 0,
                       ) -> dict[tuple[str, int], ErrorCode]:
        assert client_transaction_version == 2  # only TxnOffsetCommit v5 adds, for a TV2 client
        self.calls.append(("add", txn_id, pid, epoch, tuple(partitions)))
        return dict.fromkeys(partitions, self.error)

    def log_for(self, txn_id: str) -> str:
        return f"txn-log:{txn_id}"


def txn_broker(env: Any) -> Any:
    broker = make_services(env.coordinator)
    broker.txn = ScriptedTxn()
    return broker


def txn_offset_commit(broker: Any, version: int, group: str, offsets: dict[int, int], *,
                      member: str = "", generation: int = -1, topic: str = "t") -> Any:
    parts = tuple(nested(TK, version, "TxnOffsetCommitRequestPartition", partition_index=p,
                         committed_offset=o, committed_leader_epoch=2, committed_metadata="m")
                  for p, o in offsets.items())
    t = nested(TK, version, "TxnOffsetCommitRequestTopic", name=topic, partitions=parts)
    return call(broker, TK, version, request(
        TK, version, transactional_id="tx", group_id=group, producer_id=PID,
        producer_epoch=EPOCH, generation_id=generation, member_id=member,
        group_instance_id=None, topics=(t,)))


def errors_of(response: Any) -> list[tuple[int, ErrorCode]]:
    return [(p.partition_index, p.error_code) for t in response.topics for p in t.partitions]


def offset_fetch(broker: Any, version: int, group: str, *, stable: bool) -> list[tuple[Any, ...]]:
    fk = ApiKey.OFFSET_FETCH
    if version >= 8:
        ft = nested(fk, version, "OffsetFetchRequestTopics", name="t", partition_indexes=(0, 1))
        g = nested(fk, version, "OffsetFetchRequestGroup", group_id=group, topics=(ft,))
        r = call(broker, fk, version, request(fk, version, groups=(g,), require_stable=stable))
        parts = r.groups[0].topics[0].partitions
    else:
        ft = nested(fk, version, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 1))
        r = call(broker, fk, version, request(fk, version, group_id=group, topics=(ft,),
                                              require_stable=stable))
        parts = r.topics[0].partitions
    return [(p.partition_index, p.committed_offset, p.error_code) for p in parts]


def test_txn_offset_commit_is_advertised() -> None:
    assert SUPPORTED[TK] == (0, 6)  # v6: KIP-1319's topic ids, as Kafka 4.4


def test_txn_offset_commit_v6_names_topics_by_id(env) -> None:
    """v6 (KIP-1319): topics by id; an unknown id is UNKNOWN_TOPIC_ID and the others are
    committed, as Kafka 4.4 answers (conformance case txn.offsets_v6)."""
    info = env.logs.create_topic("t", 2, internal=False)
    broker = txn_broker(env)
    broker.logs = env.logs  # v6 looks the topic ids up
    unknown = uuid.UUID("7f9c24e8-4a3b-4f5e-9d2c-1b0a9e8d7c6b")
    topics = tuple(
        v6.TxnOffsetCommitRequestTopic(topic_id=tid, partitions=(
            v6.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                               committed_leader_epoch=-1,
                                               committed_metadata=""),))
        for tid in (info.topic_id, unknown))
    r = call(broker, TK, 6, request(
        TK, 6, transactional_id="tx", group_id="g6", producer_id=PID, producer_epoch=EPOCH,
        generation_id=-1, member_id="", group_instance_id=None, topics=topics))
    assert [(t.topic_id, errors_of_topic(t)) for t in r.topics] == [
        (info.topic_id, [(0, ErrorCode.none)]), (unknown, [(0, ErrorCode.unknown_topic_id)])]
    tp = (OFFSETS_TOPIC, env.coordinator.offsets_partition("g6"))
    assert broker.txn.calls == [("add", "tx", PID, EPOCH, (tp,))]  # as v5: transaction version 2


def errors_of_topic(topic: Any) -> list[tuple[int, ErrorCode]]:
    return [(p.partition_index, p.error_code) for p in topic.partitions]


@pytest.mark.parametrize("version", range(6))
def test_txn_offset_commit_at_each_version(env, version: int) -> None:
    env.logs.create_topic("t", 2, internal=False)
    broker = txn_broker(env)
    coord = env.coordinator
    group = f"g{version}"
    r = txn_offset_commit(broker, version, group, {0: 10, 1: 11, 7: 1})
    assert errors_of(r) == [(0, ErrorCode.none), (1, ErrorCode.none),
                            (7, ErrorCode.unknown_topic_or_partition)]
    tp = (OFFSETS_TOPIC, coord.offsets_partition(group))
    kind = "add" if version >= 5 else "verify"  # v5: transaction version 2 adds the partition
    assert broker.txn.calls == [(kind, "tx", PID, EPOCH, (tp,))]
    expected_sync = [coord.log_for(group)] + (["txn-log:tx"] if version >= 5 else [])
    assert sorted(map(str, broker.synced)) == sorted(map(str, expected_sync))

    # Pending: OffsetFetch does not see it; read_committed consumers (v7+) are told to retry.
    fv = 7 + version % 3
    assert offset_fetch(broker, fv, group, stable=False) == [
        (0, -1, ErrorCode.none), (1, -1, ErrorCode.none)]
    assert offset_fetch(broker, fv, group, stable=True) == [
        (0, -1, ErrorCode.unstable_offset_commit), (1, -1, ErrorCode.unstable_offset_commit)]

    coord.log_for(group).append_marker(PID, EPOCH, commit=True, coordinator_epoch=0, now_ms=T0)
    coord.complete_txn(tp[1], PID, True, T0)
    for stable in (False, True):
        assert offset_fetch(broker, fv, group, stable=stable) == [
            (0, 10, ErrorCode.none), (1, 11, ErrorCode.none)]
    found = coord.fetch_offsets(group, [("t", 0)])[("t", 0)]
    assert found is not None and found.metadata == "m"
    assert found.leader_epoch == (2 if version >= 2 else -1)


@pytest.mark.parametrize("version", range(6))
@pytest.mark.parametrize(("answered", "expected_old", "expected_new"), [
    (ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state),
    (ErrorCode.invalid_producer_id_mapping, ErrorCode.invalid_producer_id_mapping,
     ErrorCode.invalid_producer_id_mapping),
    (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch,
     ErrorCode.invalid_producer_epoch),
    (ErrorCode.invalid_producer_epoch, ErrorCode.invalid_producer_epoch,
     ErrorCode.invalid_producer_epoch),
    (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state,
     ErrorCode.transaction_abortable),
    (ErrorCode.concurrent_transactions, ErrorCode.coordinator_not_available,
     ErrorCode.coordinator_not_available),
    (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
     ErrorCode.coordinator_not_available),
])
def test_transaction_check_errors(env, version: int, answered: ErrorCode,
                                  expected_old: ErrorCode, expected_new: ErrorCode) -> None:
    env.logs.create_topic("t", 2, internal=False)
    broker = txn_broker(env)
    broker.txn.error = answered
    r = txn_offset_commit(broker, version, "g", {0: 1, 1: 1})
    expected = expected_new if version >= 4 else expected_old
    assert errors_of(r) == [(0, expected), (1, expected)]
    assert not env.coordinator.has_pending("g") and broker.synced == []
    assert env.coordinator.log_for("g").log_end_offset == 0


@pytest.mark.parametrize("version", range(3, 6))
def test_member_checks_from_v3(env, version: int) -> None:
    env.logs.create_topic("t", 1, internal=False)
    broker = txn_broker(env)
    r = txn_offset_commit(broker, version, "g", {0: 1}, member="nobody", generation=4)
    assert errors_of(r) == [(0, ErrorCode.unknown_member_id)]
    assert not env.coordinator.has_pending("g")


def test_empty_group_id(env) -> None:
    env.logs.create_topic("t", 1, internal=False)
    broker = txn_broker(env)
    r = txn_offset_commit(broker, 3, "", {0: 1})
    assert errors_of(r) == [(0, ErrorCode.invalid_group_id)]
    assert broker.txn.calls == []
