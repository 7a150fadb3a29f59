"""The replica-placement APIs of a cluster, answered as a one-node KRaft cluster of Kafka 4.4
answers them:

- AlterPartitionReassignments (v0–v1, KIP-455; v1's allow_replication_factor_change is
  KIP-860): the only assignment a partition can have is [this broker], which is already its
  assignment: accepted, nothing moves. Any other broker id, a duplicate or an empty list is
  INVALID_REPLICA_ASSIGNMENT with Kafka's reason; a cancel (replicas null) finds
  NO_REASSIGNMENT_IN_PROGRESS.
- ListPartitionReassignments (v0, KIP-455): no reassignment is ever in progress: no topics.
- AlterReplicaLogDirs (v1–v2, KIP-113): there is one log directory; a move to it is done
  already (NONE), any other path is LOG_DIR_NOT_FOUND, an unknown partition
  UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import CLUSTER_NAME, Operation, ResourceType
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload


def _reassignment_error(ctx: RequestContext, topic: str, partition: int,
                        replicas: tuple[int, ...] | None) -> tuple[ErrorCode, str | None]:
    info = ctx.services.logs.topic(topic)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
    if not 0 <= partition < info.num_partitions:
        return (ErrorCode.unknown_topic_or_partition,
                f"Unable to find partition {topic}:{partition}.")
    if replicas is None:
        return ErrorCode.no_reassignment_in_progress, None
    if not replicas:
        return (ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.")
    node = ctx.services.identity.node_id
    seen: set[int] = set()
    for broker in replicas:
        if broker in seen:
            return (ErrorCode.invalid_replica_assignment,
                    (f"The manual partition assignment includes the broker {broker} more than "
                     "once."))
        seen.add(broker)
        if broker != node:
            return (ErrorCode.invalid_replica_assignment,
                    (f"The manual partition assignment includes broker {broker}, but no such "
                     "broker is registered."))
    return ErrorCode.none, None  # [this broker]: the assignment the partition has


async def handle_alter_partition_reassignments(ctx: RequestContext,
                                               request: Any) -> ResponsePayload:
    allowed = ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    responses = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            if allowed:
                error, message = _reassignment_error(ctx, t.name, p.partition_index, p.replicas)
            else:
                error, message = ErrorCode.cluster_authorization_failed, None
            partitions.append(ctx.nested("ReassignablePartitionResponse",
                                         partition_index=p.partition_index, error_code=error,
                                         error_message=message))
        responses.append(ctx.nested("ReassignableTopicResponse", name=t.name,
                                    partitions=tuple(partitions)))
    if not allowed:  # Kafka: the whole request refused, no per-partition answers
        return ctx.response(throttle_time=NO_THROTTLE,
                            allow_replication_factor_change=getattr(
                                request, "allow_replication_factor_change", True),
                            error_code=ErrorCode.cluster_authorization_failed,
                            error_message=None, responses=())
    return ctx.response(throttle_time=NO_THROTTLE,
                        allow_replication_factor_change=getattr(
                            request, "allow_replication_factor_change", True),
                        error_code=ErrorCode.none, error_message=None,
                        responses=tuple(responses))


async def handle_list_partition_reassignments(ctx: RequestContext,
                                              request: Any) -> ResponsePayload:
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed,
                            error_message=None, topics=())
    # One replica per partition, always in place: nothing is ever being reassigned.
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                        error_message=None, topics=())


async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Any) -> ResponsePayload:
    logs = ctx.services.logs
    allowed = ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    here = Path(logs.log_dir).resolve()
    results: dict[str, list[Any]] = {}
    for d in request.dirs:
        try:
            same_dir = Path(d.path).resolve() == here
        except (OSError, RuntimeError):
            same_dir = False
        for t in d.topics:
            info = logs.topic(t.name)
            for p in t.partitions:
                if not allowed:
                    error = ErrorCode.cluster_authorization_failed
                elif info is None or not 0 <= p < info.num_partitions:
                    error = ErrorCode.unknown_topic_or_partition
                elif not same_dir:
                    error = ErrorCode.log_dir_not_found
                else:
                    error = ErrorCode.none  # already there: Kafka skips the future replica
                results.setdefault(t.name, []).append(
                    ctx.nested("AlterReplicaLogDirPartitionResult", partition_index=p,
                               error_code=error))
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(
        ctx.nested("AlterReplicaLogDirTopicResult", topic_name=name, partitions=tuple(parts))
        for name, parts in results.items()))


HANDLERS: dict[int, Handler] = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    ApiKey.ALTER_REPLICA_LOG_DIRS: handle_alter_replica_log_dirs,
}
