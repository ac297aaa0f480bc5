#!/usr/bin/env bash
# Builds a local Debian image for running benchmarks offline and prints its
# reference (oci-layout:PATH). Tasks that name registry images (ubuntu:24.04,
# buildpack-deps:jammy, python:3.13-slim…) can be pointed at it with
# environment.image_mirrors, so they run on machines that reach Debian's
# package mirrors but no container registry.
#
# The image: Debian bookworm, debootstrap's minbase variant plus python3,
# pip, pytest, git, tmux, openssl and CA certificates; pip may install into
# the system Python (the EXTERNALLY-MANAGED marker is removed, as in the
# python:* images tasks are written for). TAR_OPTIONS=--no-same-owner is set
# in the image's environment: user-namespace sandboxes (bwrap) map only
# root, so tar run as root there cannot restore other owners, as it would in
# Docker, and would fail.
#
# It is cached under $EVALSI_IMAGE_CACHE (default /var/cache/evalsi/images
# for root, else ~/.cache/evalsi/images), keyed by suite, package list and
# this script's recipe version: a second run prints the cached reference at
# once. CACHE/debian-SUITE always links to the last image built or found
# with the default packages, so specs can name a stable path
# (examples/agents/benchmarks-offline.yaml does). Needs root, debootstrap and umoci
# (apt-get install debootstrap umoci).
#
# Usage: scripts/build-local-image.sh [--print-key]
#   MIRROR=URL   Debian mirror (default: the machine's apt sources)
#   SUITE=NAME   Debian suite (default: bookworm)
#   PACKAGES=a,b extra packages to include
set -euo pipefail

RECIPE=2
SUITE="${SUITE:-bookworm}"
BASE_PACKAGES="python3,python3-pip,python3-pytest,git,tmux,ca-certificates,openssl"
INCLUDE="$BASE_PACKAGES${PACKAGES:+,$PACKAGES}"
if [[ "$(id -u)" == 0 ]]; then
	CACHE="${EVALSI_IMAGE_CACHE:-/var/cache/evalsi/images}"
else
	CACHE="${EVALSI_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/evalsi/images}"
fi

key="$(printf 'recipe=%s suite=%s include=%s arch=%s' "$RECIPE" "$SUITE" "$INCLUDE" "$(uname -m)" | sha256sum | cut -c1-16)"
out="$CACHE/debian-$SUITE-$key"
if [[ "${1:-}" == "--print-key" ]]; then
	echo "$out"
	exit 0
fi
# link points CACHE/debian-SUITE at the image, for the default packages.
link() {
	if [[ -z "${PACKAGES:-}" ]]; then
		ln -sfn "$(basename "$out")" "$CACHE/debian-$SUITE"
	fi
}
if [[ -f "$out/index.json" ]]; then
	link
	echo "oci-layout:$out"
	exit 0
fi

die() { echo "build-local-image: $*" >&2; exit 1; }
[[ "$(id -u)" == 0 ]] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
command -v umoci >/dev/null || die "umoci is not installed (apt-get install umoci)"

# The machine's own Debian mirror, from deb822 sources or sources.list.
mirror="${MIRROR:-}"
if [[ -z "$mirror" ]]; then
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f "$f" ]] || continue
		mirror="$(awk '/^URIs:/ {u=$2} /^Suites:/ && $0 ~ /(^|[ \t])'"$SUITE"'([ \t]|$)/ {print u; exit}' "$f")"
		[[ -n "$mirror" ]] && break
	done
fi
if [[ -z "$mirror" && -f /etc/apt/sources.list ]]; then
	mirror="$(awk '$1=="deb" && $3=="'"$SUITE"'" {print $2; exit}' /etc/apt/sources.list)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"

mkdir -p "$CACHE"
# One build at a time; a build that waited finds the other's image.
exec 9>"$CACHE/.lock"
flock 9
if [[ -f "$out/index.json" ]]; then
	link
	echo "oci-layout:$out"
	exit 0
fi
tmp="$(mktemp -d "$CACHE/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "build-local-image: debootstrap $SUITE from $mirror with $INCLUDE" >&2
umoci init --layout "$tmp/oci" >&2
umoci new --image "$tmp/oci:latest" >&2
umoci unpack --image "$tmp/oci:latest" "$tmp/bundle" >&2
debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$tmp/bundle/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$tmp/debootstrap.log" >&2; die "debootstrap failed"; }

root="$tmp/bundle/rootfs"
rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/* "$root"/var/log/*.log
# A stable hostname and resolver file; sandboxes bind their own.
echo localhost >"$root/etc/hostname"
: >"$root/etc/resolv.conf"

umoci repack --image "$tmp/oci:latest" "$tmp/bundle" >&2
umoci config --image "$tmp/oci:latest" \
	--config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	--config.env "LANG=C.UTF-8" \
	--config.env "TAR_OPTIONS=--no-same-owner" \
	--config.workingdir / \
	--config.cmd /bin/bash >&2
umoci gc --layout "$tmp/oci" >&2

rm -rf "$out"
mv "$tmp/oci" "$out"
link
echo "oci-layout:$out"
