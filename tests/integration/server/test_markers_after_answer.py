"""EndTxn is answered once PrepareCommit/PrepareAbort is durable; the markers follow (as in Apache
Kafka). A broker pause point (EXACTLY_FAILPOINTS=txn.before_markers=pause:<s>) holds the markers
back so that the window between the answer and the markers is wide open:

- requests for the transactional id that arrive meanwhile wait for the markers, then succeed
  (no CONCURRENT_TRANSACTIONS, which clients back off on);
- a broker killed in that window rolls the answered commit forward on restart.
"""

import datetime
import os
import time

import pytest
from confluent_kafka import Producer
from kio.index import load_payload_module
from kio.static.constants import EntityType

from exactly import failpoints
from exactly.protocol.apis import ApiKey, build
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record, build_batch
from exactly.testing import EmbeddedBroker
from tests.rawclient import RawConnection
from tests.support import create_topic
from tests.system.interop.test_transactions import read_all


def _paused(seconds: float) -> dict[str, str]:
    return {**os.environ, failpoints.ENV: f"txn.before_markers=pause:{seconds}"}


def _nested(api_key: int, version: int, entity: str, /, **fields):
    module = load_payload_module(api_key, version, EntityType.request)
    return build(getattr(module, entity), **fields)


def _state(broker: EmbeddedBroker, txn_id: str) -> str:
    """The transaction's state from ListTransactions, which does not wait for markers."""
    conn = RawConnection(broker.host, broker.port)
    try:
        listed = conn.request(ApiKey.LIST_TRANSACTIONS, 0, state_filters=(),
                              producer_id_filters=())
    finally:
        conn.close()
    return next(s.transaction_state for s in listed.transaction_states
                if s.transactional_id == txn_id)


@pytest.mark.parametrize("policy", ["os", "fsync"])
def test_requests_wait_for_the_markers_then_succeed(policy):
    with EmbeddedBroker(settings={"log.flush.policy": policy}, env=_paused(3)) as broker:
        create_topic(broker.bootstrap, "paused", partitions=1)
        conn = RawConnection(broker.host, broker.port, timeout=30)
        init = conn.request(ApiKey.INIT_PRODUCER_ID, 1, transactional_id="t-wait",
                            transaction_timeout=datetime.timedelta(seconds=60))
        assert init.error_code == ErrorCode.none
        pid, epoch = init.producer_id, init.producer_epoch

        def add_partition():
            topic = _nested(ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic",
                            name="paused", partitions=(0,))
            return conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                v3_and_below_transactional_id="t-wait",
                                v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                                v3_and_below_topics=(topic,))

        def produce(seq: int):
            batch = build_batch([Record(None, f"v{seq}".encode())], timestamp=int(time.time() * 1000),
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                transactional=True)
            part = _nested(ApiKey.PRODUCE, 8, "PartitionProduceData", index=0, records=batch)
            data = _nested(ApiKey.PRODUCE, 8, "TopicProduceData", name="paused",
                           partition_data=(part,))
            answer = conn.request(ApiKey.PRODUCE, 8, transactional_id="t-wait", acks=-1,
                                  timeout=datetime.timedelta(seconds=30), topic_data=(data,))
            return answer.responses[0].partition_responses[0].error_code

        def end_txn(commit: bool):
            return conn.request(ApiKey.END_TXN, 3, transactional_id="t-wait", producer_id=pid,
                                producer_epoch=epoch, committed=commit).error_code

        for seq in range(3):
            results = add_partition().results_by_topic_v3_and_below[0].results_by_partition
            # The first Add of the 2nd and 3rd transaction arrives while the markers of the one
            # before are held back: it waits for them instead of CONCURRENT_TRANSACTIONS.
            assert results[0].partition_error_code == ErrorCode.none
            assert _state(broker, "t-wait") == "Ongoing"
            assert produce(seq) == ErrorCode.none
            assert end_txn(commit=seq != 1) == ErrorCode.none  # answered before the markers
        # An EndTxn retried while the markers are held back waits for them, then gets the same
        # answer; the transaction is complete by then.
        assert end_txn(commit=True) == ErrorCode.none
        assert _state(broker, "t-wait") == "CompleteCommit"
        conn.close()
        assert sorted(read_all(broker.bootstrap, "paused", at_least=2)) == ["v0", "v2"]


def test_confluent_transactions_back_to_back_while_markers_are_held_back():
    with EmbeddedBroker(env=_paused(1)) as broker:  # default flush policy: fsync
        create_topic(broker.bootstrap, "back-to-back", partitions=2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t-b2b",
                             "linger.ms": 0})
        producer.init_transactions(30)
        for t in range(3):
            producer.begin_transaction()
            for i in range(5):
                producer.produce("back-to-back", key=str(i), value=f"t{t}-{i}")
            if t == 1:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
        assert sorted(read_all(broker.bootstrap, "back-to-back", at_least=10)) == sorted(
            f"t{t}-{i}" for t in (0, 2) for i in range(5))


def test_an_answered_commit_is_rolled_forward_after_a_crash_before_its_markers():
    with EmbeddedBroker(env=_paused(60)) as broker:
        create_topic(broker.bootstrap, "answered", partitions=3)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t-ans"})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(30):
            producer.produce("answered", key=str(i), value=f"v{i}")
        producer.commit_transaction(30)  # answered; the markers wait 60 s
        assert _state(broker, "t-ans") == "PrepareCommit"
        broker.kill()
        broker.env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
        broker.start()
        assert sorted(read_all(broker.bootstrap, "answered", at_least=30)) == \
            sorted(f"v{i}" for i in range(30))
        assert _state(broker, "t-ans") == "CompleteCommit"
        again = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t-ans"})
        again.init_transactions(30)
        again.begin_transaction()
        again.produce("answered", value="after")
        again.commit_transaction(30)
        assert "after" in read_all(broker.bootstrap, "answered", at_least=31)
