"""The session's state machine (seed 004 §3.2) and PreparedTxnState (KIP-939), without a broker."""

from __future__ import annotations

import pytest

from exactly.client.errors import (
    IllegalStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
)
from exactly.client.prepared import PreparedTxnState
from exactly.client.session_state import (
    CALLS,
    Kind,
    SessionStateMachine,
    State,
    classify,
    error_for,
)
from exactly.protocol.errors import ErrorCode

S = State


def machine(state: State) -> SessionStateMachine:
    m = SessionStateMachine()
    m.state = state
    return m


def test_lifecycle_commit_and_abort_paths():
    m = SessionStateMachine()
    assert m.state is S.UNINITIALIZED
    m.start("initialize")
    assert m.state is S.INITIALIZING
    m.finish("initialized")
    assert m.state is S.READY
    m.start("begin_transaction")
    assert m.state is S.IN_TRANSACTION
    m.start("commit_transaction")
    assert m.state is S.COMMITTING
    m.finish("ended")
    assert m.state is S.READY
    m.start("begin_transaction")
    m.start("prepare_transaction")
    assert m.state is S.PREPARED
    m.start("abort_transaction")
    assert m.state is S.ABORTING
    m.finish("ended")
    assert m.state is S.READY


def test_keep_prepared_txn_initializes_into_prepared():
    m = machine(S.INITIALIZING)
    m.finish("initialized_prepared")
    assert m.state is S.PREPARED
    m.start("commit_transaction")
    assert m.state is S.COMMITTING


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_call_not_allowed_names_the_state_and_the_call(call):
    allowed, _ = CALLS[call]
    for state in State:
        if state in allowed:
            continue
        m = machine(state)
        with pytest.raises(IllegalStateError) as info:
            m.start(call)
        assert str(state) in str(info.value) and f"{call}()" in str(info.value)
        assert m.state is state  # a refused call changes nothing


def test_abortable_error_allows_only_abort_and_says_so():
    m = machine(S.IN_TRANSACTION)
    m.fail(TransactionAbortableError("write failed", ErrorCode.topic_authorization_failed))
    assert m.state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError) as info:
        m.start("commit_transaction")
    assert isinstance(info.value, IllegalStateError)
    assert "ABORTABLE_ERROR" in str(info.value) and "write failed" in str(info.value)
    m.start("abort_transaction")
    m.finish("ended")
    assert m.state is S.READY and m.last_error is None


def test_fenced_and_fatal_end_the_session():
    m = machine(S.IN_TRANSACTION)
    m.fail(ProducerFencedError("fenced", ErrorCode.producer_fenced))
    assert m.state is S.FATAL_ERROR
    for call in ("abort_transaction", "commit_transaction", "begin_transaction", "heartbeat"):
        with pytest.raises(ProducerFencedError, match="FATAL_ERROR"):
            m.start(call)
    m.fail(TransactionAbortableError("later", 0))  # nothing brings it back
    assert m.state is S.FATAL_ERROR
    f = machine(S.READY)
    f.fail(TransactionFatalError("bad", ErrorCode.invalid_txn_state))
    with pytest.raises(TransactionFatalError, match="FATAL_ERROR.*close it"):
        f.start("begin_transaction")


def test_errors_while_aborting_keep_aborting():
    m = machine(S.ABORTING)
    m.fail(TransactionAbortableError("in-flight write failed", 0))
    assert m.state is S.ABORTING


def test_closed_session_refuses_everything():
    m = machine(S.READY)
    m.closed = True
    with pytest.raises(IllegalStateError, match="closed"):
        m.start("begin_transaction")


