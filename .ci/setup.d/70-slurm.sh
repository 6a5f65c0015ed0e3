#!/usr/bin/env bash
# Slurm 22.05 (slurmctld, slurmd, the client commands) and MUNGE from Debian, for the Slurm
# adapter (connectors/slurm.py) and its stack test (tests/deploy/test_slurm_plane.py). Only
# the binaries are wanted: deploy/slurm.py generates slurm.conf and a MUNGE key at run time
# under its own run directory and starts munged, slurmctld and four slurmd on 127.0.0.1 as
# the project's own processes. No service is enabled or started here: a policy-rc.d that
# refuses every start is in place while dpkg runs (Docker images ship one; otherwise a
# temporary one is written and removed), so the packages' init scripts start nothing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v munged >/dev/null 2>&1 || missing+=(munge)
command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
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
  # No recommends: the daemons and commands are all that deploy/slurm.py runs.
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
fi
echo "slurm: $(slurmctld -V 2>&1 | head -1), munge $(munged --version 2>&1 | head -1 | cut -d' ' -f1)"
