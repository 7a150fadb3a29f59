"""Produce admission: the order in which a Produce request is checked, appended, made durable and
answered, and the state of one request while that happens.

A Produce handler (server/handlers/produce.py) reads as admit → append → sync → answer:

    admission = await gate.admit(ctx, request)  # waits, verdicts, the turn if needed
    with admission:                             # gives the turn back on leaving
        ... append the partitions admission.topics admits, each with its header ...
    await gate.durable(admission, written)      # acks=all: durable first
    ... answer ...

`ProduceGate` (one per broker, held by the transaction driver as `produce_gate`) keeps the rules
below; an `Admission` holds what they give one request. The rules that must never break:

1. Appends keep the order the requests came in. A connection's requests are started in the
   order they were sent (server/network.py), and nothing suspends a request between its start
   and its appends unless a wait below applies: an idempotent producer's batches of a partition
   must be appended in sequence order, or the log refuses them with OUT_OF_ORDER_SEQUENCE.
2. Markers first. While the markers of a transactional id's previous transaction are being
   written (after its EndTxn was answered, server/transactions.py), a Produce of that id waits
   for them, so that it is checked against the state they leave; the id's later requests wait
   as well, and resume in order.
3. A transactional batch goes only into a partition of its producer's ongoing transaction
   (KIP-890). A Produce v12+ under transaction version 2 adds the partition itself (the
   implicit add of KIP-890 part 2); an older client's partition is verified with the
   coordinator when `transaction.partition.verification.enable` is on (part 1). A partition
   that already holds open data of the producer was verified when that data came.
4. The coordinator knows a partition before its data can be on disk. Under the fsync policy the
   `__transaction_state` records of the partitions a request adds are made durable before any
   of the request's data is appended, or a power cut could leave data of a transaction nobody
   will end (tests/system/server/test_produce_turns.py; fault point
   `produce.added_partitions.sync`). Every partition is checked first, so that one sync round covers
   all that the request adds, and the round starts at once; the event loop never blocks on it.
5. Turns. While a request waits for rule 4's round it holds its transactional id's turn
   (`ProduceTurns`), and the id's requests that come meanwhile wait for the turn in arrival
   order; other ids go on. The turn is given back as soon as the request's appends are done,
   so the id's next requests append while this one waits for rule 6. Nothing is checked again
   after the wait: only a transaction version 2 request waits so, and whatever ends its
   transaction meanwhile (an EndTxn, a timeout, a new InitProducerId) bumps the producer epoch:
   markers appended before the waiting batch fence it (the partition refuses the older epoch),
   markers appended after it end it with its transaction.
6. Durability before the answer. With acks=all the answer waits until everything the request
   wrote is durable under the flush policy (a duplicate's partition too: its original may
   still await its sync), in a round it shares with the other waiters (group commit,
   server/appends.py).

What an `Admission` holds: per partition, its batch's header, read once (the log's append takes
it, log/partition.py; it used to be read up to three times: whether any batch is transactional,
for the transactional id's authorization; KIP-890's check; the log's append), and its verdict in
the error codes of the request's version; the `__transaction_state` logs its added partitions
owe a sync; its turn, if it took one. None of it is the broker's: a request's state ends with
the request.

Verdicts as Kafka's ProduceRequest.validateRecords and ReplicaManager give them: exactly one
record batch of magic 2 per partition (a fragment after it is dropped); the coordinator's errors
that a retry fixes as the retriable NOT_ENOUGH_REPLICAS with a message, since some clients take
them as fatal in a produce response (KIP-890 "Old Clients"); PRODUCER_FENCED as
INVALID_PRODUCER_EPOCH; INVALID_TXN_STATE below Produce v12 as TRANSACTION_ABORTABLE (Kafka's
verification of KIP-890 part 1: a partition the transaction does not hold makes it abortable);
TRANSACTION_ABORTABLE below v11, which does not know it, as INVALID_TXN_STATE.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol, Self

from exactly import failpoints
from exactly.log import LogManager, PartitionLog, TopicInfo
from exactly.log.errors import LogError
from exactly.protocol.errors import ErrorCode, error_name
from exactly.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    RecordBatchError,
    RecordBatchHeader,
)
from exactly.protocol.structs import TopicPartition
from exactly.server.acl.model import Operation, ResourceType
from exactly.server.appends import AppendService

if TYPE_CHECKING:
    from types import TracebackType

    from exactly.protocol.requests import ProduceRequest
    from exactly.txn import TransactionCoordinator

log = logging.getLogger("exactly.produce")

# A partition's records: a view of the request's frame when the connection read it in place
# (network.py, produce_request.py).
Records = bytes | memoryview

TRANSACTION_ABORTABLE_SINCE = 11  # Produce versions that know TRANSACTION_ABORTABLE
IMPLICIT_ADD_SINCE = 12  # KIP-890 part 2: Produce adds the partition to the transaction

# Coordinator errors that a retry fixes, which some clients would take as fatal in a produce
# response (KIP-890 "Old Clients"): sent as the retriable NOT_ENOUGH_REPLICAS with a message.
_RETRIABLE = frozenset({ErrorCode.concurrent_transactions, ErrorCode.coordinator_not_available,
                        ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress})


class RequestScope(Protocol):
    """What admission reads of a request's context (server/context.py's RequestContext)."""

    @property
    def api_version(self) -> int: ...

    @property
    def authorizing(self) -> bool: ...

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool: ...


class MarkersInFlight(Protocol):
    """The transaction driver's markers being written after answered EndTxns (rule 2)."""

    def writing_markers(self, transactional_id: str | None) -> bool: ...

    async def wait_for_markers(self, transactional_id: str) -> None: ...


