#!/usr/bin/env bash
# Builds Docker Compose v2 (the `docker compose` CLI plugin) from the Go
# module proxy, once per version, and prints the binary's path. bench/peers
# needs it: Inspect AI's Docker sandbox shells out to `docker compose` (>=
# 2.21), and Debian's docker.io 20.10 has no compose plugin (Debian's
# docker-compose package is the Python v1, which Inspect does not accept).
#
# The binary goes to $EVALSI_COMPOSE_CACHE/<version>/docker-compose (default
# /var/cache/evalsi/compose for root, else ~/.cache/evalsi/compose); nothing
# is installed system-wide. bench/peers points the docker CLI at it for the
# peer only (DOCKER_CONFIG=<tempdir> with cli-plugins/docker-compose).
# Idempotent: a second run prints the cached path at once. `go install
# …@version` refuses the module (its go.mod has exclude directives), so the
# module is downloaded from the proxy and built in a temporary copy as its
# own main module, with its own go.sum; the version is stamped the way
# compose's Makefile does (-X internal.Version), since Inspect parses
# `docker compose version`.
#
# Usage: scripts/build-compose.sh [VERSION]   (default v2.40.3)
set -euo pipefail
VERSION="${1:-v2.40.3}"
if [[ "$(id -u)" == 0 ]]; then
	CACHE="${EVALSI_COMPOSE_CACHE:-/var/cache/evalsi/compose}"
else
	CACHE="${EVALSI_COMPOSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/evalsi/compose}"
fi
out="$CACHE/$VERSION/docker-compose"
if [[ -x "$out" ]] && "$out" version --short 2>/dev/null | grep -qx "${VERSION#v}"; then
	echo "$out"
	exit 0
fi
command -v go >/dev/null || { echo "build-compose: go is not installed" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "build-compose: building github.com/docker/compose/v2@$VERSION (a few minutes the first time)" >&2
src="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/docker/compose/v2@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$src" ]] || { echo "build-compose: go mod download github.com/docker/compose/v2@$VERSION gave no source directory" >&2; exit 1; }
cp -r "$src" "$tmp/src"
chmod -R u+w "$tmp/src"
(cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath -mod=mod -o "$tmp/docker-compose" \
	-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$VERSION" ./cmd)
mkdir -p "$CACHE/$VERSION"
install -m 0755 "$tmp/docker-compose" "$out.tmp"
mv -f "$out.tmp" "$out"
got="$("$out" version --short)"
[[ "$got" == "${VERSION#v}" ]] || { echo "build-compose: built binary reports version $got, want ${VERSION#v}" >&2; exit 1; }
echo "$out"