@pytest.mark.parametrize(("code", "api", "resumed", "kind"), [
    (ErrorCode.none, "EndTxn", False, Kind.NONE),
    (ErrorCode.not_coordinator, "EndTxn", False, Kind.REDISCOVER),
    (ErrorCode.coordinator_not_available, "InitProducerId", False, Kind.REDISCOVER),
    (ErrorCode.coordinator_load_in_progress, "EndTxn", False, Kind.RETRY),
    (ErrorCode.concurrent_transactions, "AddPartitionsToTxn", False, Kind.RETRY),
    (ErrorCode.producer_fenced, "EndTxn", False, Kind.FENCED),
    (ErrorCode.invalid_producer_epoch, "TxnOffsetCommit", False, Kind.FENCED),
    (ErrorCode.transaction_abortable, "EndTxn", False, Kind.ABORTABLE),
    (ErrorCode.topic_authorization_failed, "AddPartitionsToTxn", False, Kind.ABORTABLE),
    (ErrorCode.invalid_producer_id_mapping, "AddPartitionsToTxn", False, Kind.ABORTABLE),
    (ErrorCode.invalid_producer_id_mapping, "AddPartitionsToTxn", True, Kind.FATAL),
    (ErrorCode.invalid_producer_id_mapping, "EndTxn", False, Kind.FATAL),
    (ErrorCode.invalid_txn_state, "EndTxn", False, Kind.FATAL),
    (ErrorCode.transactional_id_authorization_failed, "InitProducerId", False, Kind.FATAL),
])
def test_error_codes_classified_as_kafka_does(code, api, resumed, kind):
    assert classify(code, api, resumed=resumed) is kind


@pytest.mark.parametrize("api", ["AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit",
                                 "EndTxn"])
def test_an_unmapped_producer_id_is_fatal_under_transaction_version_2(api):
    """KAFKA-18019: abortable (KIP-360) only under transaction version 1."""
    assert classify(ErrorCode.invalid_producer_id_mapping, api, tv2=True) is Kind.FATAL


def test_error_for_names_the_identity_and_what_to_do():
    fenced = error_for(ErrorCode.producer_fenced, "EndTxn", transactional_id="t", producer_id=4,
                       epoch=2)
    assert isinstance(fenced, ProducerFencedError) and "close this session" in str(fenced)
    assert "producer id 4, epoch 2" in str(fenced)
    auth = error_for(ErrorCode.transactional_id_authorization_failed, "InitProducerId",
                     transactional_id="t", producer_id=-1, epoch=-1)
    assert isinstance(auth, TransactionFatalError) and "TWO_PHASE_COMMIT" in str(auth)
    gone = error_for(ErrorCode.invalid_producer_id_mapping, "EndTxn", transactional_id="t",
                     producer_id=4, epoch=2, resumed=True)
    assert isinstance(gone, TransactionFatalError) and "ended or taken over" in str(gone)
    assert isinstance(gone, KafkaError) and gone.code == ErrorCode.invalid_producer_id_mapping


# -- PreparedTxnState ------------------------------------------------------------------------

def test_prepared_txn_state_round_trip_in_kafkas_format():
    state = PreparedTxnState.of(42, 7)
    assert str(state) == "42:7"
    assert PreparedTxnState(str(state)) == state
    assert hash(PreparedTxnState("42:7")) == hash(state)
    assert (state.producer_id, state.epoch, state.has_transaction) == (42, 7, True)
    assert PreparedTxnState("9223372036854775807:32767").producer_id == 2**63 - 1
    assert state != PreparedTxnState("42:8")


def test_empty_prepared_txn_state_is_no_transaction():
    for empty in (PreparedTxnState(), PreparedTxnState(""), PreparedTxnState.of(-1, -1)):
        assert str(empty) == ""
        assert (empty.producer_id, empty.epoch, empty.has_transaction) == (-1, -1, False)
        assert PreparedTxnState(str(empty)) == empty


@pytest.mark.parametrize("text", ["42", "42:", ":7", "a:b", "1:2:3", "-1:0", "5:-1", "5:32768",
                                  "9223372036854775808:1"])
def test_bad_prepared_txn_state_text_raises_naming_it(text):
    with pytest.raises(ValueError, match="bad PreparedTxnState") as info:
        PreparedTxnState(text)
    assert repr(text) in str(info.value)


def test_prepared_txn_state_wants_text():
    with pytest.raises(TypeError):
        PreparedTxnState(42)  # type: ignore[arg-type]
