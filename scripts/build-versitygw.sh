#!/usr/bin/env bash
# Builds versitygw (an S3-compatible gateway, Apache-2.0) from the Go module
# proxy and prints the binary's path. The S3 tests (internal/testenv/s3test)
# run it with a posix backend in the test's temp dir on a loopback port, so
# store/s3store and the server's storage.s3 are tested against a real S3 API.
#
# Cached once per version at $EVALSI_CACHE/versitygw/VERSION/versitygw
# (default /var/cache/evalsi for root, else ~/.cache/evalsi); a second run
# prints the cached path at once. Not a dependency of evals.si's go.mod: it
# is built as its own module, in a throwaway GOPATH.
#
# Usage: scripts/build-versitygw.sh [--cached]   (VERSITYGW_VERSION=v1.8.0 to change it)
#   --cached   print the cached binary, or exit 3 without building
#              (tests use it: they never reach an outside address)
set -euo pipefail

VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
if [ -z "${EVALSI_CACHE:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then EVALSI_CACHE=/var/cache/evalsi; else EVALSI_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/evalsi"; fi
fi
dir="$EVALSI_CACHE/versitygw/$VERSITYGW_VERSION"
bin="$dir/versitygw"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "build-versitygw: no cached versitygw at $bin (run bash scripts/build-versitygw.sh, or .ci/setup)" >&2
  exit 3
fi
command -v go >/dev/null || { echo "build-versitygw: go is missing (install Go, see go.mod)" >&2; exit 1; }
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
# -modcacherw: the throwaway module cache is writable, so rm -rf removes it.
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
echo "build-versitygw: building github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION (a few minutes)" >&2
# go install cmd@version builds the released module with its own go.mod and
# go.sum (checked against the checksum database), outside any workspace.
(cd "$tmp" && CGO_ENABLED=0 GOWORK=off GOPATH="$tmp/gopath" GOBIN="$tmp/bin" \
  GOFLAGS="-modcacherw -buildvcs=false" GOCACHE="${GOCACHE:-$(go env GOCACHE)}" \
  go install -trimpath "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2)
mv "$tmp/bin/versitygw" "$bin"
echo "$bin"
