"""Authorization over TCP: principals × operations × resources, allowed or denied as the ACLs say.

The ACLs are created over the wire by a super user with confluent-kafka's AdminClient (and a raw
CreateAcls for TWO_PHASE_COMMIT, which librdkafka does not know), then the broker restarts
without super users: the matrix also shows that the ACLs were stored and reloaded. The principal
is User:ANONYMOUS (a PLAINTEXT connection).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from exactly.client import Producer as ExactlyProducer
from exactly.client import TransactionFatalError, TransactionSession
from exactly.protocol.errors import ErrorCode
from exactly.testing import EmbeddedBroker
from tests.helpers.server.acl import wire
from tests.rawclient import RawConnection

ANON = "User:ANONYMOUS"
AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "transaction.two.phase.commit.enable": "true", "log.flush.policy": "os",
         "group.initial.rebalance.delay.ms": "0"}
TOPICS = ["t-read", "t-write", "t-desc", "t-none", "t-conf", "t-alter", "t-del", "pre-a",
          "pre-secret"]
GROUPS = ["g-read", "g-desc", "g-del", "g-none"]
TXN_IDS = ["tx-write", "tx-desc", "tx-none", "tx-2pc"]

OK = ErrorCode.none
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed

LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
A, D = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def _acl(rtype, name, op, perm=A, pattern=LIT, principal=ANON) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


ACLS = [
    _acl(ResourceType.TOPIC, "t-read", Op.READ),
    _acl(ResourceType.TOPIC, "t-write", Op.WRITE),
    _acl(ResourceType.TOPIC, "t-desc", Op.DESCRIBE),
    _acl(ResourceType.TOPIC, "t-conf", Op.ALTER_CONFIGS),
    _acl(ResourceType.TOPIC, "t-alter", Op.ALTER),
    _acl(ResourceType.TOPIC, "t-del", Op.DELETE),
    _acl(ResourceType.TOPIC, "pre-", Op.ALL, pattern=PRE),
    _acl(ResourceType.TOPIC, "pre-secret", Op.ALL, D),
    _acl(ResourceType.TOPIC, "new-", Op.ALL, pattern=PRE),
    _acl(ResourceType.TOPIC, "desc-only-", Op.DESCRIBE, pattern=PRE),
    _acl(ResourceType.GROUP, "g-read", Op.READ),
    _acl(ResourceType.GROUP, "g-desc", Op.DESCRIBE),
    _acl(ResourceType.GROUP, "g-del", Op.DELETE),
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-write", Op.WRITE),
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-desc", Op.DESCRIBE),
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-2pc", Op.WRITE),
    # someone else's ACL on tx-none: the resource is covered, ANONYMOUS is not allowed
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-none", Op.ALL, principal="User:alice"),
]
TWO_PHASE_COMMIT = (wire.TXN, "tx-2pc", wire.LITERAL, ANON, "*", 15, wire.ALLOW)


def _setup_as_super_user(b: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
        f.result(20)
    for f in admin.create_acls(ACLS).values():
        assert f.result(20) is None
    conn = RawConnection(b.host, b.port)
    try:
        assert wire.create_acls(conn, TWO_PHASE_COMMIT) == [OK]
        for g in GROUPS:
            assert wire.offset_commit(conn, g, "t-read") == OK
        for txn_id in TXN_IDS:
            assert wire.init_producer_id(conn, txn_id).error_code == OK
    finally:
        conn.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("acl-matrix")
    with EmbeddedBroker(data_dir=data, settings={**AUTHZ, "super.users": ANON}) as b:
        _setup_as_super_user(b)
    with EmbeddedBroker(data_dir=data, settings=AUTHZ) as b:
        yield b


@pytest.fixture
def conn(broker: EmbeddedBroker) -> Iterator[RawConnection]:
    c = RawConnection(broker.host, broker.port)
    yield c
    c.close()


# -- the matrix: (request, resource) -> expected error ---------------------------------------

MATRIX = [
    # Metadata: DESCRIBE (implied by READ/WRITE/...), PREFIXED, DENY wins
    ("metadata", ("t-read",), OK), ("metadata", ("t-desc",), OK), ("metadata", ("pre-a",), OK),
    ("metadata", ("t-none",), TOPIC_DENIED), ("metadata", ("pre-secret",), TOPIC_DENIED),
    ("metadata", ("unknown-x", True), TOPIC_DENIED),  # no DESCRIBE: existence not revealed
    ("metadata", ("desc-only-x", True), TOPIC_DENIED),  # auto-create needs CREATE
    ("metadata", ("desc-only-y", False), ErrorCode.unknown_topic_or_partition),
    # Produce: WRITE
    ("produce", ("t-write",), OK), ("produce", ("pre-a",), OK),
    ("produce", ("t-read",), TOPIC_DENIED), ("produce", ("t-none",), TOPIC_DENIED),
    ("produce", ("pre-secret",), TOPIC_DENIED),
    # Fetch: READ
    ("fetch", ("t-read",), OK), ("fetch", ("t-write",), TOPIC_DENIED),
    ("fetch", ("t-desc",), TOPIC_DENIED),
    # ListOffsets: DESCRIBE
    ("list_offsets", ("t-desc",), OK), ("list_offsets", ("t-read",), OK),
    ("list_offsets", ("t-none",), TOPIC_DENIED),
    # CreateTopics: CREATE on the cluster or the topic; DeleteTopics: DELETE; CreatePartitions: ALTER
    ("create_topic", ("new-x",), OK), ("create_topic", ("other-x",), TOPIC_DENIED),
    ("delete_topic", ("t-none",), TOPIC_DENIED), ("delete_topic", ("t-read",), TOPIC_DENIED),
    ("create_partitions", ("t-alter", 2), OK), ("create_partitions", ("t-read", 2), TOPIC_DENIED),
    # configs: DESCRIBE_CONFIGS (implied by ALTER_CONFIGS) / ALTER_CONFIGS; broker -> cluster
    ("describe_configs", (wire.TOPIC, "t-conf"), OK),
    ("describe_configs", (wire.TOPIC, "t-read"), TOPIC_DENIED),
    ("describe_configs", (wire.CLUSTER, "1"), CLUSTER_DENIED),
    ("alter_configs", (wire.TOPIC, "t-conf"), OK),
    ("alter_configs", (wire.TOPIC, "t-alter"), TOPIC_DENIED),
    ("alter_configs", (wire.CLUSTER, "1"), CLUSTER_DENIED),
    # FindCoordinator: DESCRIBE on the group / transactional id
    ("find_coordinator", (0, "g-read"), OK), ("find_coordinator", (0, "g-none"), GROUP_DENIED),
    ("find_coordinator", (1, "tx-write"), OK), ("find_coordinator", (1, "tx-none"), TXN_DENIED),
    # group membership: READ on the group
    ("join_group", ("g-read",), ErrorCode.member_id_required),
    ("join_group", ("g-desc",), GROUP_DENIED), ("join_group", ("g-none",), GROUP_DENIED),
    ("heartbeat", ("g-none",), GROUP_DENIED),
    # OffsetCommit: READ group + READ topic
    ("offset_commit", ("g-read", "t-read"), OK),
    ("offset_commit", ("g-read", "t-none"), TOPIC_DENIED),
    ("offset_commit", ("g-desc", "t-read"), GROUP_DENIED),
    # OffsetFetch: DESCRIBE group (+ DESCRIBE topic)
    ("offset_fetch", ("g-desc", "t-read"), (OK, OK)),
    ("offset_fetch", ("g-desc", "t-none"), (OK, TOPIC_DENIED)),
    ("offset_fetch", ("g-none", "t-read"), (GROUP_DENIED, GROUP_DENIED)),
    ("describe_group", ("g-desc",), OK), ("describe_group", ("g-none",), GROUP_DENIED),
    ("delete_group", ("g-none",), GROUP_DENIED), ("delete_group", ("g-read",), GROUP_DENIED),
    # transactions: WRITE on the transactional id (+ the group / topics)
    ("init_producer_id", ("tx-write",), OK), ("init_producer_id", ("tx-desc",), TXN_DENIED),
    ("init_producer_id", ("tx-none",), TXN_DENIED),
    ("init_producer_id", ("tx-write", True), TXN_DENIED),  # Enable2Pc needs TWO_PHASE_COMMIT
    ("init_producer_id", ("tx-2pc", True), OK),
    ("init_producer_id", (None,), OK),  # idempotent: WRITE on some topic is enough (Kafka 3+)
    ("txn_offset_commit", ("tx-none", "g-read", "t-read"), TXN_DENIED),
    ("txn_offset_commit", ("tx-write", "g-desc", "t-read"), GROUP_DENIED),
    ("txn_offset_commit", ("tx-write", "g-read", "t-none"), TOPIC_DENIED),
    ("write_txn_markers", ("t-write",), CLUSTER_DENIED),
    ("describe_transaction", ("tx-desc",), OK), ("describe_transaction", ("tx-write",), OK),
    ("describe_transaction", ("tx-none",), TXN_DENIED),
    ("describe_producers", ("t-read",), OK), ("describe_producers", ("t-desc",), TOPIC_DENIED),
]


@pytest.mark.parametrize(("request_name", "args", "expected"), MATRIX,
                         ids=[f"{r}{a}" for r, a, _ in MATRIX])
def test_matrix(conn, request_name, args, expected):
    got = getattr(wire, request_name)(conn, *args)
    if request_name == "init_producer_id":
        got = got.error_code
    assert got == expected


def test_metadata_of_all_topics_lists_only_describable_ones(conn):
    listed = wire.metadata_all(conn)
    assert {"t-read", "t-write", "t-desc", "t-alter", "pre-a"} <= listed
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS, not DESCRIBE
    assert not listed & {"t-conf", "t-none", "pre-secret", "__consumer_offsets",
                         "__transaction_state"}


def test_auto_create_with_create_on_the_topic(conn):
    # As Kafka 4.4 (KRaft) answers: the request that creates the topic answers it unknown.
    assert wire.metadata(conn, "new-auto", True) == ErrorCode.unknown_topic_or_partition
    assert wire.metadata(conn, "new-auto") == OK  # it exists now


def test_list_groups_and_transactions_are_filtered(conn):
    groups = wire.list_groups(conn)
    assert "g-none" not in groups
    assert {"g-read", "g-desc", "g-del"} <= groups
    txns = wire.list_transactions(conn)
    assert "tx-none" not in txns
    assert {"tx-write", "tx-desc"} <= txns


def test_delete_topic_and_group_with_delete(conn):
    assert wire.delete_topic(conn, "t-del") == OK
    assert wire.delete_group(conn, "g-del") == OK


def test_transaction_with_the_right_acls(conn):
    resp = wire.init_producer_id(conn, "tx-write")
    pid, epoch = resp.producer_id, resp.producer_epoch
    assert wire.add_partitions(conn, "tx-write", pid, epoch, "t-read") == TOPIC_DENIED
    assert wire.add_partitions(conn, "tx-none", pid, epoch, "t-write") == TXN_DENIED
    assert wire.add_offsets(conn, "tx-write", pid, epoch, "g-none") == GROUP_DENIED
    assert wire.add_offsets(conn, "tx-none", pid, epoch, "g-read") == TXN_DENIED
    assert wire.produce(conn, "t-write", "tx-none", pid, epoch) == TXN_DENIED
    assert wire.end_txn(conn, "tx-none", pid, epoch) == TXN_DENIED
    assert wire.add_partitions(conn, "tx-write", pid, epoch, "t-write") == OK
    assert wire.add_offsets(conn, "tx-write", pid, epoch, "g-read") == OK
    assert wire.produce(conn, "t-write", "tx-write", pid, epoch) == OK
    assert wire.end_txn(conn, "tx-write", pid, epoch, commit=True) == OK


def test_acl_apis_need_cluster_rights(conn):
    assert wire.describe_acls(conn).error_code == CLUSTER_DENIED
    assert wire.create_acls(conn, (wire.TOPIC, "t-none", wire.LITERAL, ANON, "*", 3,
                                   wire.ALLOW)) == [CLUSTER_DENIED]
    assert wire.delete_acls(conn).filter_results[0].error_code == CLUSTER_DENIED
    assert wire.fetch(conn, "t-none") == TOPIC_DENIED  # nothing was added


def test_enable_2pc_without_two_phase_commit_is_refused(broker):
    session = TransactionSession({"bootstrap.servers": broker.bootstrap,
                                  "transactional.id": "tx-write",
                                  "transaction.two.phase.commit.enable": True})
    try:
        with pytest.raises(TransactionFatalError) as raised:
            session.initialize()
        assert raised.value.code == TXN_DENIED
    finally:
        session.close()


def test_2pc_with_write_and_two_phase_commit(broker):
    session = TransactionSession({"bootstrap.servers": broker.bootstrap,
                                  "transactional.id": "tx-2pc",
                                  "transaction.two.phase.commit.enable": True})
    try:
        session.initialize()
        session.begin_transaction()
        producer = ExactlyProducer({"bootstrap.servers": broker.bootstrap}, session=session)
        producer.send("t-write", "v", key="k")
        state = session.prepare_transaction()
        session.complete_transaction(state)
        producer.close()
    finally:
        session.close()


def test_confluent_clients_produce_and_consume_as_allowed(broker):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    errors = []
    for topic in ("t-write", "t-read"):
        try:
            producer.produce(topic, b"x", on_delivery=lambda err, _m: err and errors.append(err))
        except KafkaException as exc:  # librdkafka's metadata already knew the topic refused
            errors.append(exc.args[0])
    assert producer.flush(30) == 0
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-none",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["t-read"])
        msg = None
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                break
        assert msg is not None and msg.error() is not None
        assert msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
