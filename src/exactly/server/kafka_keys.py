"""Apache Kafka 4.4's broker config keys that Exactly does not declare, decided key by key, so
that a server.properties copied from Kafka starts Exactly (config.py asks here before calling a
key unknown):

- IGNORED: accepted, with a warning in the broker's log saying why the key changes nothing
  here (replication, KRaft quorum, tiered storage, thread pools, quotas, Kerberos/OAuth...).
- REFUSED: refused with a message saying what to do instead: a key whose silent absence would
  change what the broker lets through (a plugin class, a policy, a password for a keystore type
  Exactly does not read).

A key in neither table, and not one of Exactly's (config.KEYS), is a typo: config.py refuses it
with the closest known key.
"""

from __future__ import annotations

# -- reasons ----------------------------------------------------------------------------------

ONE_NODE = ("Exactly is one node with one replica per partition: replication, leader "
            "election and rack placement settings have nothing to act on")
NO_KRAFT = ("Exactly is one node without a KRaft quorum: there is no controller, metadata log "
            "or inter-broker listener to configure")
NO_TIERED = "Exactly has no tiered storage (KIP-405): the log stays on the local disk"
NO_THREADS = ("Exactly runs one event loop: Kafka's thread pools and purgatory sweeps have no "
              "counterpart")
NO_QUOTAS = "Exactly has no client quotas (KIP-13): quota windows have nothing to measure"
NO_METRICS = ("Exactly's metrics are Prometheus text on metrics.listen: Kafka's JMX reporters "
              "and sampling settings do not apply")
NO_KERBEROS = ("Exactly's SASL mechanisms are PLAIN and SCRAM: Kerberos (GSSAPI) and "
               "OAUTHBEARER settings have nothing to configure")
NO_STREAMS = "Exactly has no Kafka Streams groups (KIP-1071): their settings do not apply"
NO_TUNING = ("a Kafka tuning knob with no counterpart in Exactly's storage or network layer: "
             "the behaviour it tunes is fixed here")
NO_TOKENS = "Exactly has no delegation tokens (KIP-48)"
NOT_YET = ("not implemented by Exactly: the setting is accepted so that Kafka's config files "
           "load, and Kafka's default behaviour applies")

_PREFIXES: tuple[tuple[str, str], ...] = (
    ("controller.", NO_KRAFT),
    ("metadata.", NO_KRAFT),
    ("internal.metadata.", NO_KRAFT),
    ("remote.log.", NO_TIERED),
    ("remote.", NO_TIERED),
    ("log.remote.", NO_TIERED),
    ("log.local.", NO_TIERED),
    ("replica.", ONE_NODE),
    ("replication.quota.", ONE_NODE),
    ("alter.log.dirs.replication.quota.", ONE_NODE),
    ("unclean.leader.election.", ONE_NODE),
    ("leader.imbalance.", ONE_NODE),
    ("group.streams.", NO_STREAMS),
    ("sasl.kerberos.", NO_KERBEROS),
    ("sasl.oauthbearer.", NO_KERBEROS),
    ("sasl.login.", NO_KERBEROS),
    ("delegation.token.", NO_TOKENS),
    ("metrics.", NO_METRICS),
    ("kafka.metrics.", NO_METRICS),
    ("errors.deadletterqueue.", NOT_YET),
)

