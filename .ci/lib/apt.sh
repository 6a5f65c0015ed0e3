# Sourced by the steps in .ci/setup.d: `apt_install PKG...` installs Debian packages quietly.
# - No service is enabled or started: a policy-rc.d that refuses every start is in place while
#   dpkg runs (Docker images ship one; otherwise a temporary one is written and removed), so
#   no package's init script binds anything; the project starts its daemons itself, on loopback.
# - The package lists are refreshed only when they know no candidate for one of the packages.
# - No recommends: the binaries the project runs are all it wants.
apt_install() {
  (( $# > 0 )) || return 0
  echo "   apt-get install $*"
  local policy=/usr/sbin/policy-rc.d made="" pkg rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    made=1
  fi
  for pkg in "$@"; do
    if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      apt-get update -qq || rc=$?
      break
    fi
  done
  if (( rc == 0 )); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 \
      "$@" >/dev/null || rc=$?
  fi
  if [ -n "$made" ]; then rm -f "$policy"; fi
  return "$rc"
}
