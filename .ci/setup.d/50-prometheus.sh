#!/usr/bin/env bash
# Prometheus and node_exporter from Debian, for the Prometheus source connector's tests
# (tests/deploy/test_prometheus.py, tests/connectors/test_prometheus_source.py). Only the
# binaries are wanted: deploy/prometheus.py starts both as the project's own processes on
# 127.0.0.1 (19090, 19100). No service is enabled or started here: a policy-rc.d that
# refuses every start is in place while dpkg runs (Docker images ship one; otherwise a
# temporary one is written and removed), so the packages' init scripts never bind 0.0.0.0.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"

missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v prometheus-node-exporter >/dev/null 2>&1 || missing+=(prometheus-node-exporter)
apt_install "${missing[@]}"
echo "prometheus: $(prometheus --version 2>&1 | head -1 | cut -d' ' -f3), node_exporter $(prometheus-node-exporter --version 2>&1 | head -1 | cut -d' ' -f3)"