_KEYS: dict[str, str] = {
    # KRaft and the inter-broker side
    "process.roles": NO_KRAFT,
    "inter.broker.listener.name": NO_KRAFT,
    "security.inter.broker.protocol": NO_KRAFT,
    "sasl.mechanism.controller.protocol": NO_KRAFT,
    "sasl.mechanism.inter.broker.protocol": NO_KRAFT,
    "initial.broker.registration.timeout.ms": NO_KRAFT,
    "broker.heartbeat.interval.ms": NO_KRAFT,
    "broker.session.timeout.ms": NO_KRAFT,
    "controlled.shutdown.enable": NO_KRAFT,
    "early.start.listeners": NO_KRAFT,
    "server.max.startup.time.ms": NO_KRAFT,
    "unstable.api.versions.enable": NO_KRAFT,
    "unstable.feature.versions.enable": NO_KRAFT,
    "cordoned.log.dirs": ONE_NODE,
    # replication
    "min.insync.replicas": ONE_NODE,
    "offsets.topic.replication.factor": ONE_NODE,
    "transaction.state.log.replication.factor": ONE_NODE,
    "transaction.state.log.min.isr": ONE_NODE,
    "share.coordinator.state.topic.replication.factor": ONE_NODE,
    "share.coordinator.state.topic.min.isr": ONE_NODE,
    "auto.leader.rebalance.enable": ONE_NODE,
    "broker.rack": ONE_NODE,
    "num.replica.fetchers": ONE_NODE,
    "num.replica.alter.log.dirs.threads": ONE_NODE,
    "follower.fetch.last.tiered.offset.enable": NO_TIERED,
    # threads, purgatories, loading buffers
    "background.threads": NO_THREADS,
    "num.recovery.threads.per.data.dir": NO_THREADS,
    "log.cleaner.threads": NO_THREADS,
    "group.coordinator.threads": NO_THREADS,
    "group.coordinator.background.threads": NO_THREADS,
    "share.coordinator.threads": NO_THREADS,
    "queued.max.requests": NO_THREADS,
    "fetch.purgatory.purge.interval.requests": NO_THREADS,
    "producer.purgatory.purge.interval.requests": NO_THREADS,
    "delete.records.purgatory.purge.interval.requests": NO_THREADS,
    "share.fetch.purgatory.purge.interval.requests": NO_THREADS,
    "offsets.load.buffer.size": NO_TUNING,
    "transaction.state.log.load.buffer.size": NO_TUNING,
    "share.coordinator.load.buffer.size": NO_TUNING,
    "group.coordinator.append.linger.ms": NO_TUNING,
    "group.coordinator.cached.buffer.max.bytes": NO_TUNING,
    "share.coordinator.append.linger.ms": NO_TUNING,
    "share.coordinator.cached.buffer.max.bytes": NO_TUNING,
    "share.coordinator.write.timeout.ms": NO_TUNING,
    "share.coordinator.cold.partition.snapshot.interval.ms": NO_TUNING,
    "share.coordinator.state.topic.compression.codec": NO_TUNING,
    "share.coordinator.state.topic.prune.interval.ms": NO_TUNING,
    "offsets.topic.compression.codec": NO_TUNING,
    "log.cleaner.dedupe.buffer.size": NO_TUNING,
    "log.cleaner.io.buffer.load.factor": NO_TUNING,
    "log.cleaner.io.buffer.size": NO_TUNING,
    "log.flush.scheduler.interval.ms": NO_TUNING,
    "log.flush.start.offset.checkpoint.interval.ms": NO_TUNING,
    "log.initial.task.delay.ms": NO_TUNING,
    "log.dir.failure.timeout.ms": NO_TUNING,
    "log.segment.delete.delay.ms": NO_TUNING,
    "log.preallocate": NO_TUNING,
    "socket.send.buffer.bytes": NO_TUNING,
    "socket.receive.buffer.bytes": NO_TUNING,
    "socket.listen.backlog.size": NO_TUNING,
    "socket.connection.setup.timeout.ms": NO_TUNING,
    "socket.connection.setup.timeout.max.ms": NO_TUNING,
    "request.timeout.ms": NO_TUNING,
    "connection.failed.authentication.delay.ms": NO_TUNING,
    "max.incremental.fetch.session.cache.slots": NO_TUNING,
    "max.request.partition.size.limit": NO_TUNING,
    "telemetry.max.bytes": NO_TUNING,
    "transaction.remove.expired.transaction.cleanup.interval.ms": NO_TUNING,
    "add.partitions.to.txn.retry.backoff.ms": NO_TUNING,
    "add.partitions.to.txn.retry.backoff.max.ms": NO_TUNING,
    # quotas
    "quota.window.num": NO_QUOTAS,
    "quota.window.size.seconds": NO_QUOTAS,
    "max.connection.creation.rate": NO_QUOTAS,
    # group coordinator knobs of KIP-848/KIP-932's server-side assignors
    "group.coordinator.rebalance.protocols": NOT_YET,
    "group.max.size": NOT_YET,
    "group.consumer.assignment.interval.ms": NOT_YET,
    "group.consumer.min.assignment.interval.ms": NOT_YET,
    "group.consumer.max.assignment.interval.ms": NOT_YET,
    "group.consumer.assignor.offload.enable": NOT_YET,
    "group.consumer.regex.refresh.interval.ms": NOT_YET,
    "group.share.assignment.interval.ms": NOT_YET,
    "group.share.min.assignment.interval.ms": NOT_YET,
    "group.share.max.assignment.interval.ms": NOT_YET,
    "group.share.assignor.offload.enable": NOT_YET,
    "group.share.assignors": NOT_YET,
    "group.share.initialize.retry.interval.ms": NOT_YET,
    "group.share.min.partition.max.record.locks": NOT_YET,
    "group.share.max.partition.max.record.locks": NOT_YET,
    "offset.metadata.max.bytes": NOT_YET,
    "max.decompressed.message.bytes": NOT_YET,
    "ssl.endpoint.identification.algorithm": NOT_YET,
    "ssl.allow.dn.changes": NOT_YET,
    "ssl.allow.san.changes": NOT_YET,
}

