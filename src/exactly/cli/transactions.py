"""`exactly transactions ...`: list, describe, find hanging, abort and force-terminate
transactions, and describe a partition's producers, as Kafka's kafka-transactions.sh does
(KIP-664, KIP-939). Uses Exactly's own Admin client, so it works against Exactly and against
Apache Kafka."""

from __future__ import annotations

import time
from typing import Any

import click

from exactly.cli.common import (
    admin_call,
    connection_options,
    fail,
    open_admin,
    print_table,
)

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default


def _admin(bootstrap: str, command_config: str | None, timeout_ms: int) -> Any:
    return open_admin(bootstrap, command_config, "exactly-transactions", timeout_ms)


@click.group()
def transactions() -> None:
    """List, describe and end transactions (as kafka-transactions.sh)."""


@transactions.command("list")
@connection_options
@click.option(
    "--running-longer-than",
    "running_longer_than_ms",
    type=click.IntRange(min=0),
    default=None,
    metavar="MS",
    help="Only transactions open for longer than this (ListTransactions v1+, KIP-994).",
)
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    help="Only transactions in this state (Ongoing, PrepareCommit, CompleteAbort, ...). "
    "Repeatable.",
)
@click.option(
    "--producer-id",
    "producer_ids",
    multiple=True,
    type=click.IntRange(min=0),
    metavar="ID",
    help="Only transactions of this producer id. Repeatable.",
)
def list_(
    bootstrap: str,
    command_config: str | None, timeout_ms: int,
    running_longer_than_ms: int | None,
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
) -> None:
    """List the transactions the coordinators know."""
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        listing = admin_call("list transactions", lambda: admin.list_transactions(
            states=list(states) or None, producer_ids=list(producer_ids) or None,
            running_longer_than_ms=running_longer_than_ms))
    print_table(("TransactionalId", "ProducerId", "TransactionState"),
                ((t.transactional_id, t.producer_id, t.state) for t in listing))


@transactions.command()
@connection_options
@click.option("--transactional-id", required=True, metavar="ID", help="The transaction to describe.")
def describe(bootstrap: str, command_config: str | None, timeout_ms: int,
             transactional_id: str) -> None:
    """Describe one transactional id's current transaction, as its coordinator knows it."""
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        descs = admin_call(f"describe transaction {transactional_id!r}",
                           lambda: admin.describe_transactions([transactional_id]))
    txn = descs[transactional_id]
    now = int(time.time() * 1000)
    open_ = txn.start_time_ms >= 0
    print_table(
        ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
         "TopicPartitions"),
        [(txn.coordinator_id, transactional_id, txn.producer_id, txn.producer_epoch, txn.state,
          txn.timeout_ms, txn.start_time_ms if open_ else None,
          max(now - txn.start_time_ms, 0) if open_ else None,
          ",".join(f"{t}-{p}" for t, p in txn.partitions) or None)])


