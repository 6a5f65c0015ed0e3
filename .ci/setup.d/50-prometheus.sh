#!/usr/bin/env bash
# Prometheus and node_exporter from Debian, for the Prometheus source connector's tests
# (tests/deploy/test_prometheus.py, tests/connectors/test_prometheus_source.py). Only the
# binaries are wanted: deploy/prometheus.py starts both as the project's own processes on
# 127.0.0.1 (19090, 19100). No service is enabled or started here: a policy-rc.d that
# refuses every start is in place while dpkg runs (Docker images ship one; otherwise a
# temporary one is written and removed), so the packages' init scripts never bind 0.0.0.0.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v prometheus-node-exporter >/dev/null 2>&1 || missing+=(prometheus-node-exporter)
if (( ${#missing[@]} > 0 )); then
  echo "   apt-get install ${missing[*]}"
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  # The package lists are refreshed only when they do not know a candidate for a package.
  for pkg in "${missing[@]}"; do
    if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      apt-get update -qq
      break
    fi
  done
  # No recommends: prometheus-node-exporter-collectors would bring systemd timers and more.
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
fi
echo "prometheus: $(prometheus --version 2>&1 | head -1 | cut -d' ' -f3), node_exporter $(prometheus-node-exporter --version 2>&1 | head -1 | cut -d' ' -f3)"
