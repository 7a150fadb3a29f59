"""Raw requests for the authorization tests: each sends one request and returns the error
code(s) Kafka's client would look at."""

from __future__ import annotations

import datetime
import importlib
from typing import Any

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.records import Record, build_batch
from tests.rawclient import RawConnection

SECOND = datetime.timedelta(seconds=1)
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
DENY, ALLOW = 2, 3


def m(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def send(conn: RawConnection, key: int, version: int, **fields: Any) -> Any:
    conn.send_bytes(conn.frame(key, version, build(request_class(key, version), **fields)))
    return conn.read_response(key, version)


def metadata(conn, topic: str, auto_create: bool = False) -> int:
    r = send(conn, ApiKey.METADATA, 12, topics=(m("metadata", 12).MetadataRequestTopic(
        topic_id=None, name=topic),), allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False)
    return r.topics[0].error_code


def metadata_all(conn) -> set[str]:
    r = send(conn, ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
             include_topic_authorized_operations=False)
    return {t.name for t in r.topics}


def produce(conn, topic: str, txn_id: str | None = None, pid: int = -1, epoch: int = -1) -> int:
    mod = m("produce", 9)
    batch = build_batch([Record(None, b"v")], timestamp=1_700_000_000_000, producer_id=pid,
                        producer_epoch=epoch, base_sequence=0 if pid >= 0 else -1,
                        transactional=txn_id is not None)
    r = send(conn, ApiKey.PRODUCE, 9, transactional_id=txn_id, acks=-1, timeout=10 * SECOND,
             topic_data=(mod.TopicProduceData(name=topic, partition_data=(
                 mod.PartitionProduceData(index=0, records=batch),)),))
    return r.responses[0].partition_responses[0].error_code


def fetch(conn, topic: str) -> int:
    mod = m("fetch", 12)
    r = send(conn, ApiKey.FETCH, 12, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0),
             min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
             topics=(mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
                 partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                 log_start_offset=-1, partition_max_bytes=1 << 20),)),),
             forgotten_topics_data=(), rack_id="")
    return r.responses[0].partitions[0].error_code


