"""ApiVersions (KIP-35, KIP-511, KIP-584's features, KIP-1242's v5) at every version both brokers
serve: the table, the supported and finalized features, the refusals (an invalid client software
name, a v5 request for another node or cluster, or with half of its identity)."""

from __future__ import annotations

from typing import Any

from tests.helpers.conformance.harness import Divergence, Session, case

CLIENT = {"client_software_name": "conformance", "client_software_version": "1"}


def _fields(version: int, **more: Any) -> dict[str, Any]:
    return {**(CLIENT if version >= 3 else {}), **more}


# OPEN: versions Kafka 4.4 serves and Exactly does not serve yet, each a finding of its own that
# no KIP makes deliberate. Their maximum versions are left out of the comparison until Exactly
# serves them (then the entry goes: the comparison covers it again).
OPEN_MAX_VERSIONS = {
    8: "OffsetCommit v10 (KIP-848: topic ids instead of names)",
    9: "OffsetFetch v10 (KIP-848: topic ids instead of names)",
    15: "DescribeGroups v6 (KIP-1043: GROUP_ID_NOT_FOUND for an unknown group)",
    42: "DeleteGroups v3 (a per-group ErrorMessage; kio 0.6.5 has no v3)",
    78: "ShareFetch v2 (KIP-932 as finished in Kafka 4.2+: share.version 2)",
    79: "ShareAcknowledge v2 (KIP-932 as finished in Kafka 4.2+: share.version 2)",
}
OPEN_FEATURE_LEVELS = {
    "share.version": "Kafka 4.4 supports and finalizes level 2 (ShareFetch/ShareAcknowledge v2); "
                     "Exactly level 1",
}