class Admitted(NamedTuple):
    """One partition of an admitted request."""

    partition: int
    error: ErrorCode  # the verdict, in the error codes of the request's version; none: append
    message: str | None  # the answer's error message
    log: PartitionLog | None
    records: Records | None  # its batch (a fragment after it dropped, as by Kafka)
    # Its batch's header, read once from the partition's records, for the log's append; none
    # when a read of `records` fails (shorter than a header): the log then reads and refuses it.
    headers: tuple[RecordBatchHeader, ...]


AdmittedTopic = tuple[str | None, uuid.UUID | None, list[Admitted]]  # name, id, partitions
# Makes an Admitted (one per partition) without the Python-level __new__ of a NamedTuple.
_new_tuple = tuple.__new__


class Admission:
    """One Produce request, admitted by `ProduceGate.admit`: what its checks gave. A context
    manager to hold around the request's appends: leaving it gives back the transactional id's
    turn, if admission took it (rule 5)."""

    __slots__ = ("_gate", "acks", "coordinator_logs", "topics", "transactional_id", "turn")

    def __init__(self, gate: ProduceGate, request: ProduceRequest) -> None:
        self._gate = gate
        self.transactional_id = request.transactional_id
        self.acks = request.acks
        self.topics: list[AdmittedTopic] = []  # in the request's order, with their verdicts
        # The `__transaction_state` logs of the partitions this request added to its
        # transaction: owed a sync before its data is appended (rule 4).
        self.coordinator_logs: list[PartitionLog] = []
        self.turn: _Turn | None = None  # the transactional id's turn, while held (rule 5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.turn is not None:
            self._gate._give_back(self)


