"""What the harness reads of a patch: swebench 4.1.0's get_modified_files
and unidiff's PatchSet paths (calypso's test commands use them).

Reads a JSON list of patches on stdin; writes a JSON list of
{"modified": [...], "paths": [...]} or {"error": "..."}.
"""

import json
import os
import sys

sys.path.insert(0, os.environ.get("EVALSI_SWEBENCH_CLASSIC") or os.path.join(sys.prefix, "classic"))

import swebench  # noqa: E402
from swebench.harness.utils import get_modified_files  # noqa: E402
from unidiff import PatchSet  # noqa: E402


def main():
    assert swebench.__version__ == "4.1.0", swebench.__file__
    out = []
    for patch in json.load(sys.stdin):
        try:
            out.append({"modified": get_modified_files(patch), "paths": [f.path for f in PatchSet(patch)]})
        except Exception as e:
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
