#!/usr/bin/env bash
# Installs uv from PyPI (pinned) and warms what the Python quick start needs
# offline, so python/quickstart_test.go runs without a network:
#   - uv $UV_VERSION in a venv of its own ($EVALSI_UV_PREFIX, default
#     /usr/local/lib/evalsi/uv), linked as /usr/local/bin/uv;
#   - uv's cache: every package of python/uv.lock, installed once into a
#     throwaway environment (uv sync --all-packages --locked), and the
#     workspace members' build backend;
#   - a wheel of setuptools in $EVALSI_PIP_WHEELS (default
#     /var/cache/evalsi/pip-wheels), for `pip install --no-index
#     --find-links` of ./python in the test's fresh venv;
#   - Go's build cache for the launcher's `go build ./cmd/evalsi`.
# Idempotent; prints the uv version.
set -euo pipefail
UV_VERSION=0.13.9
SETUPTOOLS_VERSION=84.2.1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${EVALSI_UV_PREFIX:-/usr/local/lib/evalsi/uv}
wheels=${EVALSI_PIP_WHEELS:-/var/cache/evalsi/pip-wheels}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! "$prefix/bin/uv" --version 2>/dev/null | grep -q "^uv $UV_VERSION "; then
  echo "uv: installing uv==$UV_VERSION into $prefix" >&2
  $SUDO mkdir -p "$(dirname "$prefix")"
  $SUDO python3 -m venv --clear "$prefix"
  $SUDO "$prefix/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
fi
if [ "$(readlink /usr/local/bin/uv 2>/dev/null)" != "$prefix/bin/uv" ]; then
  $SUDO ln -sf "$prefix/bin/uv" /usr/local/bin/uv
fi
uv=$prefix/bin/uv

# uv's cache: the locked packages and the build backend, installed once.
export UV_PYTHON_DOWNLOADS=never
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
UV_PROJECT_ENVIRONMENT=$tmp/venv "$uv" sync -q --all-packages --locked --project "$root/python" >&2

if [ ! -f "$wheels/setuptools-$SETUPTOOLS_VERSION-py3-none-any.whl" ]; then
  $SUDO mkdir -p "$wheels"
  $SUDO "$prefix/bin/python" -m pip download -q --disable-pip-version-check --only-binary=:all: --no-deps -d "$wheels" "setuptools==$SETUPTOOLS_VERSION"
fi

(cd "$root" && CGO_ENABLED=0 go build -o /dev/null ./cmd/evalsi)
"$uv" --version
