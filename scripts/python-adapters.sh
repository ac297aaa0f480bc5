#!/usr/bin/env bash
# Installs the Python adapters' environments (gitignored .venv directories):
#
# python/adapters/swebench/.venv: the official SWE-bench package the
# differential tests run side by side with the Go code:
#   - requirements.txt (swebench==5.0.2 with its dependencies) into the venv;
#   - requirements-classic.txt (swebench==4.1.0, the last release carrying
#     the classic per-repo tables) with --no-deps into .venv/classic, which
#     the adapter's scripts put first on sys.path.
# Tests find the interpreter at .venv/bin/python (or $EVALSI_SWEBENCH_PYTHON);
# see internal/testenv/swebenchref.
#
# python/adapters/bfcl/.venv: bfcl-eval==2026.3.23 and the evalsi_bfcl
# package (evalsi_bfcl:BFCLHarness, which the worker serves with the
# evalsi_harness shim): requirements.txt is a full frozen lock, installed
# with --no-deps (it leaves out bfcl-eval's torch-sized memory-category
# dependencies on purpose); evalsi_bfcl is put on the venv's path with a
# .pth file pointing at python/adapters/bfcl.
#
# Idempotent: a second run with the same requirements only checks stamps
# and exits.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# swebench and bfcl-eval need Python >= 3.10; take the first interpreter that has it.
py=""
for cand in ${PYTHON:-} python3 python3.11 python3.12 python3.10; do
  if command -v "$cand" >/dev/null 2>&1 &&
    "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
    py=$cand
    break
  fi
done
if [ -z "$py" ]; then
  echo "python-adapters: no Python >= 3.10 found (swebench and bfcl-eval need it); set PYTHON=/path/to/python3" >&2
  exit 1
fi

# make_venv DIR: DIR/.venv with $py, unless it is there.
make_venv() {
  local venv=$1/.venv
  if [ ! -x "$venv/bin/python" ]; then
    echo "python-adapters: creating $venv with $py" >&2
    # Debian's own python3 has venv only with the python3-venv package.
    "$py" -m venv "$venv" || {
      rm -rf "$venv"
      echo "python-adapters: $py -m venv failed; on Debian install python3-venv" >&2
      exit 1
    }
  fi
}

swebench() {
  local dir=$root/python/adapters/swebench
  local venv=$dir/.venv
  local classic=$venv/classic
  local stamp=$venv/.evalsi-installed
  local want
  want=$(cat "$dir/requirements.txt" "$dir/requirements-classic.txt" | sha256sum | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  make_venv "$dir"
  echo "python-adapters: installing $dir/requirements.txt and requirements-classic.txt" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$dir/requirements.txt"
  rm -rf "$classic"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$classic" -r "$dir/requirements-classic.txt"
  # Both must import: 5.0.2 from the venv, 4.1.0 from .venv/classic.
  "$venv/bin/python" -c 'import importlib.metadata as m; v = m.version("swebench"); assert v == "5.0.2", v'
  PYTHONPATH=$classic "$venv/bin/python" -c 'import swebench; assert swebench.__version__ == "4.1.0", swebench.__version__'
  echo "$want" >"$stamp"
}

bfcl() {
  local dir=$root/python/adapters/bfcl
  local venv=$dir/.venv
  local stamp=$venv/.evalsi-installed
  local want
  # The adapter's location is part of the stamp: the .pth file names it.
  want=$( (cat "$dir/requirements.txt"; echo "$dir") | sha256sum | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  make_venv "$dir"
  echo "python-adapters: installing $dir/requirements.txt (--no-deps)" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$dir/requirements.txt"
  local site
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$dir" >"$site/evalsi_bfcl.pth"
  # bfcl-eval is the pinned one, and the harness imports with the shim on
  # PYTHONPATH, as the worker runs it.
  PYTHONPATH=$root/python "$venv/bin/python" -c '
import importlib.metadata as m
v = m.version("bfcl-eval"); assert v == "2026.3.23", v
import evalsi_bfcl.harness, evalsi_bfcl._child' >&2
  echo "$want" >"$stamp"
}

swebench
bfcl
