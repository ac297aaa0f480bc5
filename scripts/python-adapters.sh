#!/usr/bin/env bash
# Installs the official SWE-bench package the differential tests run side by
# side with the Go code, into python/adapters/swebench/.venv (gitignored):
#   - requirements.txt (swebench==5.0.2 with its dependencies) into the venv;
#   - requirements-classic.txt (swebench==4.1.0, the last release carrying
#     the classic per-repo tables) with --no-deps into .venv/classic, which
#     the adapter's scripts put first on sys.path.
# Idempotent: a second run with the same requirements only checks a stamp
# and exits. Tests find the interpreter at .venv/bin/python (or
# $EVALSI_SWEBENCH_PYTHON); see internal/testenv/swebenchref.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$root/python/adapters/swebench
venv=$dir/.venv
classic=$venv/classic
stamp=$venv/.evalsi-installed

# swebench needs Python >= 3.10; take the first interpreter that has it.
py=""
for cand in ${PYTHON:-} python3 python3.11 python3.12 python3.10; do
  if command -v "$cand" >/dev/null 2>&1 &&
    "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
    py=$cand
    break
  fi
done
if [ -z "$py" ]; then
  echo "python-adapters: no Python >= 3.10 found (swebench needs it); set PYTHON=/path/to/python3" >&2
  exit 1
fi

want=$(cat "$dir/requirements.txt" "$dir/requirements-classic.txt" | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "python-adapters: creating $venv with $py" >&2
  # Debian's own python3 has venv only with the python3-venv package.
  "$py" -m venv "$venv" || {
    rm -rf "$venv"
    echo "python-adapters: $py -m venv failed; on Debian install python3-venv" >&2
    exit 1
  }
fi
echo "python-adapters: installing $dir/requirements.txt and requirements-classic.txt" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$dir/requirements.txt"
rm -rf "$classic"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$classic" -r "$dir/requirements-classic.txt"
# Both must import: 5.0.2 from the venv, 4.1.0 from .venv/classic.
"$venv/bin/python" -c 'import importlib.metadata as m; v = m.version("swebench"); assert v == "5.0.2", v'
PYTHONPATH=$classic "$venv/bin/python" -c 'import swebench; assert swebench.__version__ == "4.1.0", swebench.__version__'
echo "$want" >"$stamp"