def _settled(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer without what OPEN_MAX_VERSIONS and OPEN_FEATURE_LEVELS leave out."""
    keys = [{k: v for k, v in a.items() if not (k == "max_version"
                                                and a["api_key"] in OPEN_MAX_VERSIONS)}
            for a in answer["api_keys"]]
    out = {**answer, "api_keys": keys}
    for field in ("supported_features", "finalized_features"):
        if field in answer:
            out[field] = [{k: v for k, v in f.items()
                           if f["name"] not in OPEN_FEATURE_LEVELS or k == "name"}
                          for f in answer[field]]
    return out


@case("api_versions.v0_to_v5")
def api_versions(s: Session) -> None:
    """The table, the supported and finalized features, at each version from v0 to v5."""
    for version in range(6):
        answer = s.call(18, version, _fields(version), conn=s.connect())
        s.record(f"v{version}", _settled(answer),
                 ignore=("finalized_features_epoch",),
                 unordered=("api_keys", "supported_features", "finalized_features"))


@case("api_versions.v5_identity")
def v5_identity(s: Session) -> None:
    """KIP-1242: v5 names the cluster and node the client means to reach. This node of this
    cluster answers; another node or cluster answers REBOOTSTRAP_REQUIRED without a table; a
    cluster id without a node id (or the reverse) is INVALID_REQUEST."""
    md = s.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    cluster_id, node_id = md["cluster_id"], md["brokers"][0]["node_id"]

    def ask(label: str, cluster: str | None, node: int) -> None:
        answer = s.call(18, 5, _fields(5, cluster_id=cluster, node_id=node), conn=s.connect())
        s.record(label, {"error_code": answer["error_code"],  # the table: api_versions.v0_to_v5
                         "api_keys": bool(answer["api_keys"]),
                         "supported_features": bool(answer["supported_features"]),
                         "finalized_features_epoch": answer["finalized_features_epoch"] >= 0})

    ask("this node", cluster_id, node_id)
    ask("no identity", None, -1)
    ask("other node", cluster_id, node_id + 100)
    ask("other cluster", "AAAAAAAAAAAAAAAAAAAAAB", node_id)
    ask("cluster only", cluster_id, -1)
    ask("node only", None, node_id)


_NOT_SERVED = {
    23: "OffsetForLeaderEpoch (KIP-101, KIP-320): a follower's and a consumer's check for log "
        "truncation after a leader change; one node never changes leader nor truncates",
    38: "CreateDelegationToken: delegation tokens (KIP-48) are not implemented; SASL/SCRAM and "
        "PLAIN are the authentication",
    39: "RenewDelegationToken: delegation tokens (KIP-48) are not implemented",
    40: "ExpireDelegationToken: delegation tokens (KIP-48) are not implemented",
    41: "DescribeDelegationToken: delegation tokens (KIP-48) are not implemented",
    48: "DescribeClientQuotas: client quotas (KIP-546) are not implemented: Exactly never "
        "throttles (throttle time 0)",
    49: "AlterClientQuotas: client quotas (KIP-546) are not implemented",
    57: "UpdateFeatures (KIP-584): the finalized levels come from the configuration "
        "(transaction.version), fixed while the broker runs",
    64: "UnregisterBroker (KIP-631): a KRaft controller's API for removing brokers; one node",
    80: "AddRaftVoter (KIP-853): KRaft quorum membership; Exactly has no KRaft quorum",
    81: "RemoveRaftVoter (KIP-853): KRaft quorum membership; Exactly has no KRaft quorum",
    83: "InitializeShareGroupState (KIP-932): Kafka's share-group state persister, an "
        "inter-broker API; Exactly keeps share state in its own coordinator",
    84: "ReadShareGroupState (KIP-932): inter-broker share state persister API",
    85: "WriteShareGroupState (KIP-932): inter-broker share state persister API",
    86: "DeleteShareGroupState (KIP-932): inter-broker share state persister API",
    87: "ReadShareGroupStateSummary (KIP-932): inter-broker share state persister API",
    88: "StreamsGroupHeartbeat: streams groups (KIP-1071) are not implemented",
    89: "StreamsGroupDescribe: streams groups (KIP-1071) are not implemented",
    93: "Kafka 4.4's API 93, an inter-broker API of the share-group state persister "
        "(KIP-932) that kio 0.6.5 does not know",
    94: "Kafka 4.4's API 94, an inter-broker API of the share-group state persister "
        "(KIP-932) that kio 0.6.5 does not know",
}
_DRAFTS = {
    1289: "TxnShareAcknowledge: KIP-1289, a draft Exactly serves (exactly.protocol.drafts); "
          "Kafka 4.4 has no such API",
    1309: "TxnHeartbeat: KIP-1309, a draft Exactly serves (exactly.protocol.drafts); "
          "Kafka 4.4 has no such API",
}
_FEATURES_NOT_SUPPORTED = {
    "metadata.version": "Kafka's KRaft metadata log version (KIP-778): Exactly has no KRaft "
                        "metadata log",
    "kraft.version": "KRaft quorum membership (KIP-853): Exactly has no KRaft quorum",
    "eligible.leader.replicas.version": "eligible leader replicas (KIP-966): one node has no "
                                        "replicas to elect from",
    "streams.version": "streams groups (KIP-1071) are not implemented",
}


def _table_divergences(case_name: str, label: str) -> list[Divergence]:
    out = [Divergence(case_name, label, f"api_keys?api_key={key}?", reason)
           for key, reason in {**_NOT_SERVED, **_DRAFTS}.items()]
    out.append(Divergence(
        case_name, label, "api_keys?api_key=22?.max_version",
        "InitProducerId v6 (KIP-939's Enable2Pc/KeepPreparedTxn) and v7 (KIP-1309's session "
        "timeout, a draft): Kafka 4.4 serves v6 only with unstable.api.versions.enable"))
    return out


def _feature_divergences(case_name: str, label: str) -> list[Divergence]:
    out = []
    for name, reason in _FEATURES_NOT_SUPPORTED.items():
        if label != "v3" or name == "metadata.version":  # v3 lists no feature of minimum 0
            out.append(Divergence(case_name, label, f"supported_features?name=\"{name}\"?",
                                  reason))
        if name != "kraft.version":  # finalized at level 0 in Kafka: not listed
            out.append(Divergence(case_name, label, f"finalized_features?name=\"{name}\"?",
                                  reason))
    return out


DIVERGENCES: list[Divergence] = [
    d for version in range(6) for d in _table_divergences("api_versions.v0_to_v5", f"v{version}")
] + [
    d for version in range(3, 6)
    for d in _feature_divergences("api_versions.v0_to_v5", f"v{version}")
]


# What the report lists as open: left out of the comparison until Exactly serves it.
OPEN = {**{f"ApiVersions max version of API {k}": why for k, why in OPEN_MAX_VERSIONS.items()},
        **{f"ApiVersions feature {k}": why for k, why in OPEN_FEATURE_LEVELS.items()}}