# Refused: ignoring these would silently change who may do what, or which data is accepted.
REFUSED: dict[str, str] = {
    "principal.builder.class": "Exactly builds principals itself (User:<name> from SASL or the "
                               "TLS subject); a Java class cannot be loaded: remove the key",
    "sasl.server.callback.handler.class": "a Java callback handler cannot be loaded; give PLAIN "
                                          "users with sasl.plain.users, SCRAM users with "
                                          "AlterUserScramCredentials",
    "sasl.client.callback.handler.class": "a Java callback handler cannot be loaded: remove it",
    "sasl.jaas.config": "Exactly does not read JAAS: give PLAIN users with sasl.plain.users",
    "alter.config.policy.class.name": "a Java AlterConfigPolicy cannot be loaded; Exactly "
                                      "would accept the changes the policy refuses: remove it",
    "create.topic.policy.class.name": "a Java CreateTopicPolicy cannot be loaded; Exactly would "
                                      "accept the topics the policy refuses: remove it",
    "client.quota.callback.class": "Exactly has no client quotas: remove the key",
    "replica.selector.class": "a Java ReplicaSelector cannot be loaded (one replica here): "
                              "remove the key",
    "config.providers": "Exactly does not resolve ${provider:...} references: write the values",
    "security.providers": "Java security providers cannot be loaded: remove the key",
    "ssl.engine.factory.class": "a Java SSL engine factory cannot be loaded: give PEM files "
                                "(ssl.keystore.location/ssl.truststore.location)",
    "ssl.keystore.password": "Exactly reads PEM keys, not password-protected JKS/PKCS12 "
                             "keystores: convert the keystore to PEM",
    "ssl.truststore.password": "Exactly reads PEM trust stores, not JKS/PKCS12: convert it to "
                               "PEM",
    "ssl.principal.mapping.rules": "Exactly maps the TLS subject to User:<subject> as Kafka's "
                                   "DEFAULT rule does; other rules are not implemented",
    "sasl.kerberos.principal.to.local.rules": "Kerberos is not supported: remove the key",
    "group.share.persister.class.name": "a Java share-state persister cannot be loaded: "
                                        "remove the key",
    "group.share.dlq.manager.class.name": "a Java class cannot be loaded: remove the key",
    "group.streams.topology.description.plugin.class": "a Java class cannot be loaded: remove "
                                                       "the key",
    "sasl.login.class": "a Java login class cannot be loaded: remove the key",
    "sasl.login.callback.handler.class": "a Java callback handler cannot be loaded: remove it",
}


