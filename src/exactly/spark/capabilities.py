"""What the broker offers the exactly-once streaming sink, found out on the driver before any
task runs, so that a query the broker cannot serve fails at its start with an error that names
what is missing and what to do.

Each way of committing needs its own:

- `transactionResume=keep-prepared` (KIP-939): InitProducerId v6, with its Enable2Pc and
  KeepPreparedTxn fields, and a broker that grants Enable2Pc. Apache Kafka up to 4.x (and
  librdkafka's mock cluster) offers InitProducerId below v6; a KIP-939 broker with
  `transaction.two.phase.commit.enable=false` answers Enable2Pc with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (as it does when the principal lacks the
  TWO_PHASE_COMMIT ACL on the transactional id).
- `transactionResume=producer-id` (Flink's KafkaSink before FLIP-319): ordinary transactions,
  a transaction timeout the broker accepts (at most its `transaction.max.timeout.ms`), and
  DescribeTransactions and ListTransactions (KIP-664, Kafka 3.0+): after a crash they tell a
  decided transaction that is still open from one already ended.

The checks are made by doing, with the client's own calls: `TransactionSession.initialize`
(which checks InitProducerId v6 before it sends anything) on a transactional id of the query's
own that never holds a transaction, `<prefix>-probe`, so nothing is fenced or aborted; then the
admin calls. A check that passed is remembered for the life of the process (Spark runs the
driver's side of a data source in Python workers it reuses): one round of requests per query
and worker, not one per micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping

from exactly.client import TransactionError, UnsupportedVersionError
from exactly.protocol.errors import ErrorCode
from exactly.spark.clients import PROCESS, ClientFactory
from exactly.spark.options import AT_LEAST_ONCE, KEEP_PREPARED, PRODUCER_ID, OptionError

__all__ = ["check_keep_prepared", "check_producer_id", "probe_id"]

_passed: set[tuple[object, ...]] = set()


def probe_id(prefix: str) -> str:
    """The transactional id the checks use: the query's own (ACLs on its prefix cover it), and
    outside `<prefix>-<n>`, so that no task and no leftover handling ever touches it."""
    return f"{prefix}-probe"


def _key(client: Mapping[str, str], *rest: object) -> tuple[object, ...]:
    return (tuple(sorted(client.items())), *rest)


def check_keep_prepared(client: Mapping[str, str], prefix: str,
                        clients: ClientFactory = PROCESS) -> None:
    """Raise OptionError unless the broker offers KIP-939 two-phase commit with KeepPreparedTxn
    (`clients` makes the clients the check needs)."""
    key = _key(client, prefix, KEEP_PREPARED)
    if key in _passed:
        return
    config = {**client, "transactional.id": probe_id(prefix),
              "transaction.two.phase.commit.enable": "true"}
    where = f"the broker at {client.get('bootstrap.servers')}"
    try:
        with clients.session(config) as session:
            session.initialize(keep_prepared_txn=True)
    except UnsupportedVersionError as exc:
        problem = (f"{where} lacks InitProducerId v6, which carries Enable2Pc and "
                   f"KeepPreparedTxn ({exc})")
    except TransactionError as exc:
        if exc.code != ErrorCode.transactional_id_authorization_failed:
            raise
        problem = (f"{where} refuses it: InitProducerId with Enable2Pc was answered "
                   "TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which a KIP-939 broker answers when its "
                   "transaction.two.phase.commit.enable is false (or when this principal lacks "
                   f"WRITE and TWO_PHASE_COMMIT on transactional id {probe_id(prefix)!r})")
    else:
        _passed.add(key)
        return
    raise OptionError(
        f"exactly-once needs two-phase commit with KeepPreparedTxn (KIP-939), and {problem}. "
        "Ways out: a broker with KIP-939 and transaction.two.phase.commit.enable=true; or option "
        f"transactionResume={PRODUCER_ID} (ordinary transactions committed by resuming their "
        "producer id and epoch, as Flink's KafkaSink does: a batch committed later than "
        "transaction.timeout.ms after its first write is lost; see exactly.spark.stream_sink); "
        f"or option deliveryGuarantee={AT_LEAST_ONCE}")


def check_producer_id(client: Mapping[str, str], prefix: str, timeout_ms: int,
                      clients: ClientFactory = PROCESS) -> None:
    """Raise OptionError unless the broker accepts transactions of `timeout_ms` and offers the
    calls that recovery by producer id needs (`clients` makes the clients the check needs)."""
    key = _key(client, prefix, PRODUCER_ID, timeout_ms)
    if key in _passed:
        return
    config = {**client, "transactional.id": probe_id(prefix),
              "transaction.timeout.ms": str(timeout_ms)}
    try:
        with clients.session(config) as session:
            session.initialize()
            producer_id = session.producer_id
    except TransactionError as exc:
        if exc.code != ErrorCode.invalid_transaction_timeout:
            raise
        raise OptionError(
            f"the broker at {client.get('bootstrap.servers')} refuses transaction.timeout.ms="
            f"{timeout_ms} (it is above the broker's transaction.max.timeout.ms): set option "
            "kafka.transaction.timeout.ms to at most that; with "
            f"transactionResume={PRODUCER_ID} it bounds the time from a task's first write to "
            "the commit of its batch") from None
    try:
        with clients.admin(client) as admin:
            admin.describe_transactions([probe_id(prefix)])
            admin.list_transactions(producer_ids=[producer_id])
    except UnsupportedVersionError as exc:
        raise OptionError(
            f"option transactionResume={PRODUCER_ID} needs DescribeTransactions and "
            "ListTransactions (KIP-664, Kafka 3.0+) to recover after a crash, and the broker at "
            f"{client.get('bootstrap.servers')} lacks them ({exc}); set option "
            f"deliveryGuarantee={AT_LEAST_ONCE}") from None
    _passed.add(key)
