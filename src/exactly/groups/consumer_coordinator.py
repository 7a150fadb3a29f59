"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat, ConsumerGroupDescribe and the
members' timers, after Kafka's GroupMetadataManager (consumerGroupHeartbeat and friends).

Sans-IO, like the classic coordinator: the caller passes the time in, and every change is
appended to `__consumer_offsets` (consumer_records.py) before the answer; the caller syncs
`HeartbeatResult.log` under the flush policy before sending it. The groups live in the
`GroupMetadataManager` (held by name as `group_manager`), as `Group`s whose `consumer` is set.

Theory of operation
-------------------

A member joins with member epoch 0, then heartbeats with the epoch it was last given; epoch -1
leaves, -2 leaves a static member's place open for its return (KIP-345) until its session ends.
Each heartbeat, in this order (Kafka's order):

1. checks the member: an unknown member gets UNKNOWN_MEMBER_ID; an epoch above the member's, or
   below it unless it is the previous epoch and the member owns nothing beyond its assignment
   (our answer was lost), gets FENCED_MEMBER_EPOCH; the client then rejoins with epoch 0;
2. takes the subscription (topic names and/or a regex) and assignor; a new member or a changed
   subscription bumps the group epoch, and so does a change of the subscribed topics'
   metadata (a topic created or deleted, partitions added), checked on every heartbeat;
3. when the group epoch is above the assignment epoch, computes a new target assignment with
   the group's assignor (assignors.py);
4. moves the member one step towards its target (`consumer_group.reconcile`): revoke first,
   then assign partitions once their previous owner has released them.

A classic group becomes a consumer group when a consumer-protocol member joins it: at once if
it is empty, else with its live members, who go on as classic members of the consumer group
(`_upgrade_live`, migration.py); the reverse is `downgrade_empty` and, for a group left with
classic members only, coordinator.py's `_maybe_downgrade`.

`tick(now_ms)` fences members whose session expired (no heartbeat for
`group.consumer.session.timeout.ms`) and members that kept partitions to revoke longer than
their rebalance timeout; a fenced member is removed and the group epoch goes up.

Differences from Kafka: a regex (SubscribedTopicRegex) is Python's `re` matched against the whole
topic name, not RE2/J: it is close (RE2 lacks backreferences and lookaround, which Python has;
`\\Q...\\E` and `\\p{...}` classes are RE2's and not Python's). A new regex is resolved after the
heartbeat that brings it, as Kafka resolves it in the background: that heartbeat's answer does
not count its topics, the next one does. The target assignment is computed in the heartbeat that
needs it, not batched or offloaded (KIP-1263's group.consumer.assignment.interval.ms is not
honoured). A group's consumer.session.timeout.ms and consumer.heartbeat.interval.ms (KIP-848's
group configs) override the broker's group.consumer.* values.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from exactly.groups.assignors import ASSIGNORS, Assignment
from exactly.groups.codec import GroupKey, encode_group_key
from exactly.groups.config import GroupConfig
from exactly.groups.consumer_group import (
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
)
from exactly.groups.consumer_records import (
    CURRENT_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    ConsumerKey,
    CurrentAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    encode_current_assignment,
    encode_group_metadata,
    encode_key,
    encode_member_metadata,
    encode_target_member,
    encode_target_metadata,
)
from exactly.groups.conversion import consumer_group_from_classic
from exactly.groups.group import Group, GroupState
from exactly.groups.metadata_manager import (
    GroupMetadataManager,
    consumer_state,
    consumer_tombstones,
)
from exactly.protocol.errors import ErrorCode
from exactly.protocol.records import Record

if TYPE_CHECKING:
    from exactly.log import PartitionLog
    from exactly.log.manager import TopicInfo

log = logging.getLogger("exactly.groups")


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat request; None (or -1) fields did not change since the last."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # the partitions the member owns, if it said
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # sent when it changed or the request was full
    log: PartitionLog | None = None  # sync before answering


