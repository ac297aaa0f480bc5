#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests run (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl) from the Go
# module proxy and prints the directory that holds them. The test environment
# internal/testenv/kubetest runs them, with Debian's etcd and containerd, as a
# real cluster on loopback (see /work/shared/research/kubernetes-on-ci.md).
#
# Cached once per version under $EVALSI_CACHE/kubernetes/VERSION/bin (default
# /var/cache/evalsi for root, else ~/.cache/evalsi). The binaries are keyed on
# the Kubernetes and the Go version: VERSION/built-with records both, and a
# different Go rebuilds them. A second run prints the cached directory at
# once. The cold build takes minutes (about 5 on 2 cores) and a few GB of build
# cache; the binaries are about 400 MB.
#
# Usage: scripts/build-kubernetes.sh [--cached]   (KUBERNETES_VERSION=v1.37.2 to change it)
#   --cached   print the cached directory, or exit 3 without building
#              (tests use it: they never build)
set -euo pipefail

KUBERNETES_VERSION=${KUBERNETES_VERSION:-v1.37.2}
components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
if [ -z "${EVALSI_CACHE:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then EVALSI_CACHE=/var/cache/evalsi; else EVALSI_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/evalsi"; fi
fi
dir="$EVALSI_CACHE/kubernetes/$KUBERNETES_VERSION"
bin="$dir/bin"

have_all() {
  local c
  for c in "${components[@]}"; do [ -x "$bin/$c" ] || return 1; done
}

if [ "${1:-}" = "--cached" ]; then
  if have_all; then echo "$bin"; exit 0; fi
  echo "build-kubernetes: no cached Kubernetes $KUBERNETES_VERSION in $bin (run bash scripts/build-kubernetes.sh, or .ci/setup)" >&2
  exit 3
fi
command -v go >/dev/null || { echo "build-kubernetes: go is missing (install Go, see go.mod)" >&2; exit 1; }
stamp="kubernetes $KUBERNETES_VERSION $(go env GOVERSION)"
if have_all && [ "$(cat "$dir/built-with" 2>/dev/null)" = "$stamp" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "build-kubernetes: building Kubernetes $KUBERNETES_VERSION (${components[*]}; minutes)" >&2

# `go install k8s.io/kubernetes/cmd/...@vX` refuses the module because of its
# replace directives (its staging modules live in its own tree). A throwaway
# wrapper module requires k8s.io/kubernetes and points every staging module
# that k8s requires at v0.0.0 to its published release v0.X.Y instead.
src=$(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] && [ -f "$src/go.mod" ] || { echo "build-kubernetes: go mod download of k8s.io/kubernetes@$KUBERNETES_VERSION gave no source directory" >&2; exit 1; }
staging_version="v0.${KUBERNETES_VERSION#v1.}"
wrap="$tmp/wrap"
mkdir -p "$wrap"
{
  echo "module evalsi.local/kubernetes-build"
  grep -E '^(go|godebug) ' "$src/go.mod"
  echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
  # The require lines of k8s.io/* modules at v0.0.0 are the staging modules.
  sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) v0\.0\.0\([[:space:]].*\)\{0,1\}$#replace \1 => \1 '"$staging_version"'#p' "$src/go.mod" | sort -u
} >"$wrap/go.mod"
cat >"$wrap/tools.go" <<EOF
//go:build tools

package tools

import (
$(for c in "${components[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done)
)
EOF
echo "build-kubernetes: $(grep -c '^replace' "$wrap/go.mod") staging modules at $staging_version" >&2
(cd "$wrap" && GOWORK=off GOFLAGS=-mod=mod go mod tidy -e >&2 2>&1 || true)
(cd "$wrap" && GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" go get "k8s.io/kubernetes@$KUBERNETES_VERSION" >&2)
mkdir -p "$tmp/bin"
for c in "${components[@]}"; do
  echo "build-kubernetes: go build k8s.io/kubernetes/cmd/$c" >&2
  (cd "$wrap" && CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" \
    go build -trimpath -o "$tmp/bin/$c" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitTreeState=clean" \
    "k8s.io/kubernetes/cmd/$c" >&2)
done
# Swap the whole directory in, so a reader never sees a half-written set.
rm -rf "$bin.old"
[ -d "$bin" ] && mv "$bin" "$bin.old"
mv "$tmp/bin" "$bin"
rm -rf "$bin.old"
echo "$stamp" >"$dir/built-with"
echo "$bin"
