#!/usr/bin/env bash
# kcat (Debian) for the foreign-reader test (tests/streams/test_wire_on_kafka.py); openssl below.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"
command -v kcat >/dev/null 2>&1 || apt_install kcat
# openssl (Debian) makes the self-signed certificate of the API's TLS test (tests/api/test_api_tls.py).
command -v openssl >/dev/null 2>&1 || apt_install openssl
