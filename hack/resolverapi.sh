#!/usr/bin/env bash
# Regenerates httpsig/resolverapi/api.pb.go from api.proto: protoc (Debian's
# protobuf-compiler) and protoc-gen-go at the version go.mod pins for
# google.golang.org/protobuf. The service (service.go) is written by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "resolverapi: protoc is missing: apt-get install protobuf-compiler" >&2; exit 2; }
version=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install "google.golang.org/protobuf/cmd/protoc-gen-go@$version"
PATH=$bin:$PATH protoc --go_out=. --go_opt=paths=source_relative httpsig/resolverapi/api.proto
