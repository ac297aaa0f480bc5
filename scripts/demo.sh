#!/usr/bin/env bash
# The README's first command: build evalsi and run the offline examples
# embedded (scripted model, real sandbox), printing each run's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v git >/dev/null || need+=(git)
/usr/bin/python3 -c 'import pytest' 2>/dev/null || need+=(python3 python3-pytest)
if [ ${#need[@]} -gt 0 ]; then
  echo "demo: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
CGO_ENABLED=0 go build -buildvcs=auto -o bin/ ./cmd/...
export PATH="$PWD/bin:$PATH"
for f in examples/capitals-offline.yaml examples/trials-offline.yaml \
         examples/agents/fix-calc-offline.yaml examples/agents/fix-calc-wrong-offline.yaml; do
  echo
  echo "== evalsi run -f $f"
  evalsi run -f "$f"
done
echo
echo "Runs are stored; try: evalsi runs list"
