#!/usr/bin/env bash
# Apache Kafka 4.4 from Maven Central, for the tests and benchmarks that run it beside Exactly
# (tests.rigs.kafka.ApacheKafka). Resolves interop/jvm/pom.xml (the broker, its tools, the
# Java client, Kafka Streams and a log4j2 binding) into the Maven cache and writes the classpath
# Kafka is started with to interop/jvm/target/classpath.txt. No jar is committed or downloaded
# by hand; a second run with the cache filled takes a few seconds and needs no network.
#
# Usage: scripts/kafka-deps.sh [--print]
#   --print   print the classpath file's path when done
# Environment: EXACTLY_MAVEN_REPO  the Maven cache (default: Maven's own, ~/.m2/repository)
#              MVN                 the mvn command (default: mvn on PATH)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pom=$root/interop/jvm/pom.xml
out=$root/interop/jvm/target/classpath.txt
mvn=${MVN:-mvn}

if ! command -v "$mvn" >/dev/null 2>&1; then
    echo "scripts/kafka-deps.sh: no '$mvn' on PATH; Maven is needed to resolve Apache Kafka" >&2
    echo "  (Debian: apt-get install maven; scripts/system-deps.sh test installs it as root)" >&2
    exit 1
fi

# Up to date: the classpath was written from this pom and every jar on it is still in the cache.
stamp=$(sha256sum "$pom" | cut -c1-16)
if [ -f "$out" ] && [ "$(cat "$out.pom-hash" 2>/dev/null)" = "$stamp" ]; then
    ok=1
    IFS=: read -r -a jars < "$out" || true  # no newline at its end
    for jar in "${jars[@]}"; do [ -f "$jar" ] || { ok=0; break; }; done
    if [ "$ok" = 1 ]; then
        if [ "${1:-}" = --print ]; then echo "$out"; fi
        exit 0
    fi
fi

args=(-B -q -f "$pom" dependency:build-classpath "-Dmdep.outputFile=$out.tmp")
if [ -n "${EXACTLY_MAVEN_REPO:-}" ]; then args+=("-Dmaven.repo.local=$EXACTLY_MAVEN_REPO"); fi
echo "resolving Apache Kafka 4.4 with Maven (interop/jvm/pom.xml)" >&2
mkdir -p "$(dirname "$out")"
if ! "$mvn" "${args[@]}" >&2; then
    echo "scripts/kafka-deps.sh: Maven could not resolve interop/jvm/pom.xml (see above)" >&2
    exit 1
fi
mv "$out.tmp" "$out"
echo "$stamp" > "$out.pom-hash"
if [ "${1:-}" = --print ]; then echo "$out"; fi
