#!/usr/bin/env bash
# Builds Jaeger (the v2, OTel-Collector-based binary, cmd/jaeger) from the Go
# module proxy and prints the binary's path. The tests of the traces dataset
# (internal/testenv/jaegertest) run it with in-memory storage on loopback
# ports, so a trace source is tested against a real Jaeger's query API.
#
# Cached once per version under $EVALSI_CACHE/jaeger/VERSION/jaeger (default
# /var/cache/evalsi for root, else ~/.cache/evalsi); a second run prints the
# cached path at once. The build is heavy (minutes, ~1 GB of module
# downloads and build cache the first time).
#
# Usage: scripts/build-jaeger.sh [--cached]   (JAEGER_VERSION=v1.76.0 to change it)
#   --cached   print the cached binary, or exit 3 without building
#              (tests use it: they never reach an outside address)
set -euo pipefail

# Jaeger's Go module keeps v1 tags: v1.76.0 is the release whose cmd/jaeger
# is Jaeger v2.13.
JAEGER_VERSION=${JAEGER_VERSION:-v1.76.0}
if [ -z "${EVALSI_CACHE:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then EVALSI_CACHE=/var/cache/evalsi; else EVALSI_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/evalsi"; fi
fi
dir="$EVALSI_CACHE/jaeger/${JAEGER_VERSION#v}"
bin="$dir/jaeger"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "build-jaeger: no cached Jaeger at $bin (run bash scripts/build-jaeger.sh, or .ci/setup)" >&2
  exit 3
fi
command -v go >/dev/null || { echo "build-jaeger: go is missing (install Go, see go.mod)" >&2; exit 1; }
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Built in the released module's own directory as the main module, with its
# own go.mod and go.sum (checked against the checksum database on download):
# `go install cmd@version` refuses modules with replace directives, which
# Jaeger's go.mod has.
echo "build-jaeger: building github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION (a few minutes)" >&2
src=$(cd "$tmp" && GOWORK=off go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] && [ -f "$src/go.mod" ] || { echo "build-jaeger: go mod download of github.com/jaegertracing/jaeger@$JAEGER_VERSION gave no source directory" >&2; exit 1; }
(cd "$src" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" GOWORK=off \
  go build -trimpath -o "$tmp/jaeger" ./cmd/jaeger >&2)
mv "$tmp/jaeger" "$bin"
echo "$bin"
