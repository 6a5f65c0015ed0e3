#!/usr/bin/env bash
# The public API's extra toolchain: Go, and the Go modules of the gRPC client in
# clients/grpc-go (fetched once from the Go module proxy; builds are offline afterwards).
# The Python side (fastapi, uvicorn, grpcio, grpcio-tools, schemathesis) comes from
# pyproject.toml through bin/suanli. The proto compiler is the one bundled with grpcio-tools,
# so no system protoc is needed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "installing Go from Debian (go.mod's toolchain line fetches a newer one if needed)"
  apt-get update -qq
  apt-get install -y -qq golang-go >/dev/null
fi
go version

cd clients/grpc-go
go mod download
# Warm the build cache: the client and the stub generators (tool directives in go.mod).
go build ./...
go build -o /dev/null google.golang.org/protobuf/cmd/protoc-gen-go
go build -o /dev/null google.golang.org/grpc/cmd/protoc-gen-go-grpc
