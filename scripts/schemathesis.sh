#!/usr/bin/env bash
# Installs schemathesis (pinned in python/tools/schemathesis/requirements.txt)
# into python/tools/schemathesis/.venv (gitignored), for
# server/schemathesis_test.go, which runs it against the served OpenAPI
# description. With --cached, an existing venv whose stamp matches the
# requirements is kept without a word; without it, the venv is checked
# (schemathesis must run) and rebuilt when the requirements changed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$root/python/tools/schemathesis
venv=$dir/.venv
stamp=$venv/.evalsi-installed
cached=0
for arg in "$@"; do
  case $arg in
    --cached) cached=1 ;;
    *) echo "schemathesis.sh: unknown argument $arg (use --cached)" >&2; exit 2 ;;
  esac
done

want=$(sha256sum "$dir/requirements.txt" | cut -d' ' -f1)
if [ -x "$venv/bin/schemathesis" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  if [ "$cached" = 1 ] || "$venv/bin/schemathesis" --version >/dev/null 2>&1; then
    echo "$venv/bin/schemathesis"
    exit 0
  fi
fi

# schemathesis 4 needs Python >= 3.9; take the first interpreter that has it.
py=""
for cand in ${PYTHON:-} python3 python3.11 python3.12; do
  if command -v "$cand" >/dev/null 2>&1 &&
    "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' 2>/dev/null; then
    py=$cand
    break
  fi
done
if [ -z "$py" ]; then
  echo "schemathesis.sh: no Python >= 3.9 found; set PYTHON=/path/to/python3" >&2
  exit 1
fi

rm -rf "$venv"
echo "schemathesis.sh: creating $venv with $py" >&2
# Debian's own python3 has venv only with the python3-venv package.
"$py" -m venv "$venv" || {
  rm -rf "$venv"
  echo "schemathesis.sh: $py -m venv failed; on Debian install python3-venv" >&2
  exit 1
}
echo "schemathesis.sh: installing $dir/requirements.txt" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$dir/requirements.txt"
"$venv/bin/schemathesis" --version >&2
echo "$want" >"$stamp"
echo "$venv/bin/schemathesis"
