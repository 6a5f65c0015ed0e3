#!/usr/bin/env bash
# Mermaid's own parser, used to check `suanli explain --mermaid` output (tests/processors/test_explain.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../tools/mermaid-check"
[ -d node_modules/mermaid ] || npm ci --no-audit --no-fund --loglevel=error
