"""The eval script the official harness runs for SWE-bench instances.

Reads a JSON list of instances on stdin and writes a JSON list, one entry
per instance: {"instance_id", "v4", "eval_script"} or {"instance_id",
"error"}. A v5 instance (one with its own eval_script) gets only
eval_script, 5.0.2's make_test_spec(instance).eval_script. For a classic
one:

  v4:          swebench 4.1.0's make_test_spec(instance).eval_script, the
               script built from MAP_REPO_VERSION_TO_SPECS (4.1.0 is the
               last release with those tables);
  eval_script: swebench 5.0.2's make_test_spec(instance).eval_script with
               that script as the instance's eval_script, as a v5 dataset
               carries it (parse_eval_script, record_test_exit_code).

The two releases are both named swebench, so the 4.1.0 step runs in a child
process with .venv/classic (or $EVALSI_SWEBENCH_CLASSIC) first on sys.path.
Nothing here touches the network: make_test_spec's environment and repo
scripts (which would fetch requirements from GitHub) are not built, and
sockets are refused outright.
"""

import json
import os
import socket
import subprocess
import sys
import traceback

CLASSIC = os.environ.get("EVALSI_SWEBENCH_CLASSIC") or os.path.join(sys.prefix, "classic")


def _no_network(*args, **kwargs):
    raise OSError("eval_script: the reference must not use the network")


socket.socket.connect = _no_network
socket.create_connection = _no_network


def is_v5(inst):
    return "eval_script" in inst


def v4_scripts(instances):
    sys.path.insert(0, CLASSIC)
    import swebench
    from swebench.harness.test_spec import test_spec

    assert swebench.__version__ == "4.1.0", swebench.__file__
    # Only eval_script is wanted: the other two scripts of a TestSpec do not
    # feed it, and the environment one downloads requirements files.
    test_spec.make_env_script_list = lambda *a, **k: []
    test_spec.make_repo_script_list = lambda *a, **k: []
    out = []
    for inst in instances:
        if is_v5(inst):
            out.append({"instance_id": inst["instance_id"]})
            continue
        try:
            out.append({"instance_id": inst["instance_id"], "v4": test_spec.make_test_spec(inst).eval_script})
        except Exception as e:  # the harness would fail the instance
            out.append({"instance_id": inst["instance_id"], "error": f"{type(e).__name__}: {e}"})
    return out


def v5_scripts(instances, v4):
    import importlib.metadata

    from swebench.harness.utils import make_test_spec

    assert importlib.metadata.version("swebench") == "5.0.2"
    out = []
    for inst, r in zip(instances, v4):
        if "error" in r:
            out.append(r)
            continue
        v5 = inst if is_v5(inst) else dict(inst, eval_script=r["v4"], image="img", log_parser="parse_log_pytest", eval_type="pass_and_fail")
        try:
            r["eval_script"] = make_test_spec(v5).eval_script
        except Exception:
            r = {"instance_id": inst["instance_id"], "error": traceback.format_exc()}
        out.append(r)
    return out


def main():
    instances = json.load(sys.stdin)
    if sys.argv[1:] == ["--v4"]:
        json.dump(v4_scripts(instances), sys.stdout)
        return
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--v4"],
        input=json.dumps(instances), capture_output=True, text=True, check=False,
    )
    if child.returncode != 0:
        sys.exit(f"eval_script: the swebench 4.1.0 step failed:\n{child.stderr}")
    json.dump(v5_scripts(instances, json.loads(child.stdout)), sys.stdout)


if __name__ == "__main__":
    main()
