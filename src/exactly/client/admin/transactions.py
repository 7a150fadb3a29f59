"""The admin client's transaction tools (KIP-664): list and describe transactions, describe a
partition's producers, abort a hanging transaction by writing its marker, and force-terminate a
transactional id's open (or prepared 2PC) transaction (KIP-939). Transactions are asked of
their coordinators (found with FindCoordinator, and again when they move); producers and markers
of the partitions' leaders.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from exactly.client.admin.base import AdminBase, item_error, raise_failures
from exactly.client.cluster import COORDINATOR_TRANSACTION, make_request, request_module
from exactly.client.connection import BrokerConnection
from exactly.client.errors import (
    COORDINATOR_UNSETTLED,
    KafkaConnectionError,
    KafkaError,
    UnsupportedVersionError,
    Verdict,
    classify,
)
from exactly.client.requests import Backoff, ClusterCoordinator, Decision, Retry, call
from exactly.client.types import (
    ProducerState,
    TransactionDescription,
    TransactionListing,
    milliseconds,
)
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.structs import TopicPartition


class TransactionsAdmin(AdminBase):
    """Kafka's transaction tools (KIP-664, KIP-939)."""

    async def list_transactions(self, *, states: Iterable[str] | None = None,
                                producer_ids: Iterable[int] | None = None,
                                running_longer_than_ms: int | None = None) -> list[TransactionListing]:
        """Transactions known to every broker's coordinator, filtered as asked."""
        out: list[TransactionListing] = []
        for conn in await self._brokers():
            if running_longer_than_ms is not None and conn.version(ApiKey.LIST_TRANSACTIONS) < 1:
                raise UnsupportedVersionError(
                    f"broker {conn.host}:{conn.port} speaks ListTransactions v"
                    f"{conn.broker_max_version(ApiKey.LIST_TRANSACTIONS)}; running_longer_than_ms "
                    "needs v1 (KIP-994, Kafka 3.8+): list without it and filter on describe_transactions")
            response = await conn.send(make_request(
                conn, ApiKey.LIST_TRANSACTIONS, state_filters=tuple(states or ()),
                producer_id_filters=tuple(producer_ids or ()),
                duration_filter=-1 if running_longer_than_ms is None else running_longer_than_ms))
            if (e := item_error(f"list transactions on broker {conn.node_id}", response.error_code)):
                raise e
            out.extend(TransactionListing(s.transactional_id, s.producer_id, s.transaction_state)
                       for s in response.transaction_states)
        return sorted(out, key=lambda t: t.transactional_id)

    async def describe_transactions(self, transactional_ids: Iterable[str]
                                    ) -> dict[str, TransactionDescription]:
        """Each id is asked of its transaction coordinator. An id whose coordinator moved, is
        loading, or is on a node that cannot be reached is looked up again, up to
        request.timeout.ms."""
        ids = list(dict.fromkeys(transactional_ids))
        out: dict[str, TransactionDescription] = {}
        failures: dict[str, KafkaError] = {}
        retry = Retry(Backoff(0.1, linear=True), timeout=self.config["request.timeout.ms"] / 1000)
        while True:
            by_node: dict[int, tuple[BrokerConnection, list[str]]] = {}
            again: dict[str, KafkaError] = {}
            for txn_id in ids:
                try:
                    conn = await self.cluster.coordinator(COORDINATOR_TRANSACTION, txn_id)
                except KafkaConnectionError as exc:
                    again[txn_id] = exc
                    continue
                by_node.setdefault(id(conn), (conn, []))[1].append(txn_id)
            for conn, wanted in by_node.values():
                try:
                    response = await conn.send(make_request(conn, ApiKey.DESCRIBE_TRANSACTIONS,
                                                            transactional_ids=tuple(wanted)))
                except KafkaConnectionError as exc:
                    again.update(dict.fromkeys(wanted, exc))
                    continue
                for s in response.transaction_states:
                    error = item_error(f"describe transaction {s.transactional_id!r}",
                                       s.error_code)
                    if Verdict.REDISCOVER in classify(s.error_code, moved=COORDINATOR_UNSETTLED):
                        assert error is not None
                        again[s.transactional_id] = error
                    elif error is not None:
                        failures[s.transactional_id] = error
                    else:
                        out[s.transactional_id] = TransactionDescription(
                            s.transaction_state, s.producer_id, s.producer_epoch,
                            milliseconds(s.transaction_timeout),
                            milliseconds(s.transaction_start_time),
                            sorted(TopicPartition(t.topic, p)
                                   for t in s.topics for p in t.partitions),
                            -1 if conn.node_id is None else conn.node_id)
            if not again:
                break
            for txn_id in again:
                self.cluster.forget_coordinator(COORDINATOR_TRANSACTION, txn_id)
            if not await retry.wait():
                failures.update(again)
                break
            ids = list(again)
        raise_failures(failures)
        return out

    async def describe_producers(self, partitions: Iterable[tuple[str, int]]
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers of each partition, as its leader's log knows them."""
        out: dict[TopicPartition, list[ProducerState]] = {}
        leaders, failures = await self._by_leader(partitions, "describe producers of")
        for conn, topics in leaders:
            module = request_module(conn, ApiKey.DESCRIBE_PRODUCERS)
            response = await conn.send(make_request(conn, ApiKey.DESCRIBE_PRODUCERS, topics=tuple(
                build(module.TopicRequest, name=t, partition_indexes=tuple(ps))
                for t, ps in topics.items())))
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if (e := item_error(f"describe producers of {t.name}-{p.partition_index}",
                                         p.error_code, p.error_message)) is not None:
                        failures[tp] = e
                        continue
                    out[tp] = [ProducerState(s.producer_id, s.producer_epoch, s.last_sequence,
                                             s.last_timestamp, s.coordinator_epoch,
                                             s.current_txn_start_offset)
                               for s in p.active_producers]
        raise_failures(failures)
        return out

    async def abort_transaction(self, topic: str, partition: int, producer_id: int,
                                producer_epoch: int, coordinator_epoch: int) -> None:
        """End a hanging transaction on one partition: write its ABORT marker there (sent to the
        partition's leader, as Kafka's Admin.abortTransaction does). Take the producer id, epoch
        and coordinator epoch from describe_producers."""
        what = f"abort transaction of producer {producer_id} on"
        leaders, failures = await self._by_leader([(topic, partition)], what)
        raise_failures(failures)
        ((conn, _),) = leaders
        module = request_module(conn, ApiKey.WRITE_TXN_MARKERS)
        marker = build(module.WritableTxnMarker, producer_id=producer_id,
                       producer_epoch=producer_epoch, transaction_result=False,
                       coordinator_epoch=coordinator_epoch,
                       topics=(build(module.WritableTxnMarkerTopic, name=topic,
                                     partition_indexes=(partition,)),))
        response = await conn.send(make_request(conn, ApiKey.WRITE_TXN_MARKERS, markers=(marker,)))
        failures = {TopicPartition(t.name, p.partition_index): e
                    for r in response.markers for t in r.topics for p in t.partitions
                    if (e := item_error(f"{what} {t.name}-{p.partition_index}", p.error_code))}
        raise_failures(failures)

    async def force_terminate_transaction(self, transactional_id: str) -> None:
        """Abort whatever transaction `transactional_id` has open, a prepared 2PC one included
        (KIP-939 forceTerminateTransaction), and fence its producer: InitProducerId with
        keepPreparedTxn=false at the id's transaction coordinator, as Kafka does. For a
        well-formed transaction that no client will end; a hanging one (unknown to the
        coordinator) needs abort_transaction. The application must initialize again.

        TransactionTimeoutMs is 1: the identity this call gets is discarded, so no transaction
        ever runs under it, and 1 ms is valid under any transaction.max.timeout.ms."""
        if not transactional_id:
            raise ValueError("force_terminate_transaction needs a transactional id")
        timeout_ms = self.config["request.timeout.ms"]

        def decide(response: Any) -> Decision:
            # Only CONCURRENT_TRANSACTIONS (markers still being written) is retried, and a
            # coordinator that moves or loads is found again; any other code fails the call.
            code = response.error_code
            return Decision(classify(code, moved=COORDINATOR_UNSETTLED,
                                     retry={ErrorCode.concurrent_transactions},
                                     otherwise=Verdict.FAIL), code)

        await call(
            ClusterCoordinator(self.cluster, COORDINATOR_TRANSACTION, transactional_id),
            lambda conn: make_request(
                conn, ApiKey.INIT_PRODUCER_ID, transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(milliseconds=1), producer_id=-1,
                producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False),
            decide, Retry(Backoff(max(self.config["retry.backoff.ms"], 1) / 1000),
                          timeout=timeout_ms / 1000),
            fail=lambda response, code: KafkaError(
                f"force terminate transaction {transactional_id!r}: {error_name(code)}",
                int(code)),
            give_up=lambda response, code: KafkaError(
                f"force terminate transaction {transactional_id!r}: still {error_name(code)} "
                f"after request.timeout.ms={timeout_ms}; call again to retry", int(code)))

