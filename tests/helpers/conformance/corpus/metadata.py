"""Metadata: every topic, named topics, topics by id (KIP-516), unknown topics with and without
auto-creation, internal topics, invalid names, authorized operations (KIP-430), at v1, v4, v9,
v10, v12 and v13 (KIP-1102's top-level error code)."""

from __future__ import annotations

from typing import Any

from tests.helpers.conformance.corpus.produce import create_topic, topic_id, wait_for_coordinator
from tests.helpers.conformance.harness import Divergence, Session, case

NO_OPS = -2147483648  # authorized operations not asked for


def metadata_fields(version: int, names: list[str] | None, *, auto_create: bool = False,
                    ops: bool = False, ids: list[str] | None = None) -> dict[str, Any]:
    topics: list[dict[str, Any]] | None
    if names is None and ids is None:
        topics = None
    else:
        topics = [{"name": n} if version < 10 else {"name": n, "topic_id": None}
                  for n in names or []]
        topics += [{"name": None, "topic_id": i} for i in ids or []]
    fields: dict[str, Any] = {"topics": topics}
    if version >= 4:
        fields["allow_auto_topic_creation"] = auto_create
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = ops
    if version >= 8:
        fields["include_topic_authorized_operations"] = ops
    return fields


def only_mine(s: Session, answer: dict[str, Any]) -> dict[str, Any]:
    """Every-topic answers list other cases' topics and internal topics too: keep this case's."""
    prefix = s.name("")
    return {**answer, "topics": [t for t in answer["topics"] if t["name"].startswith(prefix)]}


@case("metadata.every_topic")
def every_topic(s: Session) -> None:
    """topics=null (v1+): every topic; this case's two topics kept from the answer."""
    create_topic(s, s.name("a"), partitions=2)
    create_topic(s, s.name("b"), partitions=1)
    for v in (1, 4, 9, 12, 13):
        fields = metadata_fields(v, None)
        s.record(f"v{v}", only_mine(s, s.call(3, v, fields)), unordered=("topics",))


@case("metadata.named")
def named(s: Session) -> None:
    """A topic by name at several versions, with and without authorized operations."""
    t = s.name("t")
    create_topic(s, t, partitions=3)
    for v in (0, 1, 4, 5, 7, 9, 10, 11, 12, 13):
        s.record(f"v{v}", s.call(3, v, metadata_fields(v, [t])))
    for v in (8, 10, 11, 13):
        s.record(f"v{v} ops", s.call(3, v, metadata_fields(v, [t], ops=True)))


@case("metadata.unknown_topic")
def unknown_topic(s: Session) -> None:
    """An unknown topic without and with auto-creation (auto.create.topics.enable is on in
    both), then the topic it created; an invalid name with auto-creation; an empty list."""
    t = s.name("auto")
    s.record("v12 no auto", s.call(3, 12, metadata_fields(12, [t])), ignore=("topics.*.topic_id",))
    s.record("v1 unknown", s.call(3, 1, metadata_fields(1, [s.name("v1")])))
    created = s.call(3, 12, metadata_fields(12, [t], auto_create=True))
    s.record("v12 auto", created)
    s.until("auto-created topic's leader", lambda: s.call(3, 12, metadata_fields(12, [t]))[
        "topics"][0]["error_code"] == 0)
    s.record("v12 after", s.call(3, 12, metadata_fields(12, [t])))
    s.record("v12 invalid name auto", s.call(3, 12, metadata_fields(
        12, ["bad name!"], auto_create=True)))
    s.record("v12 too long name auto", s.call(3, 12, metadata_fields(
        12, ["x" * 250], auto_create=True)))
    s.record("v12 empty list", s.call(3, 12, metadata_fields(12, [])))
    s.record("v13 unknown", s.call(3, 13, metadata_fields(13, [s.name("v13")])),
             ignore=("topics.*.topic_id",))


@case("metadata.topic_ids")
def topic_ids(s: Session) -> None:
    """Topics by id (v12+): a known id, an unknown id, and a name and an id together."""
    t = s.name("t")
    create_topic(s, t)
    tid = topic_id(s, t)
    s.record("known id", s.call(3, 12, metadata_fields(12, None, ids=[tid])))
    s.record("unknown id", s.call(3, 12, metadata_fields(
        12, None, ids=["7f9c24e8-4a3b-4f5e-9d2c-1b0a9e8d7c6b"])))
    s.record("v13 unknown id", s.call(3, 13, metadata_fields(
        13, None, ids=["7f9c24e8-4a3b-4f5e-9d2c-1b0a9e8d7c6b"])))


@case("metadata.internal_topic")
def internal_topic(s: Session) -> None:
    """__transaction_state, once the transaction coordinator made it: internal, 50 partitions."""
    wait_for_coordinator(s, s.name("txn"))
    answer = s.call(3, 12, metadata_fields(12, ["__transaction_state"]))
    topic = answer["topics"][0]
    s.record("__transaction_state", {
        "error_code": topic["error_code"], "name": topic["name"],
        "is_internal": topic["is_internal"], "partitions": len(topic["partitions"]),
        "topic_authorized_operations": topic["topic_authorized_operations"]})


DIVERGENCES: list[Divergence] = []
