#!/usr/bin/env bash
# kcat (Debian) for the foreign-reader test (tests/streams/test_wire_on_kafka.py).
set -euo pipefail
if ! command -v kcat >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq kcat >/dev/null
fi