class ProduceGate:
    """Admits Produce requests in the order of the module's rules, and holds the answer of an
    acks=all request until its data is durable."""

    def __init__(self, *, coordinator: TransactionCoordinator, logs: LogManager,
                 appends: AppendService, markers: MarkersInFlight, clock: Callable[[], int],
                 transaction_version: int, verification_enabled: bool) -> None:
        self.coordinator = coordinator
        self.logs = logs
        self.appends = appends
        self.markers = markers
        self.clock = clock
        self.transaction_version = transaction_version
        self.verification_enabled = verification_enabled
        self.turns = ProduceTurns()

    async def admit(self, scope: RequestScope, request: ProduceRequest) -> Admission:
        """Admit the request: wait as rules 2, 4 and 5 say, give each partition its verdict
        (rule 3 among them). Use the admission as a context manager around the appends."""
        admission = Admission(self, request)
        txn_id = admission.transactional_id
        if txn_id is not None and self.markers.writing_markers(txn_id):
            await self.markers.wait_for_markers(txn_id)  # rule 2
        turns = self.turns
        if txn_id is not None and turns.busy(txn_id):
            admission.turn = await turns.take(txn_id)  # rule 5: behind the id's earlier ones
        try:
            self._check(admission, scope, request)
            owed = self.appends.not_durable(admission.coordinator_logs)
            if owed and not failpoints.skip("produce.added_partitions.sync"):
                # Rule 4, holding the turn meanwhile (rule 5).
                assert txn_id is not None  # only a transactional request adds partitions
                if admission.turn is None:
                    admission.turn = await turns.take(txn_id)  # nobody holds it: no wait
                await self.appends.sync(owed, start_now=True)
        except BaseException:
            self._give_back(admission)
            raise
        return admission

    async def durable(self, admission: Admission, written: list[PartitionLog]) -> None:
        """Return once the request may be answered: with acks=all, once what it wrote to
        `written` is durable under the flush policy (rule 6)."""
        if admission.acks == -1 and written:
            await self.appends.sync(written)

    def _give_back(self, admission: Admission) -> None:
        turn, admission.turn = admission.turn, None
        if turn is not None and admission.transactional_id is not None:  # a turn is some id's
            self.turns.give_back(admission.transactional_id, turn)

    # -- verdicts ---------------------------------------------------------------------------

    def _check(self, admission: Admission, scope: RequestScope, request: ProduceRequest) -> None:
        """Every partition, checked before any is appended (rule 4: one sync round for all the
        partitions the request adds). Each batch header is read here, once."""
        acks, txn_id = request.acks, request.transactional_id
        # Kafka: transactional records need a transactional id and WRITE on it, or nothing is
        # written and every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Whether
        # any batch is transactional needs every header first: they are read then, in order.
        read: list[RecordBatchHeader | None] | None = None
        txn_denied = False
        if txn_id is None or scope.authorizing:
            read = [_header(pdata.records) for topic in request.topic_data
                    for pdata in topic.partition_data]
            if _any_transactional(read):
                txn_denied = txn_id is None or not scope.authorize(
                    Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
        n = 0
        for topic in request.topic_data:
            info, name, topic_id = self._topic(topic)
            denied = txn_denied or (name is not None and not scope.authorize(
                Operation.WRITE, ResourceType.TOPIC, name))
            parts: list[Admitted] = []
            for pdata in topic.partition_data:
                records: Records | None = pdata.records
                if read is None:
                    header = _header(records)
                else:
                    header = read[n]
                    n += 1
                error, message = ErrorCode.none, None
                plog = self._log(info, pdata.index)
                if txn_denied:
                    error = ErrorCode.transactional_id_authorization_failed
                elif denied:
                    error = ErrorCode.topic_authorization_failed
                elif acks not in (0, 1, -1):
                    error = ErrorCode.invalid_required_acks
                elif plog is None:
                    error = (ErrorCode.unknown_topic_id if name is None and topic_id is not None
                             else ErrorCode.unknown_topic_or_partition)
                elif not records:
                    error = ErrorCode.invalid_record
                    log.info("produce to %s-%d refused: INVALID_RECORD empty or null record set",
                             name, pdata.index)
                else:
                    error, why, whole = _one_batch(records)
                    if whole < len(records):
                        records = records[:whole]  # a fragment after the batch: dropped
                    if whole < HEADER_SIZE:
                        header = None  # as a read of the records kept would fail
                    if error == ErrorCode.none:
                        error, message = self._verdict(admission, scope.api_version, plog,
                                                       header)
                    else:
                        # As Kafka: a message with CORRUPT_MESSAGE, none with INVALID_RECORD
                        # here (the reason goes to the log).
                        message = why if error == ErrorCode.corrupt_message else None
                        log.info("produce to %s-%d refused: %s %s", name, pdata.index,
                                 error_name(error), why)
                parts.append(_new_tuple(Admitted, (pdata.index, error, message, plog, records,
                                                   () if header is None else (header,))))
            admission.topics.append((name, topic_id, parts))

    def _verdict(self, admission: Admission, version: int, plog: PartitionLog,
                 header: RecordBatchHeader | None) -> tuple[ErrorCode, str | None]:
        """Rule 3 for one partition's batch: its error and message in `version`'s codes."""
        if header is None or not header.is_transactional:
            return ErrorCode.none, None  # an unreadable header: the log refuses it
        txn_id = admission.transactional_id
        if txn_id is None:
            return ErrorCode.invalid_record, "a transactional batch needs the request's transactional id"
        pid, epoch = header.producer_id, header.producer_epoch
        if plog.in_transaction(pid):
            return ErrorCode.none, None  # verified when its transaction first wrote here
        tp = TopicPartition(plog.topic, plog.partition)
        if version >= IMPLICIT_ADD_SINCE and self.transaction_version >= 2:
            error = self.coordinator.add_partitions(
                txn_id, pid, epoch, [tp], now_ms=self.clock(), client_transaction_version=2)[tp]
            if error == ErrorCode.none:
                owed = self.coordinator.log_for(txn_id)  # rule 4
                if owed not in admission.coordinator_logs:
                    admission.coordinator_logs.append(owed)
        elif self.verification_enabled:
            error = self.coordinator.verify_partitions(txn_id, pid, epoch, [tp])[tp]
        else:
            error = ErrorCode.none
        if error == ErrorCode.none:
            return error, None
        return produce_error(error, version,
                             f"transaction {txn_id!r} of producer {pid} epoch {epoch} cannot "
                             f"write to {tp[0]}-{tp[1]}")

    # -- lookups, as handlers/common.py's topic_of and partition_log (which take a request
    # context, whose module this one cannot import: it imports the services, which hold this)

    def _topic(self, entry: object) -> tuple[TopicInfo | None, str | None, uuid.UUID | None]:
        """The request's topic entry by name (v3-12) or by topic id (v13, KIP-516)."""
        name = getattr(entry, "name", None)
        topic_id = getattr(entry, "topic_id", None)
        if name:
            return self.logs.topic(name), name, topic_id
        if topic_id is not None:
            info = self.logs.topic_by_id(topic_id)
            return info, (info.name if info else None), topic_id
        return None, None, topic_id

    def _log(self, info: TopicInfo | None, partition: int) -> PartitionLog | None:
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        try:
            return self.logs.get_log(info.name, partition)
        except LogError:
            return None


def produce_error(error: ErrorCode, version: int, what: str) -> tuple[ErrorCode, str | None]:
    """The coordinator's `error` for a transactional batch, as Produce `version` answers it, with
    its message (`what` could not be done), as Kafka's ReplicaManager: a message only with the
    errors it rewrites (INVALID_TXN_STATE, the retriable ones); the others (fenced, unknown
    mapping, abortable) go without one."""
    if error == ErrorCode.invalid_txn_state and version < IMPLICIT_ADD_SINCE:
        # As Kafka's verification (KIP-890 part 1): a partition the transaction does not hold
        # makes it abortable; older clients get INVALID_TXN_STATE (below).
        error = ErrorCode.transaction_abortable
    message = f"{what}: {error_name(error)}"
    if error in _RETRIABLE:
        return ErrorCode.not_enough_replicas, message
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, None
    if error == ErrorCode.transaction_abortable and version < TRANSACTION_ABORTABLE_SINCE:
        return ErrorCode.invalid_txn_state, message
    if error == ErrorCode.invalid_txn_state:
        return error, message
    return error, None


def _header(records: Records | None) -> RecordBatchHeader | None:
    """The header of the batch `records` begin with; None when there is none to read."""
    if not records:
        return None
    try:
        return RecordBatchHeader(records)
    except RecordBatchError:
        return None


def _any_transactional(headers: list[RecordBatchHeader | None]) -> bool:
    """Does any batch of the request carry transactional records?"""
    for header in headers:
        if header is not None and header.is_transactional:
            return True
    return False


_LENGTH = struct.Struct(">i")
_MIN_RECORD_OVERHEAD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0: below it, no batch at all
_UP_TO_MAGIC = 17  # offset, length, leader epoch, magic


def _one_batch(records: Records) -> tuple[ErrorCode, str | None, int]:
    """A partition's records as Kafka's ProduceRequest.validateRecords takes them (v3+): exactly
    one complete batch of magic 2, read as its ByteBufferLogInputStream reads: a length below a
    record's minimum or an unknown magic is CORRUPT_MESSAGE, a fragment after the batch is
    dropped. The error, its message, and the length of the records to append."""
    total = len(records)
    if total >= LOG_OVERHEAD:
        (length,) = _LENGTH.unpack_from(records, 8)
        if length < _MIN_RECORD_OVERHEAD:
            why = (f"batch size {length} is less than the minimum record overhead "
                   f"({_MIN_RECORD_OVERHEAD})")
            return ErrorCode.corrupt_message, why, total
        if total >= _UP_TO_MAGIC:
            magic = records[16]
            if magic > MAGIC:
                return ErrorCode.corrupt_message, f"invalid magic {magic} in the batch", total
            end = LOG_OVERHEAD + length
            if total >= end:
                if magic < MAGIC:
                    why = (f"a magic {magic} message: Produce v3 and later carry only record "
                           f"batches of magic {MAGIC}; upgrade the client")
                    return ErrorCode.invalid_record, why, total
                if total - end >= _UP_TO_MAGIC and (
                        total - end >= LOG_OVERHEAD + _LENGTH.unpack_from(records, end + 8)[0]):
                    return (ErrorCode.invalid_record,
                            "a Produce request carries exactly one record batch per partition",
                            total)
                return ErrorCode.none, None, end
    return (ErrorCode.invalid_record,
            f"no complete record batch in the partition's {total} bytes", total)


class ProduceTurns:
    """The turns of transactional ids (rule 5): the Produce requests of one id append in the
    order they came in, also when one of them waits between its checks and its appends. It
    holds its id's turn while it waits, and the requests of that id that come meanwhile wait
    for the turn in arrival order (asyncio.Lock wakes its waiters first come, first served, and
    lets none jump the queue). Requests of other ids go on meanwhile."""

    def __init__(self) -> None:
        self._turns: dict[str, _Turn] = {}

    def busy(self, transactional_id: str) -> bool:
        """Does a request of this id hold its turn, or wait for it?"""
        return transactional_id in self._turns

    async def take(self, transactional_id: str) -> _Turn:
        """Wait for the turn of `transactional_id` (at once if nobody holds it); give it back."""
        turn = self._turns.get(transactional_id)
        if turn is None:
            turn = self._turns[transactional_id] = _Turn()
        turn.users += 1
        try:
            await turn.lock.acquire()
        except BaseException:
            self._leave(transactional_id, turn)
            raise
        return turn

    def give_back(self, transactional_id: str, turn: _Turn) -> None:
        turn.lock.release()
        self._leave(transactional_id, turn)

    def _leave(self, transactional_id: str, turn: _Turn) -> None:
        turn.users -= 1
        if not turn.users and self._turns.get(transactional_id) is turn:
            del self._turns[transactional_id]


class _Turn:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # the request holding the turn and those waiting for it