# Accepted at Kafka's default value only (the behaviour Exactly has); any other value is
# refused, with what to use instead.
DEFAULT_ONLY: dict[str, tuple[tuple[str, ...], str]] = {
    "compression.type": (("producer",), ("Exactly keeps batches as the producer compressed "
                                         "them; set compression.type per topic")),
    "log.cleanup.policy": (("delete",), "set cleanup.policy per topic (CreateTopics configs)"),
    "log.message.timestamp.type": (("CreateTime",), "set message.timestamp.type per topic"),
    "log.flush.interval.messages": (("9223372036854775807",),
                                    "Exactly's durability is log.flush.policy"),
    "log.flush.interval.ms": (("", "null", "9223372036854775807"),
                              "Exactly's durability is log.flush.policy"),
    "log.message.timestamp.before.max.ms": (("9223372036854775807",),
                                            "Exactly does not bound timestamps"),
    "log.message.timestamp.after.max.ms": (("3600000", "9223372036854775807"),
                                           "Exactly does not bound timestamps"),
    "ssl.enabled.protocols": (("TLSv1.2,TLSv1.3", "TLSv1.2, TLSv1.3"),
                              "Exactly accepts TLS 1.2 and 1.3, as Kafka's default"),
    "ssl.cipher.suites": (("",), "Exactly uses Python's default cipher suites"),
    "connections.max.reauth.ms": (("0",), "Exactly does not re-authenticate (KIP-368)"),
}

_KEYS.update({
    "compression.gzip.level": NO_TUNING,  # only used when the broker recompresses: never here
    "compression.lz4.level": NO_TUNING,
    "compression.zstd.level": NO_TUNING,
    "log.roll.jitter.hours": NO_TUNING,
    "log.roll.jitter.ms": NO_TUNING,
    "metric.reporters": NO_METRICS,
    "listener.security.protocol.map": (
        "Exactly's listener names are their security protocols (PLAINTEXT://, SASL_SSL://...); "
        "a CONTROLLER listener is left out (there is no KRaft controller)"),
    "ssl.protocol": "Python's ssl module negotiates the protocol (TLS 1.2 or 1.3)",
    "ssl.keymanager.algorithm": "a Java key manager setting: Exactly reads PEM files",
    "ssl.trustmanager.algorithm": "a Java trust manager setting: Exactly reads PEM files",
    "ssl.provider": "a Java security provider setting: Exactly uses OpenSSL through Python",
    "ssl.secure.random.implementation": "a Java setting: Exactly uses the OS's random source",
})
REFUSED["ssl.truststore.certificates"] = ("give the trusted certificates as a PEM file with "
                                          "ssl.truststore.location")


def default_only(name: str, value: str) -> str | None:
    """Why `name=value` is refused (a Kafka key Exactly implements at its default only); None
    when the value is that default, or the key is not such a key."""
    known = DEFAULT_ONLY.get(name)
    if known is None:
        return None
    defaults, instead = known
    if value.strip() in defaults:
        return None
    return (f"Exactly implements only Kafka's default {defaults[0]!r} for {name}: {instead}")


def ignored_reason(name: str) -> str | None:
    """Why `name` (a Kafka broker key Exactly does not declare) is accepted and ignored; None
    if it is not such a key."""
    if name in REFUSED:
        return None
    if name in DEFAULT_ONLY:
        return "its value is Kafka's default, which is Exactly's behaviour"
    if name in _KEYS:
        return _KEYS[name]
    for prefix, reason in _PREFIXES:
        if name.startswith(prefix):
            return reason
    return None


def refused_reason(name: str) -> str | None:
    """Why `name` (a Kafka broker key) is refused, and what to do instead; None if it is not."""
    return REFUSED.get(name)
