#!/usr/bin/env bash
# Downloads (does not install) the official packages the Terminal-Bench and
# Harbor differential tests read: their wheels need Python >= 3.12, which
# these machines do not have, so the tests import single modules straight
# from the wheel (see terminalbench.py). Idempotent; the hashes pin the
# exact files.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/wheels"
mkdir -p "$dir"
want() {
	local file=$1 sum=$2 spec=$3
	if [ -f "$dir/$file" ] && echo "$sum  $dir/$file" | sha256sum -c --quiet - 2>/dev/null; then
		return
	fi
	python3 -m pip download --quiet --no-deps --python-version 3.12 --only-binary=:all: -d "$dir" "$spec"
	echo "$sum  $dir/$file" | sha256sum -c --quiet - || {
		echo "fetch-wheels.sh: $file does not have the pinned sha256 $sum" >&2
		exit 1
	}
}
want terminal_bench-0.2.18-py3-none-any.whl 564e8f50968c91a9018edf62ed0c2cfb3a1cf068cf4f843bcaeed06d8340f2e8 terminal-bench==0.2.18
want harbor-0.25.0-py3-none-any.whl 51923ac567fc57b03279e93468b105f689628bcac2cd3d541d4e44aa5c0ec309 harbor==0.25.0
