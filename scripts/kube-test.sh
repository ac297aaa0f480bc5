#!/usr/bin/env bash
# Runs the Kubernetes tests alone: every package whose tests use the real
# test cluster of internal/testenv/kubetest. Builds the Kubernetes binaries
# first if they are missing (scripts/build-kubernetes.sh, minutes the first
# time), then runs go test with EVALSI_STRICT=1, so a missing facility
# (etcd, containerd, root for the node) fails instead of skipping.
#
# Usage: scripts/kube-test.sh [go test flags...]   e.g. scripts/kube-test.sh -run Pod -v
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build-kubernetes.sh >/dev/null

# The packages whose tests import kubetest (directly or through a helper).
mapfile -t pkgs < <(go list -test -f '{{if .ForTest}}{{.ForTest}} {{join .Deps " "}}{{end}}' ./... 2>/dev/null |
  awk '{ for (i = 2; i <= NF; i++) if ($i == "evals.si/internal/testenv/kubetest") { print $1; break } }' | sort -u)
# kubetest's own tests (its test package is external, kubetest_test).
pkgs+=(evals.si/internal/testenv/kubetest)
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
echo "kube-test: ${pkgs[*]}" >&2
# One cluster per test binary, about 300 MB each: -p 1 keeps one at a time.
EVALSI_STRICT=1 CGO_ENABLED=0 go test -count=1 -p 1 "$@" "${pkgs[@]}"
