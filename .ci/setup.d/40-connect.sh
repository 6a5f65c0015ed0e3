#!/usr/bin/env bash
# Kafka Connect + PostgreSQL for tests/deploy/test_connect.py (see deploy/connect/README.md).
#   - PostgreSQL server binaries from Debian (the tests start their own server through
#     deploy/postgres.py on 127.0.0.1:15432; no system cluster is created or started);
#   - javac, to compile the DecisionRow transform (deploy/connect/smt);
#   - the Connect worker and plugin jars, resolved into ~/.m2 once, so the tests only copy them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export DEBIAN_FRONTEND=noninteractive

missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
if [ "${#missing[@]}" -gt 0 ]; then
  # Only the binaries are wanted: keep postgresql-common from creating and starting a "main" cluster.
  mkdir -p /etc/postgresql-common
  [ -e /etc/postgresql-common/createcluster.conf ] || echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

settings=deploy/connect/maven-settings.xml
mvn -q -B -Dstyle.color=never -s "$settings" -f deploy/connect/pom.xml dependency:resolve >/dev/null
for pom in deploy/connect/plugins/*/pom.xml; do
  mvn -q -B -Dstyle.color=never -s "$settings" -f "$pom" dependency:resolve >/dev/null
done
echo "connect: PostgreSQL $(ls /usr/lib/postgresql | sort -n | tail -1), javac $(javac -version 2>&1 | cut -d' ' -f2), Connect jars in ~/.m2"
