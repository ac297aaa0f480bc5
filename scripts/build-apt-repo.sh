#!/usr/bin/env bash
# Builds a small Debian package repository from a few real .debs, for tests
# whose task Dockerfiles run `apt-get update && apt-get install`: the tests
# serve it from a test host of their own (internal/testenv/aptrepo) and point
# the image's apt sources at it, so no test reaches an outside address.
#
# The .debs are downloaded once with the machine's own apt sources (this is
# setup, not a test) and cached with the index made by Debian's tools:
# dpkg-scanpackages (dpkg-dev) writes Packages, apt-ftparchive (apt-utils)
# writes Release. The repository is flat: a sources line
# `deb [trusted=yes] http://HOST/ ./` reaches it. The packages are for the
# machine's Debian release, the one scripts/build-local-image.sh images use.
#
# Prints the repository's directory. Cached under $EVALSI_APT_REPO (default
# /var/cache/evalsi/apt-repo for root, else ~/.cache/evalsi/apt-repo), keyed
# by the package list; a second run prints it at once.
#
# Usage: scripts/build-apt-repo.sh [--cached]   (PACKAGES="hello figlet" to change the set)
#   --cached   print the cached repository, or exit 3 without downloading
#              (tests use it: they never reach an outside address)
set -euo pipefail

PACKAGES=${PACKAGES:-"hello figlet"}
if [ -z "${EVALSI_APT_REPO:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then EVALSI_APT_REPO=/var/cache/evalsi/apt-repo; else EVALSI_APT_REPO="$HOME/.cache/evalsi/apt-repo"; fi
fi
key=$(printf '%s\n' "$PACKAGES" | sha256sum | cut -c1-12)
dir="$EVALSI_APT_REPO/$key"
if [ -s "$dir/Release" ] && [ -s "$dir/Packages" ]; then
  echo "$dir"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "build-apt-repo: no cached repository at $dir (run bash scripts/build-apt-repo.sh, or .ci/setup)" >&2
  exit 3
fi
for tool in dpkg-scanpackages apt-ftparchive; do
  command -v "$tool" >/dev/null || { echo "build-apt-repo: $tool is missing (apt-get install dpkg-dev apt-utils)" >&2; exit 1; }
done
tmp=$(mktemp -d "$EVALSI_APT_REPO.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$EVALSI_APT_REPO" && mktemp -d "$EVALSI_APT_REPO.tmp.XXXXXX"; })
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
(cd "$tmp" && apt-get download $PACKAGES >/dev/null 2>&1) || {
  # A machine whose package lists are stale gets them refreshed once.
  apt-get update -qq >/dev/null 2>&1 || true
  (cd "$tmp" && apt-get download $PACKAGES >/dev/null)
}
# Release is written beside the directory, then moved in: apt-ftparchive
# would otherwise list the half-written Release in itself.
(cd "$tmp" && dpkg-scanpackages --multiversion . /dev/null > Packages 2>/dev/null && gzip -9 -k Packages && apt-ftparchive release . > "$tmp.Release")
mv "$tmp.Release" "$tmp/Release"
chmod 755 "$tmp"
mkdir -p "$EVALSI_APT_REPO"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
