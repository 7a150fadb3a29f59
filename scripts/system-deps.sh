#!/usr/bin/env bash
# The system set-up step of `make test`, `make demo` and .ci/run: checks for the Debian packages
# the tests or the demo need and, when some are missing, installs them with apt-get as root, or
# (not root, or --check) names them with the command that installs them and exits 1.
# Silent, fast and without apt-get when nothing is missing.
#
# Usage: scripts/system-deps.sh [--check] test|demo
#   test  kcat (interop tests), openssl (test certificates), fuse3 + libfuse3-3 (power-cut tests
#         mount a FUSE filesystem), PostgreSQL's initdb/pg_ctl (dual-write tests),
#         chromium + chromedriver (the web console's browser tests), Java 17+ (PySpark, and
#         Apache Kafka 4.4 beside Exactly), Maven (resolves Kafka: scripts/kafka-deps.sh)
#   demo  Java 17+ (PySpark)
# Where it looks: PATH (commands, `id -u` and `ldconfig -p` included, so a test can hide or fake
# them), $JAVA_HOME/bin/java first as PySpark does, and PG_BIN_GLOB (default
# /usr/lib/postgresql/*/bin, where Debian puts initdb and pg_ctl; tests.rigs.postgres too).
set -euo pipefail

check_only=0
if [ "${1:-}" = --check ]; then check_only=1; shift; fi
target=${1:-}
case "$target" in
    test | demo) ;;
    *) echo "usage: $0 [--check] test|demo" >&2; exit 2 ;;
esac
PG_BIN_GLOB=${PG_BIN_GLOB:-/usr/lib/postgresql/*/bin}

have() { command -v "$1" >/dev/null 2>&1; }

have_libfuse3() {
    local ldconfig
    # Debian keeps ldconfig in /sbin, which is not on a normal user's PATH.
    ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
    # Not `| grep -q`: grep leaving early makes ldconfig die of SIGPIPE, a failure under pipefail.
    [[ "$("$ldconfig" -p 2>/dev/null || true)" == *libfuse3.so.3* ]]
}

have_postgres() {
    local dir
    if have pg_ctl && have initdb; then return 0; fi
    for dir in $PG_BIN_GLOB; do
        if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then return 0; fi
    done
    return 1
}

# PySpark 4 runs on Java 17 or later; it takes $JAVA_HOME/bin/java, else java on PATH.
have_java17() {
    local java=java version major
    if [ -n "${JAVA_HOME:-}" ]; then java=$JAVA_HOME/bin/java; fi
    version=$("$java" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1) || true
    major=${version%%.*}
    if [ "$major" = 1 ]; then major=$(echo "$version" | cut -d. -f2); fi  # 1.8.0 is Java 8
    [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -ge 17 ]
}

# What is missing, as Debian packages (one per line) and as what was looked for.
missing=()
reasons=()
need() {  # need PACKAGE WHAT-WAS-NOT-FOUND
    missing+=("$1")
    reasons+=("  $1: no $2")
}
find_missing() {
    missing=()
    reasons=()
    if [ "$target" = test ]; then
        have kcat || have kafkacat || need kcat "kcat on PATH"
        have openssl || need openssl "openssl on PATH"
        have fusermount3 || need fuse3 "fusermount3 on PATH"
        have_libfuse3 || need libfuse3-3 "libfuse3.so.3 in ldconfig's cache"
        have_postgres || need postgresql "pg_ctl and initdb on PATH or in $PG_BIN_GLOB"
        have chromium || need chromium "chromium on PATH (the web console's browser tests)"
        have chromedriver || need chromium-driver "chromedriver on PATH (the web console's browser tests)"
        have mvn || need maven "mvn on PATH (resolves Apache Kafka 4.4 from Maven Central)"
    fi
    have_java17 || need openjdk-17-jre-headless \
        "Java 17 or later (\$JAVA_HOME/bin/java, else java on PATH) for PySpark"
}

find_missing
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi

install_cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
uid=$(id -u)
if [ "$check_only" = 1 ] || [ "$uid" != 0 ]; then
    {
        echo "make $target needs system packages that are not installed:"
        printf '%s\n' "${reasons[@]}"
        echo "Install them (Debian/Ubuntu; elsewhere, the same packages by your system's means):"
        echo "  sudo sh -c '$install_cmd'"
        echo "or go on without them (what needs them fails): make $target SKIP_SYSTEM_DEPS=1"
    } >&2
    exit 1
fi

echo "installing ${missing[*]} (apt-get, as root)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

find_missing
if [ ${#missing[@]} -ne 0 ]; then
    echo "apt-get installed the packages, but these are still not found:" >&2
    printf '%s\n' "${reasons[@]}" >&2
    exit 1
fi
