#!/usr/bin/env bash
# Dependencies of the producers under clients/ (tests/clients): run by .ci/run as root
# before the tests, on Debian with Go, Java 17, Maven and Node 20 preinstalled. Idempotent;
# on a warm cache (Go module cache, ~/.m2, npm cache) it only checks and rebuilds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export DEBIAN_FRONTEND=noninteractive

missing=()
for tool in kcat curl perl; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if (( ${#missing[@]} > 0 )); then
  echo "   apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Go's tarball install is on PATH only through a login shell's profile.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then export PATH="/usr/local/go/bin:$PATH"; fi
for tool in go java mvn node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "20-clients: '$tool' is not installed (a preinstalled toolchain)" >&2; exit 1; }
done

t0=$SECONDS
echo "   go: modules and build ($(go version | cut -d' ' -f3))"
(cd clients/go && go mod download && go build -o bin/ ./cmd/...)
echo "   java: mvn package"
mvn -q -B -Dstyle.color=never -f clients/java/pom.xml package -DskipTests
echo "   typescript: npm ci and build (node $(node --version))"
[ -d clients/typescript/node_modules ] || npm ci --prefix clients/typescript --no-audit --no-fund --loglevel=error
npm run --prefix clients/typescript -s build
echo "   clients ready in $(( SECONDS - t0 ))s"
