"""Produce admission (server/admission.py): how many calls the Produce handler makes into the
broker's services, and what one `Admission` holds for a real request.

The handler once ran the ordering protocol itself: 17 call sites into the services by the count
below, 12 of them into the transaction driver and the append service (writing_markers,
wait_for_markers, produce_turns.busy, take twice, give_back, take_added, not_durable, sync twice,
verify_write, notify_append), and 12 distinct service methods on the request below. It now
admits, appends, syncs and answers, and the rules are the gate's. Two counts, each at most 4:

- Statically, with `ast` over server/handlers/produce.py: the call sites whose callee is reached
  from the services (`ctx.services...(...)`, or through a local name bound to `ctx.services` or
  to an attribute of it: `gate = ctx.services.transactions.produce_gate`); the calls that hand
  `ctx` or a service to a function of another module, which may reach the services with it (as
  handlers/common.py's topic_of does); and the calls of the request context's methods that
  consult a service (its `authorize` family). A call site in a loop counts once. Not counted:
  what is done with what a service returned (the Admission, whose `with` block gives the turn
  back on leaving; the partition logs the handler appends to): the request's own objects.
- Dynamically: on a real request that meets every rule (transaction version 2, two partitions
  added to the transaction by the Produce itself, `log.flush.policy=fsync`, acks=all), the
  services given to the handler are wrapped in a recorder of every method called through them,
  and the distinct methods are counted (the clock, read once per partition, counts once).

The admission itself is checked on real requests, decoded by kio and handled in the broker's
process: each batch header read once (against three reads before: the transactional id's
authorization, KIP-890's check and the log's append), the turn held while the partitions added
are made durable and given back after the appends, and the verdicts of each Produce version.
"""

from __future__ import annotations

import ast
import asyncio
import datetime
import inspect
import struct
from collections.abc import Callable
from typing import Any

import pytest

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.errors import ErrorCode
from exactly.protocol.framing import decode_response
from exactly.protocol.records import HEADER_SIZE, Record, RecordBatchHeader, build_batch
from exactly.server.admission import IMPLICIT_ADD_SINCE, produce_error
from exactly.server.auth import AuthSession, ListenerRuntime
from exactly.server.context import RequestContext
from exactly.server.handlers import HANDLERS
from exactly.server.services import Services
from exactly.testing import broker_in_process
from tests.paths import SRC

HANDLER = SRC / "exactly" / "server" / "handlers" / "produce.py"
MOST = 4
TOPIC, TXN_ID = "admitted", "admission-txn"

# -- the static count -------------------------------------------------------------------------


def _reaches_services(node: ast.expr, bound: set[str]) -> bool:
    """Is `node` an attribute chain, without calls, over `ctx.services` or a name bound to it?"""
    while isinstance(node, ast.Attribute):
        if node.attr == "services" and isinstance(node.value, ast.Name) and node.value.id == "ctx":
            return True
        node = node.value
    return isinstance(node, ast.Name) and node.id in bound


def _context_methods_using_services() -> set[str]:
    """RequestContext's methods that consult a service (read from their source)."""
    return {name for name, member in vars(RequestContext).items()
            if inspect.isfunction(member) and not name.startswith("_")
            and "self.services" in inspect.getsource(member)}


def service_calls(source: str) -> list[str]:
    """The call sites of `source` that call into the services, as the module docstring counts
    them; each as its callee's source text."""
    tree = ast.parse(source)
    functions = [node for node in tree.body
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    local = {f.name for f in functions}
    consulting = _context_methods_using_services()
    calls: list[str] = []
    for function in functions:
        bound = {a.arg for a in function.args.args + function.args.kwonlyargs
                 if a.annotation is not None and "Services" in ast.unparse(a.annotation)}
        grew = True
        while grew:  # names bound to the services or to a part of them, to a fixed point
            grew = False
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                if _reaches_services(value, bound):
                    for target in targets:
                        if isinstance(target, ast.Name) and target.id not in bound:
                            bound.add(target.id)
                            grew = True
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func
            consults = (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name)
                        and callee.value.id == "ctx" and callee.attr in consulting)
            if consults or _reaches_services(callee, bound):
                calls.append(ast.unparse(callee))
            elif isinstance(callee, ast.Name) and callee.id in local:
                continue  # this module's own function: its calls are counted in its body
            elif any((isinstance(arg, ast.Name) and arg.id == "ctx")
                     or _reaches_services(arg, bound)
                     for arg in [*node.args, *(k.value for k in node.keywords)]):
                calls.append(ast.unparse(callee))
    return calls


