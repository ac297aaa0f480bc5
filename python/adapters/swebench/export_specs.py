"""Dump the SWE-bench harness tables classic instances need, for Go.

    python/adapters/swebench/.venv/bin/python python/adapters/swebench/export_specs.py > bench/swebench/specs.json

The tables come from swebench 4.1.0 (in .venv/classic, or
$EVALSI_SWEBENCH_CLASSIC): 5.x dropped them, its instances carry their own
eval_script. Only what the eval-script builders and the parser choice read
is written, sorted, so the file changes only when the package does.
"""

import json
import os
import sys

CLASSIC = os.environ.get("EVALSI_SWEBENCH_CLASSIC") or os.path.join(sys.prefix, "classic")
sys.path.insert(0, CLASSIC)

import swebench  # noqa: E402
from swebench.harness import constants  # noqa: E402
from swebench.harness.log_parsers import MAP_REPO_TO_PARSER  # noqa: E402
from swebench.harness.test_spec import javascript  # noqa: E402

WANT = "4.1.0"

# The keys of a spec that make_eval_script_list_{py,js,common} read.
EVAL_KEYS = ("test_cmd", "eval_commands", "install", "build")


def main():
    if swebench.__version__ != WANT:
        sys.exit(f"export_specs: swebench {swebench.__version__} imported from {swebench.__file__}, want {WANT} (run scripts/python-adapters.sh)")
    specs = {
        repo: {
            version: {k: spec[k] for k in EVAL_KEYS if k in spec}
            for version, spec in versions.items()
        }
        for repo, versions in constants.MAP_REPO_VERSION_TO_SPECS.items()
    }
    out = {
        "swebench_version": swebench.__version__,
        "map_repo_version_to_specs": specs,
        "map_repo_to_ext": constants.MAP_REPO_TO_EXT,
        "map_repo_to_parser": {repo: f.__name__ for repo, f in MAP_REPO_TO_PARSER.items()},
        "fail_only_repos": sorted(constants.FAIL_ONLY_REPOS),
        "non_test_exts": constants.NON_TEST_EXTS,
        # Repos whose JavaScript test commands a function builds from the
        # test patch (Go carries each of these functions; a new one here
        # fails its test).
        "js_custom_test_cmd_repos": sorted(javascript.MAP_REPO_TO_TEST_CMDS),
        "start_test_output": constants.START_TEST_OUTPUT,
        "end_test_output": constants.END_TEST_OUTPUT,
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