class _Refused(Exception):
    """A heartbeat refused: the error code and a message saying what to do."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error, self.message = error, message


# KIP-848's group configs (IncrementalAlterConfigs on a GROUP resource) -> the GroupConfig
# fields of their bounds (group.consumer.min/max.session.timeout.ms, .heartbeat.interval.ms).
CONSUMER_GROUP_CONFIGS: dict[str, str] = {
    "consumer.session.timeout.ms": "session_timeout_ms",
    "consumer.heartbeat.interval.ms": "heartbeat_interval_ms",
}


def validate_consumer_group_config(config: GroupConfig, name: str, text: str) -> int:
    """The value of a consumer group config, or ValueError saying what is allowed."""
    field_name = CONSUMER_GROUP_CONFIGS[name]
    lo = getattr(config, f"consumer_min_{field_name}")
    hi = getattr(config, f"consumer_max_{field_name}")
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is outside the broker's bounds {lo}..{hi} "
                         f"(group.consumer.min/max.{name.removeprefix('consumer.')})")
    return value


class ConsumerGroupCoordinator:
    def __init__(self, group_manager: GroupMetadataManager, config: GroupConfig) -> None:
        self.group_manager = group_manager
        self.config = config
        # A group's config overrides (consumer.session.timeout.ms, ...): the broker wires this
        # to where group configs are kept (the share coordinator's config store).
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}

    def _setting(self, group_id: str, name: str, default: int) -> int:
        text = self.group_configs(group_id).get(name)
        if text is None:
            return default
        try:
            return validate_consumer_group_config(self.config, name, text)
        except ValueError:  # stored before the bounds changed: the broker's value applies
            return default

    def session_timeout_ms(self, group_id: str) -> int:
        return self._setting(group_id, "consumer.session.timeout.ms",
                             self.config.consumer_session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._setting(group_id, "consumer.heartbeat.interval.ms",
                             self.config.consumer_heartbeat_interval_ms)

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(self, request: ConsumerHeartbeat, now_ms: int) -> HeartbeatResult:
        try:
            self._validate(request)
            records: list[Record] = []
            if request.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
                group, answer = self._leave(request, records, now_ms)
            else:
                group, answer = self._beat(request, records, now_ms)
        except _Refused as refused:
            return HeartbeatResult(refused.error, refused.message)
        plog = self.write(group, records, now_ms) if records else None
        if records and plog is None:
            return HeartbeatResult(ErrorCode.coordinator_not_available,
                                   "writing the group to __consumer_offsets failed; retry")
        return replace(answer, log=plog)

    def _validate(self, request: ConsumerHeartbeat) -> None:
        if not request.group_id:
            raise _Refused(ErrorCode.invalid_request, "The group id is empty: name the group.")
        if not request.member_id:
            raise _Refused(ErrorCode.invalid_request,
                           "The member id is empty: from version 1 the client chooses it.")
        if request.member_epoch < LEAVE_GROUP_STATIC_EPOCH:
            raise _Refused(ErrorCode.invalid_request,
                           f"MemberEpoch {request.member_epoch} is invalid: use 0 to join, -1 "
                           "to leave, -2 for a static member leaving, else the current epoch.")
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms <= 0:
                raise _Refused(ErrorCode.invalid_request,
                               "A joining member (epoch 0) must give a positive "
                               "RebalanceTimeoutMs.")
            if request.owned:
                raise _Refused(ErrorCode.invalid_request,
                               "A joining member (epoch 0) owns no partitions: send "
                               "TopicPartitions empty.")
            if request.subscribed_topic_names is None and not request.subscribed_topic_regex:
                raise _Refused(ErrorCode.invalid_request, "A joining member (epoch 0) must "
                               "subscribe: give SubscribedTopicNames or SubscribedTopicRegex.")
        if request.server_assignor and request.server_assignor not in self.config.consumer_assignors:
            raise _Refused(ErrorCode.unsupported_assignor,
                           f"ServerAssignor {request.server_assignor} is not supported; this "
                           f"broker has {', '.join(self.config.consumer_assignors)}.")
        if request.subscribed_topic_regex:
            try:
                _compile(request.subscribed_topic_regex)
            except re.error as exc:
                raise _Refused(ErrorCode.invalid_regular_expression,
                               f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not "
                               f"a valid regular expression: {exc}.") from None

    def _beat(self, request: ConsumerHeartbeat, records: list[Record],
              now_ms: int) -> tuple[Group, HeartbeatResult]:
        group = self._group(request.group_id, create=request.member_epoch == 0,
                            records=records, now_ms=now_ms)
        cg = group.consumer
        assert cg is not None
        before, replaced = self._member(group.group_id, cg, request, records)
        is_new = before.member_id not in cg.members
        if is_new and len(cg.members) >= self.config.consumer_max_size:
            raise _Refused(ErrorCode.group_max_size_reached,
                           f"The consumer group has reached its maximum capacity of "
                           f"{self.config.consumer_max_size} members.")
        updated = self.update_member(group, before, _with_request(before, request),
                                     is_new=is_new, replaced=replaced, owned=request.owned,
                                     records=records, now_ms=now_ms)
        updated.session_deadline = now_ms + self.session_timeout_ms(group.group_id)
        full = request.member_epoch == 0 or (
            request.rebalance_timeout_ms != -1 and request.owned is not None
            and (request.subscribed_topic_names is not None
                 or request.subscribed_topic_regex is not None))
        changed = updated.assigned != before.assigned or is_new
        return group, HeartbeatResult(
            ErrorCode.none, None, updated.member_id, updated.member_epoch,
            self.heartbeat_interval_ms(group.group_id),
            dict(updated.assigned) if full or changed else None)

    def update_member(self, group: Group, before: ConsumerMember, member: ConsumerMember, *,
                      is_new: bool, replaced: bool, owned: Assignment | None,
                      records: list[Record], now_ms: int) -> ConsumerMember:
        """Steps 2-4 of a heartbeat (or of a classic member's JoinGroup): take the member's new
        subscription, bump the group epoch if needed, compute the target assignment if needed,
        and move the member one step towards its target. Returns the member as it is now."""
        cg = group.consumer
        assert cg is not None
        # As Kafka 4.4: a new group moves to epoch 1 at once; the epoch goes up again when the
        # member's topic names change, or its regex once the group has resolved it (a new
        # regex counts from the next heartbeat), or the subscribed topics' metadata changes. A
        # member joining with nothing to subscribe to yet (an unresolved regex) bumps nothing;
        # a static member's new incarnation (same subscription) takes its place without a
        # rebalance.
        created = cg.group_epoch == 0 and not cg.members
        regex = member.subscribed_topic_regex
        bump = (sorted(member.subscribed_topic_names) != sorted(before.subscribed_topic_names)
                or (regex != before.subscribed_topic_regex
                    and (regex is None or regex in cg.resolved_regexes)))
        if is_new or _metadata(member) != _metadata(before):
            records.append(_member_record(group.group_id, member))
        cg.put_member(member)
        metadata_hash = self._metadata_hash(cg)
        steps = int(created) + int(bump or metadata_hash != cg.metadata_hash)
        if steps:
            cg.group_epoch += steps
            cg.metadata_hash = metadata_hash
            records.append(_group_record(group.group_id, cg))
            log.info("consumer group %s: epoch %d (%s)", group.group_id, cg.group_epoch,
                     "members or subscriptions changed" if bump else "topic metadata changed")
        if cg.group_epoch > cg.assignment_epoch:
            self._assign(group.group_id, cg, records)
        updated = reconcile(member, cg.assignment_epoch, cg.target.get(member.member_id, {}),
                            owned, cg.owner_of)
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            if member.state is not MemberState.UNREVOKED_PARTITIONS or updated is not member:
                updated.rebalance_deadline = now_ms + max(updated.rebalance_timeout_ms, 0)
        else:
            updated.rebalance_deadline = None
        if is_new or _assignment_of(updated) != _assignment_of(before):
            records.append(_current_record(group.group_id, updated))
        cg.put_member(updated)
        self._set_state(group, now_ms)
        if member.subscribed_topic_regex:  # resolved "in the background": the next heartbeat
            cg.resolved_regexes.add(member.subscribed_topic_regex)  # sees its topics
        return updated

    def _group(self, group_id: str, *, create: bool, records: list[Record],
               now_ms: int) -> Group:
        manager = self.group_manager
        group = manager.groups.get(group_id)
        if group is None:
            if not create:
                raise _Refused(ErrorCode.unknown_member_id,
                               f"Group {group_id} has no such member; rejoin with epoch 0.")
            group = manager.new_group(group_id, now_ms)
        if group.consumer is None:
            policy = self.config.consumer_migration_policy
            if group.protocol_type is not None and policy not in ("upgrade", "bidirectional"):
                raise _Refused(ErrorCode.group_id_not_found,
                               f"Group {group_id} is a classic group and "
                               f"group.consumer.migration.policy={policy} forbids upgrading it.")
            if group.members or group.pending_members or group.state not in (
                    GroupState.EMPTY, GroupState.DEAD):
                self._upgrade_live(group, records, now_ms)
            else:
                self._upgrade(group, records, now_ms)
        return group

    def _upgrade_live(self, group: Group, records: list[Record], now_ms: int) -> None:
        """A classic group with members becomes a consumer group (KIP-848's online upgrade);
        its members stay, as classic members of the consumer group (migration.py)."""
        if group.protocol_type != "consumer":
            raise _Refused(ErrorCode.group_id_not_found,
                           f"Group {group.group_id} is a classic group of protocol type "
                           f"{group.protocol_type}, not consumer: it cannot take consumer-protocol "
                           "members.")
        if group.state is not GroupState.STABLE or group.pending_members:
            raise _Refused(ErrorCode.coordinator_not_available,
                           f"Classic group {group.group_id} is rebalancing; it can become a "
                           "consumer group once it is Stable: retry.")
        if len(group.members) >= self.config.consumer_max_size:
            raise _Refused(ErrorCode.group_max_size_reached,
                           f"Group {group.group_id} is full (group.consumer.max.size).")
        try:
            cg = consumer_group_from_classic(group, self.group_manager.store.logs, now_ms)
        except ValueError as exc:
            raise _Refused(ErrorCode.group_id_not_found,
                           f"Group {group.group_id} cannot become a consumer group: a member's "
                           f"subscription or assignment is not the consumer protocol's ({exc})."
                           ) from None
        cg.metadata_hash = self._metadata_hash(cg)
        records.append(Record(encode_group_key(GroupKey(group.group_id)), None))
        records.append(_group_record(group.group_id, cg))
        for m in cg.members.values():
            records += [_member_record(group.group_id, m),
                        _target_record(group.group_id, m.member_id, cg.target[m.member_id]),
                        _current_record(group.group_id, m)]
        records.append(Record(encode_key(ConsumerKey(TARGET_METADATA, group.group_id)),
                              encode_target_metadata(cg.assignment_epoch)))
        group.members.clear()
        group.static_members.clear()
        group.pending_sync.clear()
        group.leader_id = group.protocol_name = None
        group.consumer = cg
        self._set_state(group, now_ms)
        log.info("classic group %s becomes a consumer group with its %d members (epoch %d)",
                 group.group_id, len(cg.members), cg.group_epoch)

    def _upgrade(self, group: Group, records: list[Record], now_ms: int) -> None:
        """An empty classic group (or a new one) becomes a consumer group; its offsets stay."""
        if group.protocol_type is not None:
            # The classic group's record goes, as Kafka removes it on conversion.
            records.append(Record(encode_group_key(GroupKey(group.group_id)), None))
            log.info("empty classic group %s becomes a consumer group", group.group_id)
        group.consumer = ConsumerGroup()
        group.protocol_type = "consumer"
        group.protocol_name = None
        group.leader_id = None
        group.generation_id = 0
        group.transition(GroupState.EMPTY, now_ms)

    def _member(self, group_id: str, cg: ConsumerGroup, request: ConsumerHeartbeat,
                records: list[Record]) -> tuple[ConsumerMember, bool]:
        """The member the request is from: new, existing, or a static member's new incarnation
        (then True). Checks the epoch (Kafka's throwIfConsumerGroupMemberEpochIsInvalid)."""
        member_id, epoch = request.member_id, request.member_epoch
        instance_id = request.instance_id
        if epoch == 0 and instance_id is not None:
            holder = cg.static_members.get(instance_id)
            if holder is not None and holder != member_id:
                old = cg.members[holder]
                if old.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
                    raise _Refused(ErrorCode.unreleased_instance_id,
                                   f"Static member {holder} with instance id {instance_id} is "
                                   "still in the group; it must leave first.")
                return self.replace_static(group_id, cg, old, member_id, records), True
        member = cg.members.get(member_id)
        if epoch == 0:
            return (member if member is not None else ConsumerMember(member_id)), False
        if member is None:
            raise _Refused(ErrorCode.unknown_member_id,
                           f"Member {member_id} is not in group {group_id}; rejoin with epoch 0.")
        if instance_id is not None and member.instance_id != instance_id:
            raise _Refused(ErrorCode.fenced_instance_id,
                           f"Member {member_id} does not hold instance id {instance_id}.")
        if epoch > member.member_epoch or (epoch < member.member_epoch and not (
                epoch == member.previous_member_epoch and request.owned is not None
                and _subset(request.owned, member.assigned))):
            raise _Refused(ErrorCode.fenced_member_epoch,
                           f"Member epoch {epoch} of {member_id} is not its current epoch "
                           f"{member.member_epoch}; rejoin with epoch 0.")
        return member, False

    def replace_static(self, group_id: str, cg: ConsumerGroup, old: ConsumerMember,
                        member_id: str, records: list[Record]) -> ConsumerMember:
        """A static member came back under a new member id: it takes the old one's place and
        assignment, without a rebalance (KIP-345 and KIP-848)."""
        target = cg.target.get(old.member_id, {})
        self._forget_member(group_id, cg, old, records)
        new = replace(old, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        cg.target[member_id] = target
        records.append(_target_record(group_id, member_id, target))
        return new

    def _leave(self, request: ConsumerHeartbeat, records: list[Record],
               now_ms: int) -> tuple[Group, HeartbeatResult]:
        group = self.group_manager.groups.get(request.group_id)
        cg = group.consumer if group is not None else None
        if group is None or cg is None:
            raise _Refused(ErrorCode.group_id_not_found,
                           f"Group {request.group_id} is not a consumer group.")
        member = cg.members.get(request.member_id)
        if request.instance_id is not None:
            holder = cg.static_members.get(request.instance_id)
            if holder is None:
                raise _Refused(ErrorCode.unknown_member_id,
                               f"No static member with instance id {request.instance_id}.")
            if holder != request.member_id:
                raise _Refused(ErrorCode.fenced_instance_id,
                               f"Instance id {request.instance_id} belongs to member {holder}.")
        if member is None:
            raise _Refused(ErrorCode.unknown_member_id,
                           f"Member {request.member_id} is not in group {request.group_id}.")
        if request.member_epoch == LEAVE_GROUP_STATIC_EPOCH and member.instance_id is not None:
            # A static member keeps its place and partitions until its session expires.
            left = replace(member, member_epoch=LEAVE_GROUP_STATIC_EPOCH,
                           previous_member_epoch=member.member_epoch)
            cg.put_member(left)
            records.append(_current_record(group.group_id, left))
            log.info("static member %s of consumer group %s left temporarily",
                     member.member_id, group.group_id)
        else:
            self.remove_member(group, member, records, now_ms, "left the group")
        # Kafka answers a leave with no heartbeat interval: there is no next heartbeat.
        return group, HeartbeatResult(ErrorCode.none, None, request.member_id,
                                      request.member_epoch, 0)

    # -- the group's epoch, target assignment and members -------------------------------------

    def remove_member(self, group: Group, member: ConsumerMember, records: list[Record],
                       now_ms: int, why: str) -> None:
        cg = group.consumer
        assert cg is not None
        self._forget_member(group.group_id, cg, member, records)
        cg.group_epoch += 1
        records.append(_group_record(group.group_id, cg))
        if not cg.members:  # as Kafka: an empty group's (empty) target is at the new epoch
            cg.assignment_epoch = cg.group_epoch
            records.append(Record(encode_key(ConsumerKey(TARGET_METADATA, group.group_id)),
                                  encode_target_metadata(cg.assignment_epoch)))
        self._set_state(group, now_ms)
        log.info("member %s of consumer group %s %s: epoch %d", member.member_id,
                 group.group_id, why, cg.group_epoch)

    @staticmethod
    def _forget_member(group_id: str, cg: ConsumerGroup, member: ConsumerMember,
                       records: list[Record]) -> None:
        cg.drop_member(member.member_id)
        cg.target.pop(member.member_id, None)
        records += member_tombstones(group_id, member.member_id)

    def _assign(self, group_id: str, cg: ConsumerGroup, records: list[Record]) -> None:
        subscriptions = {m.member_id: frozenset(t.topic_id for t in self._topics_of(m, cg))
                         for m in cg.members.values()}
        counts = {t.topic_id: t.num_partitions
                  for m in cg.members.values() for t in self._topics_of(m, cg)}
        name = cg.preferred_assignor(self.config.consumer_assignors[0])
        target = ASSIGNORS[name](subscriptions, counts, cg.target)
        for member_id, assignment in target.items():
            if assignment != cg.target.get(member_id) or member_id not in cg.target:
                records.append(_target_record(group_id, member_id, assignment))
        cg.target = target
        cg.assignment_epoch = cg.group_epoch
        records.append(Record(encode_key(ConsumerKey(TARGET_METADATA, group_id)),
                              encode_target_metadata(cg.assignment_epoch)))

    def _topics_of(self, member: ConsumerMember,
                   cg: ConsumerGroup | None = None) -> list[TopicInfo]:
        """The existing topics a member subscribes to, by name or by regex (not internal ones);
        with `cg`, by a regex only once the group resolved it (`resolved_regexes`)."""
        logs = self.group_manager.store.logs
        found = {}
        for name in member.subscribed_topic_names:
            info = logs.topic(name)
            if info is not None:
                found[name] = info
        regex = member.subscribed_topic_regex
        if regex and (cg is None or regex in cg.resolved_regexes):
            pattern = _compile(member.subscribed_topic_regex)
            for info in logs.topics():
                if not info.internal and pattern.fullmatch(info.name):
                    found[info.name] = info
        return list(found.values())

    def _metadata_hash(self, cg: ConsumerGroup) -> int:
        """A stable hash of the subscribed topics' ids and partition counts (KIP-1101's idea):
        it changes when a subscribed topic appears, goes or gains partitions."""
        topics = {t.name: t for m in cg.members.values() for t in self._topics_of(m, cg)}
        if not topics:
            return 0  # as Kafka's group hash of no topics: a new group's starting value
        digest = hashlib.blake2b(digest_size=8)
        for name in sorted(topics):
            digest.update(f"{name}\0{topics[name].topic_id}\0{topics[name].num_partitions}\0"
                          .encode())
        return int.from_bytes(digest.digest(), "big", signed=True)

    def _set_state(self, group: Group, now_ms: int) -> None:
        assert group.consumer is not None
        state = consumer_state(group.consumer)
        if state is not group.state:
            group.transition(state, now_ms)

    def write(self, group: Group, records: list[Record], now_ms: int) -> PartitionLog | None:
        try:
            return self.group_manager.append_batch(group.group_id, records, now_ms).log
        except Exception:
            # The group in memory is ahead of the log; members fenced after a restart rejoin.
            log.exception("writing consumer group %s failed", group.group_id)
            return None

    # -- time -----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Fence members whose session expired or who did not revoke within their rebalance
        timeout."""
        for group in list(self.group_manager.groups.values()):
            cg = group.consumer
            if cg is None:
                continue
            records: list[Record] = []
            for member in list(cg.members.values()):
                if now_ms >= member.session_deadline:
                    self.remove_member(group, member, records, now_ms, "timed out (session)")
                elif (member.rebalance_deadline is not None and now_ms >= member.rebalance_deadline
                      and member.state is MemberState.UNREVOKED_PARTITIONS):
                    self.remove_member(group, member, records, now_ms,
                                        "did not revoke its partitions within its rebalance "
                                        "timeout")
            if records:
                self.write(group, records, now_ms)

    # -- other APIs -------------------------------------------------------------------------------

    def describe(self, group_id: str) -> Group | None:
        """The consumer group for ConsumerGroupDescribe, or None if there is none by that id."""
        group = self.group_manager.groups.get(group_id)
        return group if group is not None and group.consumer is not None else None

    def downgrade_empty(self, group: Group, now_ms: int) -> bool:
        """An empty consumer group becomes classic when a classic member joins, if
        group.consumer.migration.policy allows; its offsets stay. False when it may not."""
        cg = group.consumer
        if cg is None:
            return True
        if cg.members or self.config.consumer_migration_policy not in ("downgrade",
                                                                        "bidirectional"):
            return False
        try:
            self.group_manager.append_batch(group.group_id, consumer_tombstones(group.group_id),
                                            now_ms)
        except Exception:
            log.exception("downgrading consumer group %s failed", group.group_id)
            return False
        group.consumer = None
        group.protocol_type = None
        group.generation_id = 0
        group.transition(GroupState.EMPTY, now_ms)
        log.info("empty consumer group %s becomes a classic group", group.group_id)
        return True


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """The records that delete a member of a consumer group."""
    return [Record(encode_key(ConsumerKey(kind, group_id, member_id)), None)
            for kind in (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)]


@functools.lru_cache(maxsize=256)
def _compile(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def _with_request(member: ConsumerMember, request: ConsumerHeartbeat) -> ConsumerMember:
    """The member with what the request changed (None or -1 fields did not change)."""
    updated = replace(member, client_id=request.client_id, client_host=request.client_host)
    if request.instance_id is not None:
        updated.instance_id = request.instance_id
    if request.rack_id is not None:
        updated.rack_id = request.rack_id
    if request.rebalance_timeout_ms != -1:
        updated.rebalance_timeout_ms = request.rebalance_timeout_ms
    if request.subscribed_topic_names is not None:
        updated.subscribed_topic_names = tuple(request.subscribed_topic_names)
    if request.subscribed_topic_regex is not None:
        updated.subscribed_topic_regex = request.subscribed_topic_regex or None
    if request.server_assignor is not None:
        updated.server_assignor = request.server_assignor
    return updated


def _metadata(m: ConsumerMember) -> MemberMetadataValue:
    return MemberMetadataValue(m.instance_id, m.rack_id, m.client_id, m.client_host,
                               m.subscribed_topic_names, m.subscribed_topic_regex,
                               m.rebalance_timeout_ms, m.server_assignor, m.classic)


def _assignment_of(m: ConsumerMember) -> tuple[int, int, MemberState, Assignment, Assignment]:
    return (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)


def _subset(owned: Assignment, assigned: Assignment) -> bool:
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())


def _member_record(group_id: str, m: ConsumerMember) -> Record:
    return Record(encode_key(ConsumerKey(MEMBER_METADATA, group_id, m.member_id)),
                  encode_member_metadata(_metadata(m)))


def _group_record(group_id: str, cg: ConsumerGroup) -> Record:
    return Record(encode_key(ConsumerKey(GROUP_METADATA, group_id)),
                  encode_group_metadata(GroupMetadataValue(cg.group_epoch, cg.metadata_hash)))


def _target_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    return Record(encode_key(ConsumerKey(TARGET_MEMBER, group_id, member_id)),
                  encode_target_member(assignment))


def _current_record(group_id: str, m: ConsumerMember) -> Record:
    value = CurrentAssignmentValue(m.member_epoch, m.previous_member_epoch, int(m.state),
                                   m.assigned, m.pending_revocation)
    return Record(encode_key(ConsumerKey(CURRENT_ASSIGNMENT, group_id, m.member_id)),
                  encode_current_assignment(value))


def new_member_id() -> str:
    """A member id for ConsumerGroupHeartbeat v0, where the coordinator chooses it."""
    return str(uuid.uuid4())