def test_the_counter_sees_every_way_into_the_services() -> None:
    # The shapes the handler had before admission, so that a counter that sees nothing cannot
    # pass the test below.
    source = '''
async def handle(ctx, request):
    services = ctx.services
    driver = services.transactions
    if driver.writing_markers(txn_id):
        await driver.wait_for_markers(txn_id)
    turns = driver.produce_turns
    turn = await turns.take(txn_id) if turns.busy(txn_id) else None
    info = topic_of(ctx, topic)
    if not ctx.authorize(operation):
        return None
    checked = _check(ctx, request)
    await ctx.services.appends.sync(written)
    response = fast_responses.produce(ctx.api_version, answers)

def _check(ctx, request):
    for part in request.parts:
        part.log.append(part.records, now_ms=ctx.services.clock())

def _wake(services: Services, plog):
    services.appends.notify_append(plog)
'''
    assert sorted(service_calls(source)) == sorted([
        "driver.writing_markers", "driver.wait_for_markers", "turns.take", "turns.busy",
        "topic_of", "ctx.authorize", "ctx.services.appends.sync", "ctx.services.clock",
        "services.appends.notify_append"])


def test_the_produce_handler_makes_at_most_four_calls_into_the_services() -> None:
    calls = service_calls(HANDLER.read_text())
    assert calls, "the counter found no call at all: it no longer reads the handler"
    assert len(calls) <= MOST, (
        f"handlers/produce.py calls into the services at {len(calls)} places, {calls}: the "
        f"ordering of a Produce belongs to server/admission.py's ProduceGate")


# -- real requests, in the broker's process ------------------------------------------------------


class _Recorder:
    """Stands for the services, or one of them: every method called through it is written down
    by its path (`transactions.produce_gate.admit`), then run on the real object."""

    def __init__(self, target: object, path: str, calls: list[str]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_calls", calls)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        path = f"{self._path}{name}"
        if value is None or isinstance(value, bool | int | float | str | bytes):
            return value
        if callable(value):
            def call(*args: Any, **kwargs: Any) -> Any:
                self._calls.append(path)
                return value(*args, **kwargs)
            return call
        return _Recorder(value, path + ".", self._calls)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._target, name, value)


_SESSION = AuthSession(ListenerRuntime("PLAINTEXT", "127.0.0.1", 0), mechanisms=(),
                       plain_users={}, scram_store=None)  # type: ignore[arg-type]


def _context(services: Any, api_key: int, version: int) -> RequestContext:
    return RequestContext(services, api_key, version, 1, "test", "127.0.0.1", session=_SESSION)


def _nested(api_key: int, version: int, entity: str, /, **fields: Any) -> Any:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    return build(getattr(load_payload_module(api_key, version, EntityType.request), entity),
                 **fields)


