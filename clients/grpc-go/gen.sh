#!/usr/bin/env bash
# Regenerate the Go stubs in suanlipb/ from ../../schemas/proto/suanli.proto.
#
#   ./gen.sh            # rewrite suanlipb/
#   ./gen.sh DIR        # write them to DIR instead (tests compare DIR with suanlipb/)
#
# The compiler is the protoc bundled with grpcio-tools (PYTHON, default ../../.venv/bin/python),
# the same one that makes the Python stubs; the plugins are built from the versions pinned in
# go.mod (`tool` directives), so the output is reproducible offline once `go mod download` ran.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/suanlipb}
python=${PYTHON:-$here/../../.venv/bin/python}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$here" && go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)
mapping=Msuanli.proto=github.com/suanli/suanli/clients/grpc-go/suanlipb
mkdir -p "$out"
"$python" -m grpc_tools.protoc -I "$here/../../schemas/proto" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=paths=source_relative,$mapping \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative,$mapping \
  suanli.proto
