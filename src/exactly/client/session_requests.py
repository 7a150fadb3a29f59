"""The TransactionSession's requests, built and read here, as aiokafka's transaction handlers
(InitPIDHandler, AddPartitionsToTxnHandler, ...) each build one request and read its answer:
to the transaction coordinator (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnHeartbeat, DescribeTransactions), to the group coordinator (TxnOffsetCommit), and to the
share-partitions' leaders (TxnShareAcknowledge, KIP-1289). Each is built for the version the
connection negotiated, from the session's identity (`Identity`); each reader gives the error
code to act on.

`CoordinatorCalls`, a collaborator the session holds by name, sends them to the coordinators
through the client's one request path (requests.call): retriable errors are retried with
backoff within request.timeout.ms, a coordinator that moved (or a connection lost) is found
again, and a final error is raised as the session exception it stands for (session_state),
after the session's state machine has been told.

Which protocol a coordinator speaks is read off its connection here too: transaction version 2
(KIP-890: EndTxn v5 and Produce v12 with `transaction.version` >= 2 finalized) and KIP-1309's
heartbeats (TxnHeartbeat, InitProducerId v7), both drafts of versions built as they are rather
than negotiated (client/versions.py negotiates everything else).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from exactly.client.cluster import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    Cluster,
    make_request,
    request_module,
)
from exactly.client.config import ClientConfig
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    FENCED,
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortableError,
    TransactionError,
    UnsupportedVersionError,
    Verdict,
)
from exactly.client.requests import Backoff, ClusterCoordinator, Decision, Retry, call
from exactly.client.session_state import Kind, classify, error_for, first_error
from exactly.client.types import ShareAcknowledgements, ShareGroupMetadata, ack_batches, by_topic
from exactly.protocol import fast_requests
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.drafts import txn_share_acknowledge as _tsa
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition

# (topic, partition) -> the offset to commit, and its metadata
PendingOffsets = dict[TopicPartition, tuple[int, str | None]]
ShareTargets = list[tuple[BrokerConnection, dict[TopicPartition, Any]]]
# The session's kinds of error code as the request path's verdicts: the others are final.
_VERDICTS = {Kind.NONE: Verdict.DONE, Kind.RETRY: Verdict.RETRY,
             Kind.REDISCOVER: Verdict.RETRY | Verdict.REDISCOVER}


class Identity(NamedTuple):
    """Whom a transaction request speaks for: the transactional id, and the producer id and
    epoch the session holds."""

    transactional_id: str
    producer_id: int
    epoch: int


class CoordinatorCalls:
    """The session's requests to its transaction coordinator (or a group's), sent until they
    succeed. `identity()` and `resumed()` read the session's state as each answer is judged;
    `fail(error)` tells its state machine of a final error before it is raised. `tv2`: the
    coordinator speaks transaction version 2, known once it was reached."""

    def __init__(self, cluster: Cluster, config: ClientConfig, *,
                 identity: Callable[[], Identity], resumed: Callable[[], bool],
                 fail: Callable[[KafkaError], None]) -> None:
        self.cluster, self.config = cluster, config
        self.tv2: bool | None = None
        self._identity, self._resumed, self._fail = identity, resumed, fail
        self.transaction = ClusterCoordinator(cluster, COORDINATOR_TRANSACTION,
                                              identity().transactional_id, found=self._found)

    def _found(self, conn: BrokerConnection) -> None:
        if self.tv2 is None:
            self.tv2 = offers_transaction_v2(conn)

    async def reach(self) -> BrokerConnection:
        """The connection to the transaction coordinator, found again while its node cannot be
        reached, up to request.timeout.ms: on a cluster, FindCoordinator names a node that died
        until its partitions of __transaction_state have new leaders."""
        timeout_ms = self.config["request.timeout.ms"]
        retry = Retry(Backoff(max(self.config["retry.backoff.ms"], 1) / 1000),
                      timeout=timeout_ms / 1000)
        while True:
            try:
                return await self.transaction.connection()
            except KafkaConnectionError as exc:
                await self.transaction.rediscover()
                if not await retry.wait():
                    raise KafkaTimeoutError(
                        f"transactional id {self._identity().transactional_id!r}: its "
                        f"coordinator stayed unreachable for request.timeout.ms={timeout_ms} "
                        f"({exc}); call again to retry") from exc

    async def call(self, api: str, request: Callable[[BrokerConnection], Any],
                   error_of: Callable[[Any], int] = lambda r: int(r.error_code), *,
                   group: str | None = None, accept: frozenset[int] = frozenset()) -> Any:
        """Send a request to the transaction (or `group`'s) coordinator until it succeeds,
        retrying retriable errors with backoff until request.timeout.ms; raise a final error
        as the session exception it stands for. A code in `accept` is returned to the caller
        with the response."""
        timeout_ms = self.config["request.timeout.ms"]
        txn_id = self._identity().transactional_id
        coordinator = (self.transaction if group is None
                       else ClusterCoordinator(self.cluster, COORDINATOR_GROUP, group))
        retry = Retry(Backoff(max(self.config["retry.backoff.ms"], 1) / 1000),
                      timeout=timeout_ms / 1000)

        def judge(code: int) -> Decision:
            kind = classify(code, api, resumed=self._resumed(), tv2=bool(self.tv2))
            return Decision(_VERDICTS.get(kind, Verdict.FAIL), code)

        def decide(response: Any) -> Decision:
            code = error_of(response)
            return Decision(Verdict.DONE, code) if code in accept else judge(code)

        def on_error(exc: KafkaError) -> Decision:
            if isinstance(exc, KafkaTimeoutError):
                raise KafkaTimeoutError(f"transactional id {txn_id!r}: {api} got no answer "
                                        f"within request.timeout.ms={timeout_ms}; call again to "
                                        "retry") from None
            if isinstance(exc, KafkaConnectionError):
                return Decision(Verdict.RETRY | Verdict.REDISCOVER, -1)
            if isinstance(exc, AuthenticationError):  # TLS/SASL refused: retrying cannot help
                self._fail(exc)
                raise exc
            return judge(exc.code)  # FindCoordinator answered an error

        def fail(answer: Any, code: int) -> TransactionError:
            who = self._identity()
            error = error_for(code, api, transactional_id=txn_id, producer_id=who.producer_id,
                              epoch=who.epoch, resumed=self._resumed(), tv2=bool(self.tv2))
            self._fail(error)
            return error

        def give_up(answer: Any, code: int) -> KafkaTimeoutError:
            last = str(answer) if isinstance(answer, KafkaError) else ""
            return KafkaTimeoutError(
                f"transactional id {txn_id!r}: {api} still failing ({last or error_name(code)}) "
                f"after request.timeout.ms={timeout_ms}; call again to retry", code)

        _conn, response = await call(coordinator, request, decide, retry, fail=fail,
                                     give_up=give_up, on_error=on_error, bound_send=True)
        return response


def offers_transaction_v2(conn: BrokerConnection) -> bool:
    return (conn.finalized_features.get("transaction.version", 0) >= 2
            and conn.broker_max_version(ApiKey.END_TXN) >= 5
            and conn.broker_max_version(ApiKey.PRODUCE) >= 12)


def offers_heartbeats(conn: BrokerConnection) -> bool:
    """The coordinator takes TxnHeartbeat and InitProducerId v7 (KIP-1309)."""
    return (conn.broker_max_version(ApiKey.TXN_HEARTBEAT) >= 0
            and conn.broker_max_version(ApiKey.INIT_PRODUCER_ID) >= 7)


def init_producer_id(conn: BrokerConnection, transactional_id: str, timeout_ms: int, *,
                     two_pc: bool, keep_prepared_txn: bool, session_ms: int | None) -> Any:
    """InitProducerId. `session_ms`: KIP-1309's draft v7 announcing the session timeout, only for
    a session that asked for heartbeats, beyond the versions negotiated for everything else."""
    fields: dict[str, Any] = {
        "transactional_id": transactional_id,
        "transaction_timeout": datetime.timedelta(milliseconds=timeout_ms),
        "producer_id": -1, "producer_epoch": -1, "enable2_pc": two_pc,
        "keep_prepared_txn": keep_prepared_txn}
    if session_ms is not None:
        return build(request_class(ApiKey.INIT_PRODUCER_ID, 7), **fields,
                     transaction_session_timeout_ms=session_ms)
    return make_request(conn, ApiKey.INIT_PRODUCER_ID, **fields)


def add_partitions(conn: BrokerConnection, who: Identity, pending: set[TopicPartition]) -> Any:
    """AddPartitionsToTxn (version 1) for the partitions still pending."""
    return fast_requests.add_partitions_to_txn(
        conn.version(ApiKey.ADD_PARTITIONS_TO_TXN), who.transactional_id, who.producer_id,
        who.epoch, list(by_topic(sorted(pending)).items()))


def add_partitions_error(response: Any, pending: set[TopicPartition], resumed: bool) -> int:
    """The code to act on; the partitions added are dropped from `pending`."""
    return first_error({(t.name, p.partition_index): p.partition_error_code
                        for t in response.results_by_topic_v3_and_below
                        for p in t.results_by_partition}, pending, "AddPartitionsToTxn", resumed)


def add_offsets(conn: BrokerConnection, who: Identity, group_id: str) -> Any:
    """AddOffsetsToTxn: the group's offsets (or, KIP-1289, its acknowledgements) join the
    transaction."""
    return make_request(conn, ApiKey.ADD_OFFSETS_TO_TXN, transactional_id=who.transactional_id,
                        producer_id=who.producer_id, producer_epoch=who.epoch, group_id=group_id)


def txn_offset_commit(conn: BrokerConnection, who: Identity, pending: PendingOffsets, group: Any,
                      max_version: int | None) -> Any:
    """TxnOffsetCommit of the offsets still pending; `group` a ConsumerGroupMetadata (or what
    has its fields: only group_id is needed)."""
    module = request_module(conn, ApiKey.TXN_OFFSET_COMMIT, max_version=max_version)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), (offset, metadata) in sorted(pending.items()):
        topics.setdefault(topic, []).append(build(
            module.TxnOffsetCommitRequestPartition, partition_index=partition,
            committed_offset=offset, committed_leader_epoch=-1, committed_metadata=metadata))
    return make_request(
        conn, ApiKey.TXN_OFFSET_COMMIT, max_version=max_version,
        transactional_id=who.transactional_id, group_id=group.group_id,
        producer_id=who.producer_id, producer_epoch=who.epoch,
        generation_id=getattr(group, "generation_id", -1),
        member_id=getattr(group, "member_id", "") or "",
        group_instance_id=getattr(group, "group_instance_id", None),
        topics=tuple(module.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                     for t, ps in topics.items()))


def txn_offset_commit_error(response: Any, pending: PendingOffsets, resumed: bool) -> int:
    """The code to act on; the offsets committed are dropped from `pending`."""
    return first_error({(t.name, p.partition_index): p.error_code for t in response.topics
                        for p in t.partitions}, pending, "TxnOffsetCommit", resumed)


def end_txn(conn: BrokerConnection, who: Identity, commit: bool, max_version: int | None) -> Any:
    return fast_requests.end_txn(conn.version(ApiKey.END_TXN, max_version=max_version),
                                 who.transactional_id, who.producer_id, who.epoch, commit)


def txn_heartbeat(who: Identity) -> Any:
    """TxnHeartbeat v0 (KIP-1309, a draft): built as it is, not negotiated."""
    return build(request_class(ApiKey.TXN_HEARTBEAT, 0), transactional_id=who.transactional_id,
                 producer_id=who.producer_id, producer_epoch=who.epoch)


def describe_transaction(conn: BrokerConnection, transactional_id: str) -> Any:
    return make_request(conn, ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=(transactional_id,))


# -- KIP-1289: share acknowledgements in a transaction ----------------------------------------

async def share_ack_targets(cluster: Cluster, acknowledgments: ShareAcknowledgements
                            ) -> ShareTargets:
    """The leaders of the acknowledged partitions, each with its part; UnsupportedVersionError
    if one of them does not offer TxnShareAcknowledge."""
    by_node: dict[int, dict[TopicPartition, Any]] = {}
    for tp, by_offset in acknowledgments.acks.items():
        md = await cluster.topic(tp.topic, allow_auto_create=False)
        by_node.setdefault(md.partitions.get(tp.partition, -1), {})[tp] = by_offset
    out = []
    for node_id, acks in by_node.items():
        if node_id < 0:
            raise KafkaError(f"add_share_acks_to_transaction: {sorted(acks)} have no leader; "
                             "retry", ErrorCode.leader_not_available)
        conn = await cluster.connection(node_id)
        if not conn.supports(ApiKey.TXN_SHARE_ACKNOWLEDGE):
            raise UnsupportedVersionError(
                f"broker {conn.host}:{conn.port} does not offer TxnShareAcknowledge (KIP-1289, "
                "transactional acknowledgements for share groups): share acknowledgements "
                "cannot join a transaction there. Acknowledge with the share consumer's own "
                "commit instead (at least once), or use a broker that implements KIP-1289")
        out.append((conn, acks))
    return out


async def txn_share_acknowledge(cluster: Cluster, who: Identity,
                                acknowledgments: ShareAcknowledgements,
                                acks: Mapping[TopicPartition, Mapping[int, int]]) -> Any:
    """TxnShareAcknowledge of `acks` (one leader's part), naming the member that holds them."""
    topic_ids = {tp.topic: (await cluster.topic(tp.topic)).topic_id for tp in acks}
    topics: dict[str, list[Any]] = {}
    for tp in sorted(acks):
        topics.setdefault(tp.topic, []).append(build(
            _tsa.TxnShareAcknowledgePartition, partition_index=tp.partition,
            acknowledgement_batches=tuple(
                build(_tsa.TxnShareAcknowledgeBatch, first_offset=f, last_offset=last,
                      acknowledge_types=types)
                for f, last, types in ack_batches(acks[tp]))))
    group = acknowledgments.group
    return build(
        _tsa.TxnShareAcknowledgeRequest, transactional_id=who.transactional_id,
        group_id=group.group_id, producer_id=who.producer_id, producer_epoch=who.epoch,
        member_id=group.member_id, member_epoch=group.member_epoch,
        topics=tuple(build(_tsa.TxnShareAcknowledgeTopic, topic_id=topic_ids[t],
                           partitions=tuple(ps)) for t, ps in topics.items()))


def txn_share_acknowledge_error(response: Any, who: Identity, group: ShareGroupMetadata
                                ) -> TransactionError | None:
    """The error a TxnShareAcknowledge answer stands for, None if it has none: the session's
    fencing, or a refusal of the member's records, which this transaction then cannot commit."""
    codes = [(None, response.error_code)] + [
        (p.partition_index, p.error_code) for t in response.responses for p in t.partitions]
    failed = [(p, c) for p, c in codes if c != ErrorCode.none]
    if not failed:
        return None
    partition, code = failed[0]
    kind = classify(code, "TxnShareAcknowledge")
    if kind in (Kind.FENCED, Kind.FATAL) and code in FENCED:
        return error_for(code, "TxnShareAcknowledge", transactional_id=who.transactional_id,
                         producer_id=who.producer_id, epoch=who.epoch)
    return TransactionAbortableError(
        f"TxnShareAcknowledge for group {group.group_id!r}"
        f"{'' if partition is None else f' partition {partition}'} refused: "
        f"{error_name(code)}; abort the transaction (the records are redelivered)", code)