async def _init(services: Services) -> tuple[int, int]:
    k = ApiKey.INIT_PRODUCER_ID
    response = await HANDLERS[k](_context(services, k, 4), build(
        request_class(k, 4), transactional_id=TXN_ID,
        transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def _batches(partitions: int, pid: int = -1, epoch: int = -1, *,
             transactional: bool = False) -> list[bytes]:
    return [build_batch([Record(None, f"value {p}".encode())], timestamp=1_700_000_000_000,
                        producer_id=pid, producer_epoch=epoch, base_sequence=0 if pid >= 0 else -1,
                        transactional=transactional) for p in range(partitions)]


def _produce(version: int, txn_id: str | None, batches: list[bytes], acks: int = -1) -> Any:
    k = ApiKey.PRODUCE
    return build(request_class(k, version), transactional_id=txn_id, acks=acks,
                 timeout=datetime.timedelta(seconds=10),
                 topic_data=(_nested(k, version, "TopicProduceData", name=TOPIC, partition_data=tuple(
                     _nested(k, version, "PartitionProduceData", index=p, records=batch)
                     for p, batch in enumerate(batches))),))


def _errors(version: int, answer: bytes) -> list[tuple[int, str | None]]:
    """Each partition's error code and message from the handler's encoded answer."""
    header = b"\0\0\0\0" + (b"\0" if version >= 9 else b"")  # correlation id, tagged fields
    _, response = decode_response(ApiKey.PRODUCE, version, header + answer)
    return [(p.error_code, getattr(p, "error_message", None))
            for topic in response.responses for p in topic.partition_responses]


def _count_header_reads(monkeypatch: pytest.MonkeyPatch, batches: list[bytes]) -> list[int]:
    """Every RecordBatchHeader read of one of `batches` from here on, by its batch's index."""
    wanted = {batch[:HEADER_SIZE]: i for i, batch in enumerate(batches)}
    reads: list[int] = []
    read = RecordBatchHeader.__init__

    def counting(self: RecordBatchHeader, buffer: Any, position: int = 0) -> None:
        read(self, buffer, position)
        which = wanted.get(bytes(memoryview(buffer)[position:position + HEADER_SIZE]))
        if which is not None:
            reads.append(which)

    monkeypatch.setattr(RecordBatchHeader, "__init__", counting)
    return reads


def _in_broker(settings: dict[str, str], scenario: Callable[[Services], Any]) -> Any:
    async def run() -> Any:
        async with broker_in_process(settings) as services:
            services.logs.create_topic(TOPIC, 2)
            return await scenario(services)
    return asyncio.run(run())


def test_a_request_meeting_every_rule_calls_four_service_methods(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(services: Services) -> tuple[list[str], list[tuple[int, str | None]]]:
        pid, epoch = await _init(services)
        batches = _batches(2, pid, epoch, transactional=True)
        reads = _count_header_reads(monkeypatch, batches)
        calls: list[str] = []
        ctx = _context(_Recorder(services, "", calls), ApiKey.PRODUCE, IMPLICIT_ADD_SINCE)
        answer = await HANDLERS[ApiKey.PRODUCE](ctx, _produce(IMPLICIT_ADD_SINCE, TXN_ID, batches))
        assert sorted(reads) == [0, 1]  # each batch header read once
        txn_log = services.txn.log_for(TXN_ID)
        assert txn_log.flushed_offset == txn_log.log_end_offset  # the partitions added: durable
        for p in range(2):
            plog = services.logs.get_log(TOPIC, p)
            assert plog.log_end_offset == 1 and plog.flushed_offset == 1  # appended, durable
        return calls, _errors(IMPLICIT_ADD_SINCE, answer)

    calls, errors = _in_broker({"log.flush.policy": "fsync"}, scenario)
    assert errors == [(ErrorCode.none, None)] * 2
    assert calls, "the recorder saw no call: it no longer stands for the services"
    assert len(set(calls)) <= MOST, f"the handler called {sorted(set(calls))}"


def test_an_admission_holds_the_headers_the_owed_sync_and_the_turn() -> None:
    async def scenario(services: Services) -> None:
        pid, epoch = await _init(services)
        batches = _batches(2, pid, epoch, transactional=True)
        gate = services.transactions.produce_gate
        ctx = _context(services, ApiKey.PRODUCE, IMPLICIT_ADD_SINCE)
        admission = await gate.admit(ctx, _produce(IMPLICIT_ADD_SINCE, TXN_ID, batches))
        with admission:
            [(name, _, parts)] = admission.topics
            assert name == TOPIC
            assert [(p.partition, p.error, p.log) for p in parts] == [
                (q, ErrorCode.none, services.logs.get_log(TOPIC, q)) for q in range(2)]
            assert [(h.producer_id, h.base_sequence) for p in parts for h in p.headers] == [
                (pid, 0)] * 2
            # Both partitions added by one request: one coordinator log, synced once.
            assert admission.coordinator_logs == [services.txn.log_for(TXN_ID)]
            assert admission.turn is not None and gate.turns.busy(TXN_ID)
            for p in parts:
                assert p.log is not None and p.records is not None
                p.log.append(p.records, from_client=True, headers=p.headers)
        assert admission.turn is None and not gate.turns.busy(TXN_ID)  # given back

    _in_broker({"log.flush.policy": "fsync"}, scenario)


@pytest.mark.parametrize(("version", "transactional_id"), [(9, None), (12, TXN_ID)])
def test_each_batch_header_is_read_once(monkeypatch: pytest.MonkeyPatch, version: int,
                                        transactional_id: str | None) -> None:
    """An idempotent request's headers were read three times (whether any batch was
    transactional, KIP-890's check, the log), a transactional one's twice without ACLs."""
    async def scenario(services: Services) -> list[int]:
        pid, epoch = await _init(services)
        batches = _batches(2, pid, epoch, transactional=transactional_id is not None)
        reads = _count_header_reads(monkeypatch, batches)
        answer = await HANDLERS[ApiKey.PRODUCE](_context(services, ApiKey.PRODUCE, version),
                                                _produce(version, transactional_id, batches))
        assert _errors(version, answer) == [(ErrorCode.none, None)] * 2  # both appended
        return reads

    assert sorted(_in_broker({"log.flush.policy": "os"}, scenario)) == [0, 1]


def test_a_batch_shorter_than_a_header_is_refused_by_the_log_as_before() -> None:
    """A batch of 40 bytes (its length says so) marked transactional, then a fragment that
    makes the partition's records long enough to read a header from: the fragment is dropped,
    so no header can be read from what is appended, and the log refuses the batch. The header
    read over the fragment is not taken for the batch's: KIP-890's check is not made on it."""
    async def scenario(services: Services) -> list[tuple[int, str | None]]:
        batch = (struct.pack(">qiib", 0, 28, 0, 2) + bytes(4) + struct.pack(">h", 0x10)
                 + bytes(17) + b"fragment" * 4)
        answer = await HANDLERS[ApiKey.PRODUCE](_context(services, ApiKey.PRODUCE, 9),
                                                _produce(9, TXN_ID, [batch]))
        return _errors(9, answer)

    assert _in_broker({"log.flush.policy": "os"}, scenario) == [(ErrorCode.corrupt_message, None)]


# The coordinator's verdict on a transactional batch, as each Produce version answers it: the
# code, and whether the answer carries a message. Kafka's ReplicaManager: the errors a retry
# fixes as NOT_ENOUGH_REPLICAS (KIP-890 "Old Clients"), PRODUCER_FENCED as
# INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE only from v11; KIP-890 part 1's INVALID_TXN_STATE
# (a partition not in the transaction) is TRANSACTION_ABORTABLE below v12.
E = ErrorCode
VERDICTS: dict[ErrorCode, dict[range, tuple[ErrorCode, bool]]] = {
    E.concurrent_transactions: {range(3, 14): (E.not_enough_replicas, True)},
    E.coordinator_not_available: {range(3, 14): (E.not_enough_replicas, True)},
    E.not_coordinator: {range(3, 14): (E.not_enough_replicas, True)},
    E.coordinator_load_in_progress: {range(3, 14): (E.not_enough_replicas, True)},
    E.producer_fenced: {range(3, 14): (E.invalid_producer_epoch, False)},
    E.invalid_txn_state: {range(3, 11): (E.invalid_txn_state, True),
                          range(11, 12): (E.transaction_abortable, False),
                          range(12, 14): (E.invalid_txn_state, True)},
    E.transaction_abortable: {range(3, 11): (E.invalid_txn_state, True),
                              range(11, 14): (E.transaction_abortable, False)},
    E.invalid_producer_id_mapping: {range(3, 14): (E.invalid_producer_id_mapping, False)},
    E.invalid_producer_epoch: {range(3, 14): (E.invalid_producer_epoch, False)},
}


@pytest.mark.parametrize("error", list(VERDICTS))
def test_verdicts_in_each_produce_version(error: ErrorCode) -> None:
    for versions, (code, with_message) in VERDICTS[error].items():
        for version in versions:
            got, message = produce_error(error, version, "the write")
            assert (got, message is not None) == (code, with_message), (error, version)
            if message is not None:
                assert message.startswith("the write: ")


@pytest.mark.parametrize(("version", "expected"), [
    (9, (ErrorCode.invalid_txn_state, True)),  # KIP-890 part 1, an old client
    (11, (ErrorCode.transaction_abortable, False)),
    (12, (ErrorCode.none, False)),  # transaction version 2: the Produce adds the partition
])
def test_a_partition_not_added_in_each_version(version: int,
                                               expected: tuple[ErrorCode, bool]) -> None:
    async def scenario(services: Services) -> list[tuple[int, str | None]]:
        pid, epoch = await _init(services)
        answer = await HANDLERS[ApiKey.PRODUCE](
            _context(services, ApiKey.PRODUCE, version),
            _produce(version, TXN_ID, _batches(1, pid, epoch, transactional=True)))
        return _errors(version, answer)

    [(code, message)] = _in_broker({"log.flush.policy": "os"}, scenario)
    assert (code, message is not None) == expected


def test_a_fenced_producer_in_transaction_version_2() -> None:
    async def scenario(services: Services) -> list[tuple[int, str | None]]:
        pid, old_epoch = await _init(services)
        assert await _init(services) == (pid, old_epoch + 1)  # the id's new session
        answer = await HANDLERS[ApiKey.PRODUCE](
            _context(services, ApiKey.PRODUCE, 12),
            _produce(12, TXN_ID, _batches(1, pid, old_epoch, transactional=True)))
        return _errors(12, answer)

    assert _in_broker({"log.flush.policy": "os"}, scenario) == [
        (ErrorCode.invalid_producer_epoch, None)]