@transactions.command("find-hanging")
@connection_options
@click.option("--topic", required=True, help="The topic whose partitions to look at.")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Only this partition (default: all of the topic's).")
@click.option(
    "--max-transaction-timeout",
    "max_timeout_ms",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    show_default=True,
    metavar="MS",
    help="The brokers' transaction.max.timeout.ms: a transaction open longer than this is "
    "reported even if its coordinator knows it (a 2PC transaction, which never times out).",
)
def find_hanging(bootstrap: str, command_config: str | None, timeout_ms: int, topic: str,
                 partition: int | None, max_timeout_ms: int) -> None:
    """Find open transactions in the partitions that no coordinator will end: unknown to their
    coordinator as an open transaction on that partition, or open longer than the maximum
    transaction timeout. End one with `exactly transactions abort`."""
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        if partition is None:
            described = admin_call(f"describe topic {topic!r}",
                                   lambda: admin.describe_topics([topic]))
            partitions = [(topic, p.partition) for p in described[topic].partitions]
        else:
            partitions = [(topic, partition)]
        producers = admin_call("describe producers", lambda: admin.describe_producers(partitions))
        now = int(time.time() * 1000)
        rows = []
        for tp in sorted(producers):
            for p in producers[tp]:
                if p.current_txn_start_offset < 0:
                    continue
                known_since = _coordinator_start(admin, p.producer_id, tp)
                if known_since is None:
                    reason = "unknown to the coordinator"
                    duration = now - p.last_timestamp if p.last_timestamp >= 0 else None
                else:
                    duration = now - known_since if known_since >= 0 else None
                    if duration is None or duration <= max_timeout_ms:
                        continue
                    reason = "open longer than the max transaction timeout"
                rows.append((tp[0], tp[1], p.producer_id, p.producer_epoch, p.coordinator_epoch,
                             p.current_txn_start_offset, p.last_timestamp, duration, reason))
    if not rows:
        click.echo("No hanging transactions found.")
        return
    print_table(("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                 "StartOffset", "LastTimestamp", "DurationMs", "Reason"), rows)


def _coordinator_start(admin: Any, producer_id: int, tp: tuple[str, int]) -> int | None:
    """The start time of the open transaction of `producer_id` on `tp` as its coordinator knows
    it (-1 if it has none); None if no coordinator has that producer's transaction open there."""
    from exactly.client import KafkaError

    listing = admin_call(f"list transactions of producer {producer_id}",
                         lambda: admin.list_transactions(producer_ids=[producer_id]))
    for t in listing:
        try:
            txn = admin.describe_transactions([t.transactional_id])[t.transactional_id]
        except KafkaError:
            continue  # gone meanwhile
        if _is_open(txn.state) and tp in txn.partitions:
            return txn.start_time_ms
    return None


def _is_open(state_name: str) -> bool:
    """Whether a transaction in this state (Kafka's name for it) still holds its partitions."""
    from exactly.client.types import TransactionState

    state = TransactionState.parse(state_name)
    return state is not None and state.is_open


@transactions.command()
@connection_options
@click.option("--topic", required=True, help="The partition's topic.")
@click.option("--partition", required=True, type=click.IntRange(min=0),
              help="The partition whose hanging transaction to abort.")
@click.option("--producer-id", type=click.IntRange(min=0), default=None,
              help="The hanging transaction's producer id (from find-hanging).")
@click.option("--producer-epoch", type=click.IntRange(min=0), default=None,
              help="The hanging transaction's producer epoch (from find-hanging).")
@click.option("--coordinator-epoch", type=click.IntRange(min=-1), default=None,
              help="-1 when the partition does not know it (as find-hanging shows).")
@click.option("--start-offset", type=click.IntRange(min=0), default=None,
              help="Instead of the three above: the transaction's first offset in the "
              "partition; the rest is looked up.")
def abort(bootstrap: str, command_config: str | None, timeout_ms: int, topic: str, partition: int,
          producer_id: int | None, producer_epoch: int | None, coordinator_epoch: int | None,
          start_offset: int | None) -> None:
    """Abort a hanging transaction on one partition by writing its abort marker there. The
    partition's producer state is checked first: a producer with no transaction open there (or
    another epoch) gets no marker."""
    ids = (producer_id, producer_epoch, coordinator_epoch)
    if start_offset is None and None in ids:
        raise click.UsageError("give --producer-id, --producer-epoch and --coordinator-epoch, "
                               "or --start-offset")
    where = f"{topic}-{partition}"
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        producers = admin_call(f"describe producers of {where}",
                               lambda: admin.describe_producers([(topic, partition)]))
        open_here = [p for p in producers[(topic, partition)] if p.current_txn_start_offset >= 0]
        if start_offset is not None:
            found = [p for p in open_here if p.current_txn_start_offset == start_offset]
            if not found:
                fail(f"no open transaction starts at offset {start_offset} of {where}")
            producer_id, producer_epoch, coordinator_epoch = (
                found[0].producer_id, found[0].producer_epoch, found[0].coordinator_epoch)
        else:
            found = [p for p in open_here if p.producer_id == producer_id]
            if not found:
                fail(f"producer {producer_id} has no open transaction on {where}: nothing to "
                     "abort (see `exactly transactions find-hanging`)")
            if found[0].producer_epoch != producer_epoch:
                fail(f"the open transaction of producer {producer_id} on {where} has epoch "
                     f"{found[0].producer_epoch}, not {producer_epoch}: nothing aborted")
        assert producer_id is not None and producer_epoch is not None
        assert coordinator_epoch is not None
        admin_call(f"abort transaction of producer {producer_id} on {where}",
                   lambda: admin.abort_transaction(topic, partition, producer_id, producer_epoch,
                                                   coordinator_epoch))
    click.echo(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) "
               f"on {where}.")


@transactions.command("force-terminate")
@connection_options
@click.option("--transactional-id", required=True, metavar="ID",
              help="The transactional id whose open (or prepared 2PC) transaction to abort.")
def force_terminate(bootstrap: str, command_config: str | None, timeout_ms: int,
                    transactional_id: str) -> None:
    """Abort a transactional id's open transaction, a prepared two-phase-commit one included
    (KIP-939), and fence its producer. The application must initialize again. An id its
    coordinator does not know is refused (terminating it would create it)."""
    from exactly.client import KafkaError
    from exactly.protocol.errors import ErrorCode

    with _admin(bootstrap, command_config, timeout_ms) as admin:
        try:
            admin.describe_transactions([transactional_id])
        except KafkaError as exc:
            if exc.code == ErrorCode.transactional_id_not_found:
                fail(f"transactional id {transactional_id!r} does not exist: nothing to "
                     "terminate (see `exactly transactions list`)")
        except (OSError, TimeoutError):
            pass  # said by the call below, which meets the same broker
        admin_call(f"force terminate {transactional_id!r}",
                   lambda: admin.force_terminate_transaction(transactional_id))
    click.echo(f"Terminated the transaction of {transactional_id!r}.")


@transactions.command("describe-producers")
@connection_options
@click.option("--topic", required=True, help="The partition's topic.")
@click.option("--partition", required=True, type=click.IntRange(min=0),
              help="The partition whose producers to describe.")
def describe_producers(bootstrap: str, command_config: str | None, timeout_ms: int, topic: str,
                       partition: int) -> None:
    """The producers the partition's leader keeps state for (DescribeProducers, KIP-664): epoch,
    last sequence and timestamp, and where an open transaction starts (None: no transaction
    open)."""
    where = f"{topic}-{partition}"
    with _admin(bootstrap, command_config, timeout_ms) as admin:
        producers = admin_call(f"describe producers of {where}",
                               lambda: admin.describe_producers([(topic, partition)]))
    print_table(("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                 "LastTimestamp", "CurrentTransactionStartOffset"),
                ((p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
                  p.last_timestamp,
                  p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None")
                 for p in producers[(topic, partition)]))
