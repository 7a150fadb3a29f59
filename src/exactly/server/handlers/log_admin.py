"""The admin APIs on partitions and replicas, answered as a single-node KRaft cluster would:

- DeleteRecords (v0–v2, KIP-107): moves partitions' log start offset (the low watermark) forward;
  the log manager makes it durable (`log-start-offset-checkpoint`) before the answer.
- DescribeLogDirs (v1–v4, KIP-113): the one log directory (the data directory), each partition's
  size, offset lag 0 (there is no future replica to catch up), the volume's total/usable bytes.
- ElectLeaders (v0–v2, KIP-183/KIP-460): every partition has one replica, its leader:
  ELECTION_NOT_NEEDED, as Kafka answers for a partition whose preferred leader leads.
- DescribeQuorum (v0–v2, KIP-595): this node is the only voter and the leader of the metadata
  quorum. There is no `__cluster_metadata` log here: the high watermark reported is the count of
  topic metadata changes since the broker started.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from exactly.log.errors import LogError
from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import CLUSTER_NAME, Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE, advertised_address

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        DeleteRecordsRequest,
        DescribeLogDirsRequest,
        DescribeQuorumRequest,
        ElectLeadersRequest,
    )

HIGH_WATERMARK = -1  # DeleteRecords: "delete everything below the high watermark"
METADATA_TOPIC = "__cluster_metadata"  # KRaft's metadata log: what DescribeQuorum asks about


async def handle_delete_records(ctx: RequestContext,
                                request: DeleteRecordsRequest) -> ResponsePayload:
    logs = ctx.services.logs
    topics = []
    for topic in request.topics:
        info = logs.topic(topic.name)
        allowed = ctx.authorize(Operation.DELETE, ResourceType.TOPIC, topic.name)
        results = []
        for p in topic.partitions:
            error, low_watermark = ErrorCode.none, -1
            if not allowed:
                error = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < info.num_partitions:
                error = ErrorCode.unknown_topic_or_partition
            elif info.internal:
                error = ErrorCode.invalid_topic_exception  # Kafka: not records of internal topics
            elif "delete" not in logs.log_config(topic.name).cleanup_policy.split(","):
                error = ErrorCode.policy_violation  # Kafka: compacted-only topics keep their records
            else:
                plog = logs.get_log(topic.name, p.partition_index)
                offset = plog.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                try:
                    low_watermark = logs.delete_records(topic.name, p.partition_index, offset)
                except LogError as exc:
                    error = exc.error_code
            results.append(ctx.nested("DeleteRecordsPartitionResult",
                                      partition_index=p.partition_index,
                                      low_watermark=low_watermark, error_code=error))
        topics.append(ctx.nested("DeleteRecordsTopicResult", name=topic.name,
                                 partitions=tuple(results)))
    return ctx.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_describe_log_dirs(ctx: RequestContext,
                                   request: DescribeLogDirsRequest) -> ResponsePayload:
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # Kafka: no log dirs, and from v3 the reason.
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed, results=())
    logs = ctx.services.logs
    wanted: dict[str, set[int] | None]  # topic -> partitions, None: every partition
    if request.topics is None:
        wanted = {info.name: None for info in logs.topics()}
    else:
        wanted = {}
        for t in request.topics:
            known = wanted.get(t.topic, set())
            wanted[t.topic] = None if known is None else known | set(t.partitions)
    topics = []
    for name, partitions in wanted.items():
        info = logs.topic(name)
        if info is None:
            continue  # Kafka lists only the partitions the directory holds
        found = []
        for index in range(info.num_partitions):
            if partitions is None or index in partitions:
                plog = logs.get_log(name, index)
                found.append(ctx.nested("DescribeLogDirsPartition", partition_index=index,
                                        partition_size=plog.size_bytes, offset_lag=0,
                                        is_future_key=False))
        if found:
            topics.append(ctx.nested("DescribeLogDirsTopic", name=name, partitions=tuple(found)))
    usage = shutil.disk_usage(logs.log_dir)
    result = ctx.nested("DescribeLogDirsResult", error_code=ErrorCode.none,
                        log_dir=str(logs.log_dir.resolve()), topics=tuple(topics),
                        total_bytes=usage.total, usable_bytes=usage.free)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))


async def handle_elect_leaders(ctx: RequestContext,
                               request: ElectLeadersRequest) -> ResponsePayload:
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = tuple(ctx.nested(
            "ReplicaElectionResult", topic=t.topic, partition_result=tuple(
                ctx.nested("PartitionResult", partition_id=p,
                           error_code=ErrorCode.cluster_authorization_failed, error_message=None)
                for p in t.partitions))
            for t in request.topic_partitions or ())
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed,
                            replica_election_results=results)
    election_type = getattr(request, "election_type", 0)
    if election_type not in (0, 1):
        # Kafka: an unknown election type makes the request invalid, every partition with it
        message = f"Unknown election type {election_type}"
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                            replica_election_results=tuple(ctx.nested(
                                "ReplicaElectionResult", topic=t.topic, partition_result=tuple(
                                    ctx.nested("PartitionResult", partition_id=p,
                                               error_code=ErrorCode.invalid_request,
                                               error_message=message)
                                    for p in t.partitions))
                                for t in request.topic_partitions or ()))
    # Asked for every partition (null), Kafka lists only the partitions where an election ran:
    # none here.
    topics = []
    for t in request.topic_partitions or ():
        info = ctx.services.logs.topic(t.topic)
        partitions = []
        for p in t.partitions:
            if info is None or not 0 <= p < info.num_partitions:
                error, message = ErrorCode.unknown_topic_or_partition, (
                    f"partition {t.topic}-{p} does not exist")
            else:
                error, message = ErrorCode.election_not_needed, (
                    "the partition's only replica is its leader")
            partitions.append(ctx.nested("PartitionResult", partition_id=p, error_code=error,
                                         error_message=message))
        topics.append(ctx.nested("ReplicaElectionResult", topic=t.topic,
                                 partition_result=tuple(partitions)))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        replica_election_results=tuple(topics))


async def handle_describe_quorum(ctx: RequestContext,
                                 request: DescribeQuorumRequest) -> ResponsePayload:
    node_id = ctx.services.identity.node_id
    asked = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.response(error_code=ErrorCode.cluster_authorization_failed,
                            error_message=None, topics=(), nodes=())
    if asked != [(METADATA_TOPIC, 0)]:
        if len(asked) != 1:
            return ctx.response(error_code=ErrorCode.invalid_request,
                                error_message=f"ask for {METADATA_TOPIC}-0 alone", topics=(),
                                nodes=())
        # As Kafka: the request is fine, the partition is not the quorum's
        (topic, index), = asked
        return ctx.response(error_code=ErrorCode.none, error_message="", nodes=(), topics=(
            ctx.nested("TopicData", topic_name=topic, partitions=(ctx.nested(
                "PartitionData", partition_index=index,
                error_code=ErrorCode.unknown_topic_or_partition,
                error_message="This server does not host this topic-partition.", leader_id=0,
                leader_epoch=0, high_watermark=0, current_voters=(), observers=()),)),))
    now = ctx.services.clock()
    high_watermark = ctx.services.logs.topics_version
    voter = ctx.nested("ReplicaState", replica_id=node_id, replica_directory_id=None,
                       log_end_offset=high_watermark, last_fetch_timestamp=now,
                       last_caught_up_timestamp=now)
    partition = ctx.nested("PartitionData", partition_index=0, error_code=ErrorCode.none,
                           error_message="", leader_id=node_id, leader_epoch=1,
                           high_watermark=high_watermark, current_voters=(voter,),
                           observers=())
    nodes: tuple[Any, ...] = ()
    if ctx.api_version >= 2:  # v2 (KIP-853) also says where the voters listen
        host, port = advertised_address(ctx)
        nodes = (ctx.nested("Node", node_id=node_id, listeners=(
            ctx.nested("Listener", name="CONTROLLER", host=host, port=port),)),)
    return ctx.response(error_code=ErrorCode.none, error_message="",  # as Kafka: "", not null
                        topics=(ctx.nested("TopicData", topic_name=METADATA_TOPIC,
                                           partitions=(partition,)),),
                        nodes=nodes)


HANDLERS: dict[int, Handler] = {
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.DESCRIBE_QUORUM: handle_describe_quorum,
}