def list_offsets(conn, topic: str) -> int:
    mod = m("list_offsets", 7)
    r = send(conn, ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
             topics=(mod.ListOffsetsTopic(name=topic, partitions=(mod.ListOffsetsPartition(
                 partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    return r.topics[0].partitions[0].error_code


def create_topic(conn, topic: str, validate_only: bool = True) -> int:
    mod = m("create_topics", 5)
    r = send(conn, ApiKey.CREATE_TOPICS, 5, topics=(mod.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, assignments=(), configs=()),),
        timeout=10 * SECOND, validate_only=validate_only)
    return r.topics[0].error_code


def delete_topic(conn, topic: str) -> int:
    r = send(conn, ApiKey.DELETE_TOPICS, 5, topic_names=(topic,), timeout=10 * SECOND)
    return r.responses[0].error_code


def create_partitions(conn, topic: str, count: int) -> int:
    mod = m("create_partitions", 1)
    r = send(conn, ApiKey.CREATE_PARTITIONS, 1, topics=(mod.CreatePartitionsTopic(
        name=topic, count=count, assignments=None),), timeout=10 * SECOND, validate_only=True)
    return r.results[0].error_code


def describe_configs(conn, rtype: int, name: str) -> int:
    mod = m("describe_configs", 4)
    r = send(conn, ApiKey.DESCRIBE_CONFIGS, 4, resources=(mod.DescribeConfigsResource(
        resource_type=rtype, resource_name=name, configuration_keys=None),),
        include_synonyms=False, include_documentation=False)
    return r.results[0].error_code


def alter_configs(conn, rtype: int, name: str) -> int:
    mod = m("incremental_alter_configs", 1)
    r = send(conn, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=(mod.AlterConfigsResource(
        resource_type=rtype, resource_name=name, configs=(mod.AlterableConfig(
            name="retention.ms", config_operation=0, value="600000"),)),), validate_only=True)
    return r.responses[0].error_code


def find_coordinator(conn, key_type: int, key: str) -> int:
    r = send(conn, ApiKey.FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=(key,))
    return r.coordinators[0].error_code


def join_group(conn, group: str) -> int:
    mod = m("join_group", 5)
    r = send(conn, ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout=10 * SECOND,
             rebalance_timeout=10 * SECOND, member_id="", group_instance_id=None,
             protocol_type="consumer", protocols=(mod.JoinGroupRequestProtocol(
                 name="range", metadata=b""),))
    return r.error_code


def heartbeat(conn, group: str) -> int:
    return send(conn, ApiKey.HEARTBEAT, 4, group_id=group, generation_id=1, member_id="x",
                group_instance_id=None).error_code


def offset_commit(conn, group: str, topic: str) -> int:
    mod = m("offset_commit", 8)
    r = send(conn, ApiKey.OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1,
             member_id="", group_instance_id=None, topics=(mod.OffsetCommitRequestTopic(
                 name=topic, partitions=(mod.OffsetCommitRequestPartition(
                     partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                     committed_metadata=""),)),))
    return r.topics[0].partitions[0].error_code


def offset_fetch(conn, group: str, topic: str) -> tuple[int, int]:
    mod = m("offset_fetch", 7)
    r = send(conn, ApiKey.OFFSET_FETCH, 7, group_id=group, topics=(mod.OffsetFetchRequestTopic(
        name=topic, partition_indexes=(0,)),), require_stable=False)
    return r.error_code, r.topics[0].partitions[0].error_code


def describe_group(conn, group: str) -> int:
    r = send(conn, ApiKey.DESCRIBE_GROUPS, 5, groups=(group,), include_authorized_operations=True)
    return r.groups[0].error_code


def list_groups(conn) -> set[str]:
    return {g.group_id for g in send(conn, ApiKey.LIST_GROUPS, 4, states_filter=()).groups}


def delete_group(conn, group: str) -> int:
    return send(conn, ApiKey.DELETE_GROUPS, 2, groups_names=(group,)).results[0].error_code


def init_producer_id(conn, txn_id: str | None, enable_2pc: bool = False) -> Any:
    return send(conn, ApiKey.INIT_PRODUCER_ID, 6, transactional_id=txn_id,
                transaction_timeout=60 * SECOND, producer_id=-1, producer_epoch=-1,
                enable2_pc=enable_2pc, keep_prepared_txn=False)


def add_partitions(conn, txn_id: str, pid: int, epoch: int, topic: str) -> int:
    mod = m("add_partitions_to_txn", 3)
    r = send(conn, ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn_id,
             v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
             v3_and_below_topics=(mod.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),))
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def add_offsets(conn, txn_id: str, pid: int, epoch: int, group: str) -> int:
    return send(conn, ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id=txn_id, producer_id=pid,
                producer_epoch=epoch, group_id=group).error_code


def end_txn(conn, txn_id: str, pid: int, epoch: int, commit: bool = False) -> int:
    return send(conn, ApiKey.END_TXN, 3, transactional_id=txn_id, producer_id=pid,
                producer_epoch=epoch, committed=commit).error_code


def txn_offset_commit(conn, txn_id: str, group: str, topic: str) -> int:
    mod = m("txn_offset_commit", 3)
    r = send(conn, ApiKey.TXN_OFFSET_COMMIT, 3, transactional_id=txn_id, group_id=group,
             producer_id=1, producer_epoch=0, generation_id=-1, member_id="",
             group_instance_id=None, topics=(mod.TxnOffsetCommitRequestTopic(
                 name=topic, partitions=(mod.TxnOffsetCommitRequestPartition(
                     partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                     committed_metadata=""),)),))
    return r.topics[0].partitions[0].error_code


def write_txn_markers(conn, topic: str) -> int:
    mod = m("write_txn_markers", 1)
    r = send(conn, ApiKey.WRITE_TXN_MARKERS, 1, markers=(mod.WritableTxnMarker(
        producer_id=999999, producer_epoch=0, transaction_result=False,
        topics=(mod.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),),
        coordinator_epoch=0),))
    return r.markers[0].topics[0].partitions[0].error_code


def describe_transaction(conn, txn_id: str) -> int:
    r = send(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(txn_id,))
    return r.transaction_states[0].error_code


def list_transactions(conn) -> set[str]:
    r = send(conn, ApiKey.LIST_TRANSACTIONS, 1, state_filters=(), producer_id_filters=())
    return {s.transactional_id for s in r.transaction_states}


def describe_producers(conn, topic: str) -> int:
    mod = m("describe_producers", 0)
    r = send(conn, ApiKey.DESCRIBE_PRODUCERS, 0, topics=(mod.TopicRequest(
        name=topic, partition_indexes=(0,)),))
    return r.topics[0].partitions[0].error_code


def create_acls(conn, *acls: tuple[int, str, int, str, str, int, int]) -> list[int]:
    """acls: (resource type, name, pattern type, principal, host, operation, permission)."""
    mod = m("create_acls", 3)
    r = send(conn, ApiKey.CREATE_ACLS, 3, creations=tuple(mod.AclCreation(
        resource_type=t, resource_name=n, resource_pattern_type=p, principal=pr, host=h,
        operation=o, permission_type=pe) for t, n, p, pr, h, o, pe in acls))
    return [x.error_code for x in r.results]


def describe_acls(conn, rtype: int = 1, name: str | None = None, pattern: int = 1,
                  principal: str | None = None) -> Any:
    return send(conn, ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=rtype,
                resource_name_filter=name, pattern_type_filter=pattern,
                principal_filter=principal, host_filter=None, operation=1, permission_type=1)


def delete_acls(conn, rtype: int = 1, name: str | None = None, pattern: int = 1,
                principal: str | None = None) -> Any:
    mod = m("delete_acls", 3)
    return send(conn, ApiKey.DELETE_ACLS, 3, filters=(mod.DeleteAclsFilter(
        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
        principal_filter=principal, host_filter=None, operation=1, permission_type=1),))
