#!/usr/bin/env bash
# Slurm 22.05 (slurmctld, slurmd, the client commands) and MUNGE from Debian, for the Slurm
# adapter (connectors/slurm.py) and its stack test (tests/deploy/test_slurm_plane.py). Only
# the binaries are wanted: deploy/slurm.py generates slurm.conf and a MUNGE key at run time
# under its own run directory and starts munged, slurmctld and four slurmd on 127.0.0.1 as
# the project's own processes. No service is enabled or started here: a policy-rc.d that
# refuses every start is in place while dpkg runs (Docker images ship one; otherwise a
# temporary one is written and removed), so the packages' init scripts start nothing.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"

missing=()
command -v munged >/dev/null 2>&1 || missing+=(munge)
command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
apt_install "${missing[@]}"
echo "slurm: $(slurmctld -V 2>&1 | head -1), munge $(munged --version 2>&1 | head -1 | cut -d' ' -f1)"
