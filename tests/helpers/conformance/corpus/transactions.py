"""Transactions under both transaction versions: InitProducerId (KIP-98, KIP-360, KIP-939's v6),
AddPartitionsToTxn (the client's v3 and the brokers' batched v4+ with verify_only: KIP-890 part
1), AddOffsetsToTxn, TxnOffsetCommit (v3, v5, and v6 with topic ids: KIP-1319), EndTxn (v5 bumps
the epoch: KIP-890 part 2), fencing, timeouts (the coordinator's abort, then the producer's
requests), and the sequence rules of a producer whose aborted transaction left sequences unsent.

A transaction-version-1 client is one that speaks AddPartitionsToTxn v3, EndTxn v4 and Produce
v11; a version-2 client speaks Produce v12 (the broker adds the partition implicitly), EndTxn v5
and no AddPartitionsToTxn (KIP-890: the client picks the behaviour by its request versions). Both
brokers have transaction.version 2 finalized."""

from __future__ import annotations

import time
from typing import Any

from exactly.protocol.apis import request_class
from exactly.protocol.framing import RequestHeader, encode_request
from tests.helpers.conformance.corpus.produce import (
    PRODUCE_IGNORE,
    batch,
    create_topic,
    fetch_fields,
    list_offset,
    produce,
    topic_id,
    wait_for_coordinator,
)
from tests.helpers.conformance.harness import Divergence, Session, Target, case
from tests.helpers.conformance.wire import entity

COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14
CONCURRENT_TRANSACTIONS = 51

# The versions of each transaction-version's client.
TV1 = {"init": 4, "add": 3, "end": 4, "produce": 11, "offsets": 3, "commit": 3}
TV2 = {"init": 5, "add": None, "end": 5, "produce": 12, "offsets": 4, "commit": 5}


# -- requests ----------------------------------------------------------------------------------


def init_pid(s: Session, txn: str | None, *, version: int = 5, timeout: int = 60000,
             producer_id: int = -1, producer_epoch: int = -1,
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """InitProducerId, retried while the coordinator is loading or markers are pending (neither
    is deterministic between two brokers)."""
    fields: dict[str, Any] = {"transactional_id": txn, "transaction_timeout": timeout}
    if version >= 3:
        fields |= {"producer_id": producer_id, "producer_epoch": producer_epoch}
    fields |= extra or {}

    def ask() -> dict[str, Any] | None:
        a = s.call(22, version, fields)
        if a["error_code"] in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                               COORDINATOR_LOAD_IN_PROGRESS,
                               CONCURRENT_TRANSACTIONS):
            return None
        return a

    return s.until("InitProducerId", ask)  # type: ignore[no-any-return]


def begin(s: Session, txn: str, version: int = 5, timeout: int = 60000) -> tuple[int, int]:
    """Wait for the coordinator, InitProducerId: the producer id and epoch (not recorded)."""
    wait_for_coordinator(s, txn)
    a = init_pid(s, txn, version=version, timeout=timeout)
    assert a["error_code"] == 0, a
    return a["producer_id"], a["producer_epoch"]


