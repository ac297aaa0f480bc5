#!/usr/bin/env bash
# Generates the deepcopy functions of k8s/apis/v1alpha1 and the CRDs in
# deploy/crds from the Go types. Run it after changing the types and commit
# what it writes; k8s/apis/v1alpha1's test checks the committed CRDs match.
# OUT=<dir> writes the CRDs there instead (the test compares against that).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-deploy/crds}
# controller-gen is installed once per version into the cache (.ci/setup
# runs `scripts/gen-crds.sh --install`); tests use that binary only.
version=v0.23.0
cache="${EVALSI_CACHE:-/var/cache/evalsi}/controller-gen/$version"
if [ "$(id -u)" -ne 0 ] && [ -z "${EVALSI_CACHE:-}" ]; then cache="$HOME/.cache/evalsi/controller-gen/$version"; fi
if [ ! -x "$cache/controller-gen" ]; then
	if [ "${1:-}" = "--cached" ]; then echo "controller-gen $version is not built: bash scripts/gen-crds.sh --install" >&2; exit 3; fi
	mkdir -p "$cache"
	GOBIN="$cache" CGO_ENABLED=0 go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$version"
fi
if [ "${1:-}" = "--install" ]; then echo "$cache/controller-gen"; exit 0; fi
[ "${1:-}" = "--cached" ] && shift
CG="$cache/controller-gen"
if [ -z "${OUT:-}" ]; then
	CGO_ENABLED=0 $CG object paths=./k8s/apis/...
fi
CGO_ENABLED=0 $CG crd paths=./k8s/apis/... output:crd:artifacts:config="$out"