def add_v3(s: Session, txn: str, pid: int, epoch: int, topics: dict[str, list[int]],
           version: int = 3) -> dict[str, Any]:
    return s.call(24, version, {
        "v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})


def add_v4(s: Session, transactions: list[tuple[str, int, int, bool, dict[str, list[int]]]],
           version: int = 4) -> dict[str, Any]:
    """The brokers' batched form: (transactional id, producer id, epoch, verify_only, topics)."""
    return s.call(24, version, {"transactions": [
        {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
         "verify_only": verify, "topics": [{"name": t, "partitions": ps}
                                           for t, ps in topics.items()]}
        for txn, pid, epoch, verify, topics in transactions]})


def record_add(s: Session, label: str, answer: dict[str, Any]) -> dict[str, Any]:
    return s.record(label, answer, unordered=ADD_UNORDERED)  # type: ignore[no-any-return]


def end(s: Session, txn: str, pid: int, epoch: int, commit: bool,
        version: int = 5) -> dict[str, Any]:
    return s.call(26, version, {"transactional_id": txn, "producer_id": pid,
                                "producer_epoch": epoch, "committed": commit})


def add_offsets(s: Session, txn: str, pid: int, epoch: int, group: str,
                version: int = 3) -> dict[str, Any]:
    return s.call(25, version, {"transactional_id": txn, "producer_id": pid,
                                "producer_epoch": epoch, "group_id": group})


def txn_commit(s: Session, txn: str, pid: int, epoch: int, group: str, topic: str,
               offset: int, version: int = 3) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "topics": [{"name": topic, "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]}
    if version >= 3:
        fields |= {"generation_id": -1, "member_id": "", "group_instance_id": None}
    return s.call(28, version, fields)


def txn_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    # Stamped now: within any time retention (see produce.T0).
    return batch(*(values or (b"v",)), producer_id=pid, producer_epoch=epoch,
                 base_sequence=seq, transactional=True, timestamp=int(time.time() * 1000))


def send(s: Session, t: str, txn: str, pid: int, epoch: int, seq: int, *values: bytes,
         version: int = 11) -> dict[str, Any]:
    return produce(s, t, txn_batch(pid, epoch, seq, *values), transactional_id=txn,
                   version=version)


def describe(s: Session, txn: str) -> dict[str, Any]:
    return s.call(65, 0, {"transactional_ids": [txn]})


def state(s: Session, txn: str) -> str:
    answer: str = describe(s, txn)["transaction_states"][0]["transaction_state"]
    return answer


def wait_idle(s: Session, txn: str) -> str:
    """Until the transaction's markers are written (Empty, CompleteCommit or CompleteAbort)."""
    return s.until(f"{txn} complete", lambda: (
        st := state(s, txn)) in ("Empty", "CompleteCommit", "CompleteAbort")
        and st)  # type: ignore[no-any-return]


def committed_end(s: Session, t: str) -> dict[str, Any]:
    """The last stable offset (ListOffsets latest, read_committed) of partition 0."""
    return list_offset(s, t, -1, isolation=1)


def fetch_committed(s: Session, t: str) -> dict[str, Any]:
    """A read_committed Fetch from offset 0, once the partition answers without an error and
    its last stable offset caught up (a loaded Kafka has answered OFFSET_OUT_OF_RANGE once,
    with no high watermark, right after a transaction's abort)."""
    tid = topic_id(s, t)

    last: list[Any] = []

    def settled() -> dict[str, Any] | None:
        a = s.call(1, 13, fetch_fields(tid, isolation=1))
        last[:] = [a]
        p = a["responses"][0]["partitions"][0]
        return a if p["error_code"] == 0 and p["last_stable_offset"] == p["high_watermark"] \
            else None

    try:
        return s.until(f"read_committed fetch of {t}", settled)  # type: ignore[no-any-return]
    except AssertionError as e:
        raise AssertionError(f"{e}; last answer {last}") from None


FETCH_IGNORE = ("responses.*.partitions.*.records", "responses.*.partitions.*.log_start_offset",
                "responses.*.partitions.*.preferred_read_replica",
                "responses.*.partitions.*.current_leader",
                "responses.*.partitions.*.snapshot_id", "node_endpoints", "session_id")

DESCRIBE_IGNORE = ("transaction_states.*.transaction_start_time",)
# Kafka answers AddPartitionsToTxn and lists a transaction's partitions in its hash maps' order.
ADD_UNORDERED = ("results_by_topic_v3_and_below",
                 "results_by_topic_v3_and_below.*.results_by_partition",
                 "results_by_transaction", "results_by_transaction.*.topic_results",
                 "results_by_transaction.*.topic_results.*.results_by_partition")
DESCRIBE_UNORDERED = ("transaction_states.*.topics", "transaction_states.*.topics.*.partitions")


# -- InitProducerId ------------------------------------------------------------------------------


@case("txn.init_producer_id")
def init_producer_id(s: Session) -> None:
    """A new transactional id, again (epoch + 1), with the last session's id and epoch (KIP-360),
    with a stale epoch and with another producer id, at v3 (INVALID_PRODUCER_EPOCH) and v4+
    (PRODUCER_FENCED); a timeout above transaction.max.timeout.ms; v0 and v2 (no KIP-360)."""
    txn = s.name("txn")
    wait_for_coordinator(s, txn)
    first = s.record("new", init_pid(s, txn, version=4))
    pid, epoch = first["producer_id"], first["producer_epoch"]
    s.record("again v0", init_pid(s, txn, version=0))
    s.record("again v2", init_pid(s, txn, version=2))
    again = s.record("again v5", init_pid(s, txn, version=5))
    e = again["producer_epoch"]
    s.record("recover v4 (KIP-360)", init_pid(s, txn, version=4, producer_id=pid,
                                              producer_epoch=e))
    s.record("retry of that recovery", init_pid(s, txn, version=4, producer_id=pid,
                                                producer_epoch=e))
    s.record("stale epoch v3", init_pid(s, txn, version=3, producer_id=pid,
                                        producer_epoch=epoch))
    s.record("stale epoch v4", init_pid(s, txn, version=4, producer_id=pid,
                                        producer_epoch=epoch))
    s.record("stale epoch v5", init_pid(s, txn, version=5, producer_id=pid,
                                        producer_epoch=epoch))
    s.record("other producer id v5", init_pid(s, txn, version=5, producer_id=pid + 77,
                                              producer_epoch=e + 1))
    s.record("id without epoch", init_pid(s, txn, version=5, producer_id=pid))
    s.record("timeout above max", init_pid(s, s.name("txn2"), version=5, timeout=900001))
    s.record("timeout 0", init_pid(s, s.name("txn3"), version=5, timeout=0))
    s.record("negative timeout", init_pid(s, s.name("txn4"), version=5, timeout=-5))
    s.record("timeout at max", init_pid(s, s.name("txn5"), version=5, timeout=900000))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)


@case("txn.init_producer_id_idempotent")
def init_producer_id_idempotent(s: Session) -> None:
    """Without a transactional id: a new producer id at epoch 0 each time, whatever the timeout;
    with a producer id and epoch (KIP-360 bump of an idempotent producer)."""
    a = s.record("v0", init_pid(s, None, version=0))
    s.record("v2", init_pid(s, None, version=2))
    s.record("v4 huge timeout", init_pid(s, None, version=4, timeout=99_999_999))
    s.record("v5 with id and epoch", init_pid(s, None, version=5,
                                              producer_id=a["producer_id"], producer_epoch=0))
    s.record("v5 negative timeout", init_pid(s, None, version=5, timeout=-1))
    s.record("empty transactional id", init_pid(s, "", version=5))


@case("txn.init_producer_id_v6")
def init_producer_id_v6(s: Session) -> None:
    """InitProducerId v6 (KIP-939) where Kafka 4.4 does not serve it (no
    unstable.api.versions.enable): Kafka closes the connection, Exactly answers."""
    txn = s.name("txn")
    wait_for_coordinator(s, txn)
    conn = s.connect()
    request = entity(request_class(22, 6), {
        "transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1,
        "producer_epoch": -1, "enable2_pc": False, "keep_prepared_txn": False})
    conn.send_frame(encode_request(RequestHeader(22, 6, 1, "conformance"), request))
    answer = conn.outcome(22, 6)
    s.record("v6 unadvertised", answer if isinstance(answer, str) else answer["error_code"])


def _v6_requests(s: Session) -> None:
    txn = s.name("txn")
    wait_for_coordinator(s, txn)
    v6 = {"enable2_pc": False, "keep_prepared_txn": False}
    s.record("plain", init_pid(s, txn, version=6, extra=v6))
    s.record("enable 2pc", init_pid(s, txn, version=6, extra=v6 | {"enable2_pc": True}))
    s.record("enable 2pc, timeout above max", init_pid(
        s, txn, version=6, timeout=99_999_999, extra=v6 | {"enable2_pc": True}))
    s.record("describe 2pc", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("idempotent, enable 2pc", init_pid(s, None, version=6,
                                                extra=v6 | {"enable2_pc": True}))
    s.record("v5 after 2pc", init_pid(s, txn, version=5))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    other = s.name("txn2")
    wait_for_coordinator(s, other)
    s.record("keep prepared", init_pid(s, other, version=6, extra=v6 | {
        "keep_prepared_txn": True}))


@case("txn.init_producer_id_v6_unstable")
def init_producer_id_v6_unstable(s: Session) -> None:
    """InitProducerId v6 (KIP-939) against a Kafka 4.4 that serves it
    (unstable.api.versions.enable=true, started for this case): plain, Enable2Pc (the timeout
    is ignored), KeepPreparedTxn (Kafka 4.4 lacks it), an idempotent producer with Enable2Pc."""
    if s.target.name != "kafka":
        _v6_requests(s)
        return
    from tests.rigs.kafka import ApacheKafka

    with ApacheKafka(settings={"unstable.api.versions.enable": "true"}) as k:
        inner = Session(s.case_name, Target("kafka", "127.0.0.1", k.ports[1]))
        try:
            _v6_requests(inner)
        finally:
            inner.close()
        s.recorded.extend(inner.recorded)


# -- transaction version 1 -------------------------------------------------------------------------


@case("txn.tv1_commit_and_abort")
def tv1_commit_and_abort(s: Session) -> None:
    """A transaction-version-1 client: AddPartitionsToTxn v3, Produce v11, EndTxn v4 commit; EndTxn
    retried after completion; abort after commit; EndTxn with no transaction open; then an
    aborted transaction. The epoch never moves."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=4)
    s.record("end with nothing open", end(s, txn, pid, epoch, True, version=4))
    s.record("abort with nothing open", end(s, txn, pid, epoch, False, version=4))
    record_add(s, "add", add_v3(s, txn, pid, epoch, {t: [0]}))
    record_add(s, "add again", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("produce seq 0", send(s, t, txn, pid, epoch, 0, b"a", b"b"), ignore=PRODUCE_IGNORE)
    s.record("produce seq 2", send(s, t, txn, pid, epoch, 2, b"c"), ignore=PRODUCE_IGNORE)
    s.record("describe ongoing", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("commit", end(s, txn, pid, epoch, True, version=4))
    s.record("state", wait_idle(s, txn))
    s.record("commit again (retry)", end(s, txn, pid, epoch, True, version=4))
    s.record("abort after commit", end(s, txn, pid, epoch, False, version=4))
    s.record("commit again v5", end(s, txn, pid, epoch, True, version=5))
    s.record("lso", committed_end(s, t))
    record_add(s, "add 2", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("produce seq 3", send(s, t, txn, pid, epoch, 3, b"d"), ignore=PRODUCE_IGNORE)
    s.record("abort", end(s, txn, pid, epoch, False, version=4))
    s.record("state 2", wait_idle(s, txn))
    s.record("abort again (retry)", end(s, txn, pid, epoch, False, version=4))
    s.record("commit after abort", end(s, txn, pid, epoch, True, version=4))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)
    s.record("lso 2", committed_end(s, t))


@case("txn.tv1_versions")
def tv1_versions(s: Session) -> None:
    """EndTxn v0-v4 and AddPartitionsToTxn v0-v3, one transaction each."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=3)
    for v in range(5):
        record_add(s, f"add v{min(v, 3)} ({v})", add_v3(s, txn, pid, epoch, {t: [0]},
                                                   version=min(v, 3)))
        s.record(f"end v{v}", end(s, txn, pid, epoch, v % 2 == 0, version=v))
        s.record(f"state after v{v}", wait_idle(s, txn))


# -- transaction version 2 ----------------------------------------------------------------------


@case("txn.tv2_commit_and_abort")
def tv2_commit_and_abort(s: Session) -> None:
    """A transaction-version-2 client: Produce v12 adds the partition implicitly, EndTxn v5
    answers the bumped epoch; retried EndTxn with the old epoch; an abort with nothing open;
    the next transaction at the new epoch."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=5)
    s.record("commit with nothing open", end(s, txn, pid, epoch, True))
    s.record("produce seq 0", send(s, t, txn, pid, epoch, 0, b"a", b"b", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("produce seq 2", send(s, t, txn, pid, epoch, 2, b"c", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("describe ongoing", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    committed = s.record("commit", end(s, txn, pid, epoch, True))
    s.record("state", wait_idle(s, txn))
    s.record("commit retry, old epoch", end(s, txn, pid, epoch, True))
    s.record("abort, old epoch", end(s, txn, pid, epoch, False))
    e2 = committed["producer_epoch"]
    s.record("commit, new epoch, nothing open", end(s, txn, pid, e2, True))
    s.record("produce at new epoch seq 0", send(s, t, txn, pid, e2, 0, b"d", version=12),
             ignore=PRODUCE_IGNORE)
    aborted = s.record("abort", end(s, txn, pid, e2, False))
    s.record("state 2", wait_idle(s, txn))
    e3 = aborted["producer_epoch"]
    empty = s.record("abort with nothing open", end(s, txn, pid, e3, False))
    s.record("state 3", wait_idle(s, txn))
    s.record("abort retry with nothing open", end(s, txn, pid, e3, False))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)
    s.record("lso", committed_end(s, t))
    del empty


@case("txn.tv2_produce_then_old_versions")
def tv2_produce_then_old_versions(s: Session) -> None:
    """A transaction begun by Produce v12 ended by EndTxn v4 (no bump), and one begun by
    AddPartitionsToTxn v3 ended by EndTxn v5 (bump)."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=5)
    s.record("produce v12", send(s, t, txn, pid, epoch, 0, version=12), ignore=PRODUCE_IGNORE)
    s.record("end v4", end(s, txn, pid, epoch, True, version=4))
    s.record("state", wait_idle(s, txn))
    record_add(s, "add v3", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("produce v11", send(s, t, txn, pid, epoch, 1, version=11), ignore=PRODUCE_IGNORE)
    s.record("end v5", end(s, txn, pid, epoch, True, version=5))
    s.record("state 2", wait_idle(s, txn))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("lso", committed_end(s, t))


# -- AddPartitionsToTxn -------------------------------------------------------------------------


@case("txn.add_partitions")
def add_partitions(s: Session) -> None:
    """AddPartitionsToTxn v3 with an unknown topic and partition beside known ones (nothing
    added: OPERATION_NOT_ATTEMPTED), several partitions, an unknown transactional id."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t, partitions=3)
    pid, epoch = begin(s, txn, version=4)
    record_add(s, "unknown topic", add_v3(s, txn, pid, epoch, {t: [0], s.name("nope"): [0]}))
    record_add(s, "unknown partition", add_v3(s, txn, pid, epoch, {t: [0, 9]}))
    s.record("describe after refused", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    record_add(s, "three partitions", add_v3(s, txn, pid, epoch, {t: [0, 1, 2]}))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    record_add(s, "unknown transactional id", add_v3(s, s.name("nope"), pid, epoch, {t: [0]}))
    s.record("end", end(s, txn, pid, epoch, False, version=4))
    s.record("state", wait_idle(s, txn))


@case("txn.add_partitions_batched")
def add_partitions_batched(s: Session) -> None:
    """AddPartitionsToTxn v4/v5 (KIP-890 part 1, the brokers' form): verify_only of a partition
    not in the transaction, then added, then verified; two transactions in one request; an
    unknown topic; a stale epoch."""
    t = s.name("t")
    a, b = s.name("txa"), s.name("txb")
    create_topic(s, t, partitions=2)
    pa, ea = begin(s, a, version=4)
    pb, eb = begin(s, b, version=4)
    record_add(s, "verify not added", add_v4(s, [(a, pa, ea, True, {t: [0]})]))
    s.record("describe after verify", describe(s, a), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    record_add(s, "add v4", add_v4(s, [(a, pa, ea, False, {t: [0]})]))
    record_add(s, "verify added", add_v4(s, [(a, pa, ea, True, {t: [0]})]))
    record_add(s, "verify one added one not", add_v4(s, [(a, pa, ea, True, {t: [0, 1]})]))
    record_add(s, "two transactions v5", add_v4(s, [(a, pa, ea, False, {t: [1]}),
                                               (b, pb, eb, False, {t: [0, 1]})], version=5))
    record_add(s, "unknown topic", add_v4(s, [(b, pb, eb, False, {s.name("nope"): [0]})]))
    record_add(s, "stale epoch v4", add_v4(s, [(a, pa, ea - 1, False, {t: [0]})]))
    record_add(s, "stale epoch verify", add_v4(s, [(a, pa, ea - 1, True, {t: [0]})]))
    record_add(s, "unknown id verify", add_v4(s, [(s.name("nope"), pa, ea, True, {t: [0]})]))
    s.record("describe a", describe(s, a), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("describe b", describe(s, b), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("end a", end(s, a, pa, ea, False, version=4))
    s.record("end b", end(s, b, pb, eb, True, version=4))


# -- offsets in a transaction ----------------------------------------------------------------------


def _fetch_offset(s: Session, group: str, t: str) -> dict[str, Any]:
    return s.call(9, 8, {"groups": [{"group_id": group, "topics": [
        {"name": t, "partition_indexes": [0]}]}], "require_stable": True})


def wait_for_group(s: Session, group: str) -> None:
    """FindCoordinator until NONE, then OffsetFetch until the coordinator has loaded the group's
    partition (a fresh Kafka creates __consumer_offsets first)."""
    wait_for_coordinator(s, group, key_type=0)
    s.until(f"group coordinator of {group} loaded",
            lambda: _fetch_offset(s, group, "none")["groups"][0]["error_code"] == 0)


def wait_for_offset(s: Session, group: str, t: str, offset: int) -> dict[str, Any]:
    last: list[Any] = []

    def probe() -> dict[str, Any] | None:
        a = _fetch_offset(s, group, t)
        last[:] = [a]
        parts = [p for g in a["groups"] for tp in g["topics"] for p in tp["partitions"]]
        return a if parts and parts[0]["committed_offset"] == offset else None

    try:
        return s.until(f"offset {offset} committed", probe)  # type: ignore[no-any-return]
    except AssertionError as e:
        raise AssertionError(f"{e}; last answer {last}") from None


@case("txn.offsets_tv1")
def offsets_tv1(s: Session) -> None:
    """AddOffsetsToTxn v3 + TxnOffsetCommit v3 + EndTxn v4: the group's offset is committed with
    the transaction; TxnOffsetCommit without AddOffsetsToTxn first; an empty group id."""
    t = s.name("t")
    txn = s.name("txn")
    group = s.name("g")
    create_topic(s, t)
    wait_for_group(s, group)
    pid, epoch = begin(s, txn, version=4)
    s.record("commit before add offsets", txn_commit(s, txn, pid, epoch, group, t, 5))
    s.record("add offsets", add_offsets(s, txn, pid, epoch, group))
    s.record("txn offset commit", txn_commit(s, txn, pid, epoch, group, t, 5))
    s.record("add offsets again", add_offsets(s, txn, pid, epoch, group))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("commit", end(s, txn, pid, epoch, True, version=4))
    wait_idle(s, txn)
    s.record("offset", wait_for_offset(s, group, t, 5))
    s.record("empty group id", add_offsets(s, txn, pid, epoch, ""))
    s.record("stale epoch", add_offsets(s, txn, pid, epoch - 1, group))
    s.record("stale epoch v1", add_offsets(s, txn, pid, epoch - 1, group, version=1))
    s.record("other producer id", add_offsets(s, txn, pid + 55, epoch, group))


@case("txn.offsets_tv2")
def offsets_tv2(s: Session) -> None:
    """TxnOffsetCommit v5 without AddOffsetsToTxn (KIP-890 part 2: the group coordinator adds the
    offsets partition), EndTxn v5; aborted offsets are not visible."""
    t = s.name("t")
    txn = s.name("txn")
    group = s.name("g")
    create_topic(s, t)
    wait_for_group(s, group)
    pid, epoch = begin(s, txn, version=5)
    s.record("txn offset commit v5", txn_commit(s, txn, pid, epoch, group, t, 7, version=5))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    c = s.record("commit", end(s, txn, pid, epoch, True))
    wait_idle(s, txn)
    s.record("offset", wait_for_offset(s, group, t, 7))
    e2 = c["producer_epoch"]
    s.record("old epoch v5", txn_commit(s, txn, pid, epoch, group, t, 8, version=5))
    s.record("txn offset commit 2", txn_commit(s, txn, pid, e2, group, t, 9, version=5))
    s.record("abort", end(s, txn, pid, e2, False))
    wait_idle(s, txn)
    s.record("offset after abort", _fetch_offset(s, group, t))
    e3 = s.record("abort answer", describe(s, txn), ignore=DESCRIBE_IGNORE,
                  unordered=DESCRIBE_UNORDERED)["transaction_states"][0]["producer_epoch"]
    s.record("add offsets v4", add_offsets(s, txn, pid, e3, group, version=4))
    s.record("txn offset commit after add offsets", txn_commit(s, txn, pid, e3, group, t, 11,
                                                               version=5))
    s.record("old epoch add offsets v4", add_offsets(s, txn, pid, e2, group, version=4))
    s.record("commit 2", end(s, txn, pid, e3, True))
    wait_idle(s, txn)
    s.record("offset 11", wait_for_offset(s, group, t, 11))



def txn_commit_v6(s: Session, txn: str, pid: int, epoch: int, group: str,
                  topics: dict[str, int]) -> dict[str, Any]:
    """TxnOffsetCommit v6 (KIP-1319): topics by id, offset per topic (partition 0)."""
    return s.call(28, 6, {
        "transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"topic_id": tid, "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": ""}]} for tid, offset in topics.items()]})


@case("txn.offsets_v6")
def offsets_v6(s: Session) -> None:
    """TxnOffsetCommit v6 (KIP-1319: topic ids) in a version-2 transaction: a known topic id, an
    unknown one beside it, then the committed offset."""
    t = s.name("t")
    txn = s.name("txn")
    group = s.name("g")
    create_topic(s, t)
    tid = topic_id(s, t)
    wait_for_group(s, group)
    pid, epoch = begin(s, txn, version=5)
    s.record("known id", txn_commit_v6(s, txn, pid, epoch, group, {tid: 3}))
    s.record("unknown id beside", txn_commit_v6(s, txn, pid, epoch, group, {
        tid: 4, "7f9c24e8-4a3b-4f5e-9d2c-1b0a9e8d7c6b": 4}), unordered=("topics",))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("old epoch", txn_commit_v6(s, txn, pid, epoch - 1 if epoch else 5, group,
                                        {tid: 9}))
    s.record("commit", end(s, txn, pid, epoch, True))
    wait_idle(s, txn)
    s.record("offset", _fetch_offset(s, group, t))


# -- fencing, identity -----------------------------------------------------------------------------


@case("txn.fencing_tv1")
def fencing_tv1(s: Session) -> None:
    """After a second InitProducerId: the old epoch's AddPartitionsToTxn (v1, v3), Produce v11,
    EndTxn (v1, v4), AddOffsetsToTxn; the old instance's open transaction is aborted."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, old = begin(s, txn, version=4)
    record_add(s, "add", add_v3(s, txn, pid, old, {t: [0]}))
    s.record("produce", send(s, t, txn, pid, old, 0, b"a"), ignore=PRODUCE_IGNORE)
    new = s.record("init again", init_pid(s, txn, version=4))
    s.record("state", wait_idle(s, txn))
    record_add(s, "old add v1", add_v3(s, txn, pid, old, {t: [0]}, version=1))
    record_add(s, "old add v3", add_v3(s, txn, pid, old, {t: [0]}))
    s.record("old produce", send(s, t, txn, pid, old, 1, b"b"), ignore=PRODUCE_IGNORE)
    s.record("old end v1", end(s, txn, pid, old, True, version=1))
    s.record("old end v4", end(s, txn, pid, old, True, version=4))
    s.record("old end v5", end(s, txn, pid, old, False, version=5))
    s.record("old add offsets", add_offsets(s, txn, pid, old, s.name("g")))
    record_add(s, "future epoch add", add_v3(s, txn, pid, old + 9, {t: [0]}))
    e = new["producer_epoch"]
    record_add(s, "new add", add_v3(s, txn, new["producer_id"], e, {t: [0]}))
    s.record("new produce seq 0", send(s, t, txn, new["producer_id"], e, 0, b"c"),
             ignore=PRODUCE_IGNORE)
    s.record("new commit", end(s, txn, new["producer_id"], e, True, version=4))
    wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


@case("txn.fencing_tv2")
def fencing_tv2(s: Session) -> None:
    """Version-2 fencing: after InitProducerId again, the old epoch's Produce v12 and EndTxn v5;
    after a commit (epoch bumped by EndTxn v5), the pre-commit epoch's Produce v12."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, old = begin(s, txn, version=5)
    s.record("produce", send(s, t, txn, pid, old, 0, b"a", version=12), ignore=PRODUCE_IGNORE)
    new = s.record("init again", init_pid(s, txn, version=5))
    s.record("state", wait_idle(s, txn))
    s.record("old produce", send(s, t, txn, pid, old, 1, b"b", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("old end", end(s, txn, pid, old, True))
    e = new["producer_epoch"]
    s.record("new produce", send(s, t, txn, pid, e, 0, b"c", version=12), ignore=PRODUCE_IGNORE)
    c = s.record("commit", end(s, txn, pid, e, True))
    wait_idle(s, txn)
    s.record("pre-commit epoch produce", send(s, t, txn, pid, e, 1, b"d", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("pre-commit epoch produce v11", send(s, t, txn, pid, e, 1, b"d", version=11),
             ignore=PRODUCE_IGNORE)
    e2 = c["producer_epoch"]
    s.record("future epoch produce v12", send(s, t, txn, pid, e2 + 3, 0, b"f", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("future epoch produce v11", send(s, t, txn, pid, e2 + 3, 0, b"f", version=11),
             ignore=PRODUCE_IGNORE)
    s.record("new epoch produce seq 0", send(s, t, txn, pid, e2, 0, b"e", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("end", end(s, txn, pid, e2, True))
    wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


@case("txn.producer_id_mapping")
def producer_id_mapping(s: Session) -> None:
    """A producer id that does not belong to the transactional id (INVALID_PRODUCER_ID_MAPPING),
    and requests naming an unknown transactional id."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=4)
    other = pid + 1000
    record_add(s, "add v3", add_v3(s, txn, other, epoch, {t: [0]}))
    record_add(s, "add v4", add_v4(s, [(txn, other, epoch, False, {t: [0]})]))
    s.record("end v4", end(s, txn, other, epoch, True, version=4))
    s.record("end v5", end(s, txn, other, epoch, True, version=5))
    s.record("add offsets", add_offsets(s, txn, other, epoch, s.name("g")))
    s.record("produce v11", send(s, t, txn, other, epoch, 0), ignore=PRODUCE_IGNORE)
    s.record("produce v12", send(s, t, txn, other, epoch, 0, version=12), ignore=PRODUCE_IGNORE)
    s.record("unknown id: end v4", end(s, s.name("nope"), pid, epoch, True, version=4))
    s.record("unknown id: end v5", end(s, s.name("nope"), pid, epoch, False, version=5))
    s.record("unknown id: add offsets", add_offsets(s, s.name("nope"), pid, epoch, s.name("g")))
    s.record("unknown id: produce v12", send(s, t, s.name("nope"), pid, epoch, 0, version=12),
             ignore=PRODUCE_IGNORE)
    s.record("lso", committed_end(s, t))




# -- timeouts, markers pending -------------------------------------------------------------------

# Short enough to expire soon; long enough that the requests made before it never race it.
SHORT_TIMEOUT_MS = 3000


def wait_aborted(s: Session, txn: str) -> dict[str, Any]:
    """Until the coordinator aborted the timed-out transaction (Kafka looks every
    transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default)."""
    return s.until(f"{txn} aborted by the coordinator", lambda: (
        a := describe(s, txn))["transaction_states"][0]["transaction_state"] == "CompleteAbort"
        and a, timeout=60)  # type: ignore[no-any-return]


@case("txn.timeout_tv1")
def timeout_tv1(s: Session) -> None:
    """A transaction past its timeout: the coordinator aborts it with epoch + 1 (fencing the
    producer); then the old epoch's AddPartitionsToTxn v3, Produce v11, EndTxn v4 commit and
    abort; InitProducerId with the old identity (KIP-360) and a fresh one."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=4, timeout=SHORT_TIMEOUT_MS)
    record_add(s, "add", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("produce", send(s, t, txn, pid, epoch, 0, b"a"), ignore=PRODUCE_IGNORE)
    s.record("aborted", wait_aborted(s, txn), ignore=DESCRIBE_IGNORE)
    record_add(s, "old add", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("old produce", send(s, t, txn, pid, epoch, 1, b"b"), ignore=PRODUCE_IGNORE)
    s.record("old commit", end(s, txn, pid, epoch, True, version=4))
    s.record("old abort", end(s, txn, pid, epoch, False, version=4))
    s.record("old abort v5", end(s, txn, pid, epoch, False, version=5))
    s.record("recover with old identity", init_pid(s, txn, version=4, producer_id=pid,
                                                   producer_epoch=epoch))
    s.record("fresh init", init_pid(s, txn, version=4))
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


@case("txn.timeout_tv2")
def timeout_tv2(s: Session) -> None:
    """A version-2 transaction past its timeout: the old epoch's Produce v12, EndTxn v5 abort
    and commit, InitProducerId v5 with the old identity."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=5, timeout=SHORT_TIMEOUT_MS)
    s.record("produce", send(s, t, txn, pid, epoch, 0, b"a", version=12), ignore=PRODUCE_IGNORE)
    s.record("aborted", wait_aborted(s, txn), ignore=DESCRIBE_IGNORE)
    s.record("old produce", send(s, t, txn, pid, epoch, 1, b"b", version=12),
             ignore=PRODUCE_IGNORE)
    went_on = s.record("old abort", end(s, txn, pid, epoch, False))
    s.record("old commit", end(s, txn, pid, epoch, True))
    s.record("old abort again", end(s, txn, pid, epoch, False))
    if went_on["error_code"] == 0:
        # KIP-890: the producer goes on with the epoch the abort answered.
        e2 = went_on["producer_epoch"]
        s.record("produce at the answered epoch", send(s, t, txn, pid, e2, 0, b"c", version=12),
                 ignore=PRODUCE_IGNORE)
        s.record("commit at the answered epoch", end(s, txn, pid, e2, True))
        wait_idle(s, txn)
    s.record("recover with old identity", init_pid(s, txn, version=5, producer_id=pid,
                                                   producer_epoch=epoch))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


def eventually(s: Session, what: str, request: Any) -> dict[str, Any]:
    """The first answer that is not CONCURRENT_TRANSACTIONS (markers still being written: Kafka
    may answer that while Exactly waits for them; which one happens is timing)."""
    return s.until(what, lambda: (a := request())["error_code"] != CONCURRENT_TRANSACTIONS
                   and a)  # type: ignore[no-any-return]


def _first_partition_error(a: dict[str, Any]) -> int:
    error: int = a["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"]
    return error


@case("txn.markers_pending")
def markers_pending(s: Session) -> None:
    """Requests right after EndTxn, while markers may still be pending: only NONE or
    CONCURRENT_TRANSACTIONS, and the answer once they are written."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=4)
    add_v3(s, txn, pid, epoch, {t: [0]})
    send(s, t, txn, pid, epoch, 0, b"a")
    s.record("commit", end(s, txn, pid, epoch, True, version=4))
    first = add_v3(s, txn, pid, epoch, {t: [0]})
    s.record("add right after", _first_partition_error(first) in (0, CONCURRENT_TRANSACTIONS))
    s.record("add eventually", s.until("add", lambda: _first_partition_error(
        a := add_v3(s, txn, pid, epoch, {t: [0]})) != CONCURRENT_TRANSACTIONS and a),
             unordered=ADD_UNORDERED)
    send(s, t, txn, pid, epoch, 1, b"b")
    s.record("abort", end(s, txn, pid, epoch, False, version=4))
    a = s.call(22, 4, {"transactional_id": txn, "transaction_timeout": 60000,
                       "producer_id": -1, "producer_epoch": -1})
    s.record("init right after", a["error_code"] in (0, CONCURRENT_TRANSACTIONS))
    if a["error_code"] == 0:
        s.record("init eventually", a)
    else:
        s.record("init eventually", eventually(s, "init", lambda: s.call(22, 4, {
            "transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1,
            "producer_epoch": -1})))
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


# -- sequences across an aborted transaction ----------------------------------------------------


@case("txn.sequence_gap_after_abort_tv1")
def sequence_gap_after_abort_tv1(s: Session) -> None:
    """A transaction-version-1 producer (librdkafka) writes seq 0..4, purges 5..9 and aborts;
    its next transaction at the same epoch (no InitProducerId) sends seq 10 on the partition,
    then seq 5. Kafka 4.4 answers OUT_OF_ORDER_SEQUENCE_NUMBER to seq 10 and takes seq 5: an
    abort does not reset the sequence of an epoch (only a new epoch starts at 0)."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=4)
    add_v3(s, txn, pid, epoch, {t: [0]})
    s.record("seq 0..4", send(s, t, txn, pid, epoch, 0, b"0", b"1", b"2", b"3", b"4"),
             ignore=PRODUCE_IGNORE)
    s.record("abort", end(s, txn, pid, epoch, False, version=4))
    s.record("state", wait_idle(s, txn))
    record_add(s, "add", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("seq 10", send(s, t, txn, pid, epoch, 10, b"10"), ignore=PRODUCE_IGNORE)
    s.record("seq 5", send(s, t, txn, pid, epoch, 5, b"5"), ignore=PRODUCE_IGNORE)
    s.record("seq 0 again", send(s, t, txn, pid, epoch, 0, b"0"), ignore=PRODUCE_IGNORE)
    s.record("commit", end(s, txn, pid, epoch, True, version=4))
    wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


@case("txn.sequence_gap_after_abort_tv1_seq0")
def sequence_gap_after_abort_tv1_seq0(s: Session) -> None:
    """As sequence_gap_after_abort_tv1, but the next transaction starts over at seq 0."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=4)
    add_v3(s, txn, pid, epoch, {t: [0]})
    s.record("seq 0..4", send(s, t, txn, pid, epoch, 0, b"0", b"1", b"2", b"3", b"4"),
             ignore=PRODUCE_IGNORE)
    s.record("abort", end(s, txn, pid, epoch, False, version=4))
    s.record("state", wait_idle(s, txn))
    record_add(s, "add", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("seq 0", send(s, t, txn, pid, epoch, 0, b"0"), ignore=PRODUCE_IGNORE)
    s.record("seq 1", send(s, t, txn, pid, epoch, 1, b"1"), ignore=PRODUCE_IGNORE)
    s.record("commit", end(s, txn, pid, epoch, True, version=4))
    wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


@case("txn.sequence_gap_after_abort_tv2")
def sequence_gap_after_abort_tv2(s: Session) -> None:
    """The same under transaction version 2: Produce v12 seq 0..4, EndTxn v5 abort (epoch + 1);
    seq 10 at the old epoch, then at the new epoch seq 10, seq 5 and seq 0."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, epoch = begin(s, txn, version=5)
    s.record("seq 0..4", send(s, t, txn, pid, epoch, 0, b"0", b"1", b"2", b"3", b"4",
                              version=12), ignore=PRODUCE_IGNORE)
    aborted = s.record("abort", end(s, txn, pid, epoch, False))
    s.record("state", wait_idle(s, txn))
    s.record("old epoch seq 10", send(s, t, txn, pid, epoch, 10, b"10", version=12),
             ignore=PRODUCE_IGNORE)
    e2 = aborted["producer_epoch"]
    s.record("new epoch seq 10", send(s, t, txn, pid, e2, 10, b"10", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("new epoch seq 5", send(s, t, txn, pid, e2, 5, b"5", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("new epoch seq 0", send(s, t, txn, pid, e2, 0, b"0", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("commit", end(s, txn, pid, e2, True))
    wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


@case("txn.sequence_gap_after_abort_tv1_on_tv2_epoch")
def sequence_gap_after_abort_mixed(s: Session) -> None:
    """A producer whose transaction was begun by Produce v12 and aborted by EndTxn v4 (no
    bump): its next batch at the same epoch with seq 10 (Produce v11 after AddPartitionsToTxn
    v3, and Produce v12)."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t, partitions=2)
    pid, epoch = begin(s, txn, version=5)
    s.record("seq 0..4 p0", send(s, t, txn, pid, epoch, 0, b"0", b"1", b"2", b"3", b"4",
                                 version=12), ignore=PRODUCE_IGNORE)
    s.record("abort v4", end(s, txn, pid, epoch, False, version=4))
    s.record("state", wait_idle(s, txn))
    s.record("seq 10 v12", send(s, t, txn, pid, epoch, 10, b"10", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("seq 5 v12", send(s, t, txn, pid, epoch, 5, b"5", version=12),
             ignore=PRODUCE_IGNORE)
    s.record("abort v4 again", end(s, txn, pid, epoch, False, version=4))
    wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


# -- TRANSACTION_ABORTABLE (KIP-890) ------------------------------------------------------------


@case("txn.partition_not_added")
def partition_not_added(s: Session) -> None:
    """A transaction-version-1 producer writes to a partition it did not add while its
    transaction is open (KIP-890 part 1 verification): Produce v11 (TRANSACTION_ABORTABLE
    known), v10 and v9 (older clients), then TxnOffsetCommit v3 for a group it did not add."""
    t = s.name("t")
    txn = s.name("txn")
    group = s.name("g")
    create_topic(s, t, partitions=2)
    wait_for_group(s, group)
    pid, epoch = begin(s, txn, version=4)
    record_add(s, "add p0", add_v3(s, txn, pid, epoch, {t: [0]}))
    s.record("produce p0", send(s, t, txn, pid, epoch, 0, b"a"), ignore=PRODUCE_IGNORE)
    for v in (11, 10, 9, 3):
        s.record(f"produce p1 v{v}", produce(s, t, txn_batch(pid, epoch, 0, b"b"), partition=1,
                                             transactional_id=txn, version=v),
                 ignore=PRODUCE_IGNORE)
    s.record("txn offset commit v3 not added", txn_commit(s, txn, pid, epoch, group, t, 1))
    s.record("txn offset commit v5 not added", txn_commit(s, txn, pid, epoch, group, t, 1,
                                                          version=5))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE, unordered=DESCRIBE_UNORDERED)
    s.record("commit", end(s, txn, pid, epoch, True, version=4))
    wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)


@case("txn.init_producer_id_recover_ongoing")
def init_producer_id_recover_ongoing(s: Session) -> None:
    """KIP-360: InitProducerId with the current producer id and epoch while a transaction is
    open (v4, after AddPartitionsToTxn v3; v5, after Produce v12): the transaction is aborted and
    the producer goes on. Then its old epoch's EndTxn and Produce."""
    t = s.name("t")
    create_topic(s, t)
    for v, txn in ((4, s.name("txn1")), (5, s.name("txn2"))):
        pid, epoch = begin(s, txn, version=v)
        if v == 4:
            add_v3(s, txn, pid, epoch, {t: [0]})
            send(s, t, txn, pid, epoch, 0, b"a")
        else:
            send(s, t, txn, pid, epoch, 0, b"a", version=12)
        r = s.record(f"v{v} recover", init_pid(s, txn, version=v, producer_id=pid,
                                               producer_epoch=epoch))
        s.record(f"v{v} retry of recover", init_pid(s, txn, version=v, producer_id=pid,
                                                    producer_epoch=epoch))
        s.record(f"v{v} describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
                 unordered=DESCRIBE_UNORDERED)
        s.record(f"v{v} old abort v4", end(s, txn, pid, epoch, False, version=4))
        s.record(f"v{v} old abort v5", end(s, txn, pid, epoch, False, version=5))
        s.record(f"v{v} old produce", send(s, t, txn, pid, epoch, 1, b"b", version=12),
                 ignore=PRODUCE_IGNORE)
        if r["error_code"] == 0:
            s.record(f"v{v} new produce", send(s, t, txn, pid, r["producer_epoch"], 0, b"c",
                                                version=12), ignore=PRODUCE_IGNORE)
            s.record(f"v{v} commit", end(s, txn, pid, r["producer_epoch"], True))
            wait_idle(s, txn)
    s.record("fetch committed", fetch_committed(s, t), ignore=FETCH_IGNORE)



@case("txn.init_producer_id_stale_epoch_ongoing")
def init_producer_id_stale_epoch_ongoing(s: Session) -> None:
    """KIP-360 InitProducerId with a stale epoch while the current producer's transaction is
    open: PRODUCER_FENCED on both; Kafka aborts the open transaction on the way, Exactly keeps
    it (DESIGN invariant 6), so the current producer commits it."""
    t = s.name("t")
    txn = s.name("txn")
    create_topic(s, t)
    pid, stale = begin(s, txn, version=4)
    current = init_pid(s, txn, version=4)["producer_epoch"]
    record_add(s, "add", add_v3(s, txn, pid, current, {t: [0]}))
    s.record("produce", send(s, t, txn, pid, current, 0, b"a"), ignore=PRODUCE_IGNORE)
    s.record("stale recover", init_pid(s, txn, version=4, producer_id=pid,
                                       producer_epoch=stale))
    s.record("describe", describe(s, txn), ignore=DESCRIBE_IGNORE,
             unordered=DESCRIBE_UNORDERED)
    s.record("current commit", end(s, txn, pid, current, True, version=4))


DIVERGENCES: list[Divergence] = [
    Divergence("txn.init_producer_id_stale_epoch_ongoing", "describe", "*",
               "DESIGN.md invariant 6: a fenced producer (older epoch) never aborts a newer "
               "transaction. Kafka 4.4 aborts the open transaction (epoch + 1) before it finds "
               "the KIP-360 InitProducerId's epoch stale; Exactly answers PRODUCER_FENCED alone "
               "(TransactionCoordinator.init_producer_id) and the transaction stays Ongoing."),
    Divergence("txn.init_producer_id_stale_epoch_ongoing", "current commit", "error_code",
               "DESIGN.md invariant 6, as above: the current producer's transaction was not "
               "aborted by the stale one, so its commit succeeds where Kafka 4.4 fences it."),
    Divergence("txn.init_producer_id_v6", "v6 unadvertised", "<answer>",
               "KIP-939: Exactly serves InitProducerId v6 (Enable2Pc, KeepPreparedTxn); Kafka 4.4 "
               "serves it only with unstable.api.versions.enable=true and closes the connection "
               "otherwise (txn.init_producer_id_v6_unstable compares the answers)."),
    Divergence("txn.init_producer_id_v6_unstable", "keep prepared", "*",
               "KIP-939's KeepPreparedTxn: Exactly keeps a prepared transaction across a client "
               "restart; Kafka 4.4 has not shipped it and answers UNSUPPORTED_VERSION."),
    Divergence("txn.init_producer_id_v6_unstable", "describe 2pc",
               "transaction_states*.transaction_timeout",
               "KIP-939: 'for transactions with 2PC enabled the TransactionTimeoutMs would be set "
               "to -1', as Exactly stores and describes it; Kafka 4.4's unreleased 2PC stores "
               "Integer.MAX_VALUE."),
]
